"""Shared fixtures: the real tau-bench telemetry (skipped where ../shared is absent), the
TypeScript toolchain, NATS servers, a library with a gated tool."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.nats_fixtures import nats_server  # noqa: F401 - shared fixture

# Property tests judge results, not speed: on a loaded CI machine a per-example deadline
# or the too-slow health check fails a correct run. A failure prints the blob that
# replays its example (`@reproduce_failure`), so a counterexample CI drew is not lost.
settings.register_profile("binloop", deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("binloop")

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TAU_TELEMETRY = SHARED_DATA / "tau_airline_telemetry.jsonl"


@pytest.fixture
def tau_telemetry() -> Path:
    if not TAU_TELEMETRY.is_file():
        pytest.skip(f"real telemetry not found at {TAU_TELEMETRY} (the repo's ../shared/data)")
    return TAU_TELEMETRY


@pytest.fixture(scope="session")
def typescript_target() -> object:
    """The TypeScript target with its toolchain installed once (into the user cache).

    Skips, saying why, only where no node runtime (or no typescript install) can be had.
    """
    from pipeline_runner.sandbox import Limits
    from pipeline_runner.targets.typescript import TypeScriptTarget
    from pipeline_runner.toolchain import ToolchainUnavailable

    target = TypeScriptTarget(check_limits=Limits(wall_s=120, cpu_s=120),
                              test_limits=Limits(wall_s=60, cpu_s=60))
    try:
        target.toolchain()
    except ToolchainUnavailable as exc:
        pytest.skip(f"TypeScript target unavailable: {exc}")
    return target


@pytest.fixture(scope="session")
def gated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A library holding the tool built (really: sandboxed checks and tests) from the
    reference agent's own failures, and its name; tests copy it before changing it."""
    from tests.agentkit import agent_failure_event, build_library

    tmp = tmp_path_factory.mktemp("gated")
    tool = build_library(tmp / "library", agent_failure_event(tmp))
    return tmp / "library", tool["name"]


@pytest.fixture
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP listener on 127.0.0.1: (port, what connections sent). A sandboxed tool that
    reaches it has network."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    received: list[bytes] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            received.append(conn.recv(100) or b"(connected)")
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], received
    stop.set()
    thread.join(timeout=5)
    server.close()


@pytest.fixture(scope="module")
def bot() -> Any:
    """The Hanzo bot's runtime (the fetched hanzoai/bot, installed once into the cache);
    the test skips with the reason only where it cannot be had."""
    from binloop.demo.hanzo_bot import BotUnavailable, ensure_bot

    try:
        return ensure_bot()
    except BotUnavailable as exc:
        pytest.skip(f"no Hanzo bot runtime: {exc}")
