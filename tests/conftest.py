"""Shared fixtures: the real tau-bench telemetry (skipped where ../shared is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.nats_fixtures import nats_server  # noqa: F401 - shared fixture

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TAU_TELEMETRY = SHARED_DATA / "tau_airline_telemetry.jsonl"


@pytest.fixture
def tau_telemetry() -> Path:
    if not TAU_TELEMETRY.is_file():
        pytest.skip(f"real telemetry not found at {TAU_TELEMETRY} (the repo's ../shared/data)")
    return TAU_TELEMETRY
