"""Same input, same BINEvents: whatever the worker threads, processes and batch size.

A generated file of 50k records (bounded disorder within allowed_lateness, duplicates,
invalid lines) read in many small chunks, through the Bytewax flow with 1 worker, 4
worker threads, 2 processes x 2 workers (real `python -m bytewax.run` processes), and
other batch sizes; every run must give the reference engine's events (content, and order
per key), dead letters, late records and counters. Then the real tau-bench telemetry
through every engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.synthetic import Shape, write_synthetic
from binloop.core.window import WindowSpec
from tests.engine_runs import (
    Outcome,
    engine_config,
    run_bytewax_on,
    run_polars_on,
    run_processes_on,
    run_reference_on,
    same_as_reference,
)

RECORDS = 50_000
SHAPE = Shape(keys=300, sessions=40, failure_rate=0.15, max_lag_ms=40_000, duplicate_rate=0.01,
              invalid_rate=0.005, step_ms=40)
# Per-key order and content are compared; windows small enough that many keys fire
# and sliding windows have late records.
KNOBS: dict[str, Any] = {"theta": 3, "window": WindowSpec.parse("sliding:30s"),
                         "allowed_lateness": 60_000}


@pytest.fixture(scope="module")
def telemetry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("determinism")
    return write_synthetic(base / "telemetry.jsonl", RECORDS, seed=7, shape=SHAPE)


@pytest.fixture(scope="module")
def reference(telemetry: Path) -> Outcome:
    outcome = run_reference_on(engine_config(telemetry, telemetry.parent / "ref", **KNOBS))
    # The stream must exercise what it claims to (events, lates, rejects, duplicates).
    assert len(outcome.events) > 100 and outcome.late and outcome.dead
    assert outcome.counters["duplicates"] > 0
    return outcome


def test_polars_engine_is_the_reference(telemetry: Path, reference: Outcome) -> None:
    assert run_polars_on(engine_config(telemetry, telemetry.parent / "pol", **KNOBS)) == reference


@pytest.mark.slow
@pytest.mark.parametrize(("workers", "batch_size"), [(1, 500), (4, 500), (1, 97), (4, 4096)])
def test_worker_threads_and_batch_sizes(telemetry: Path, reference: Outcome, workers: int,
                                        batch_size: int) -> None:
    out = telemetry.parent / f"threads-{workers}-{batch_size}"
    got = run_bytewax_on(engine_config(telemetry, out, batch_size=batch_size, **KNOBS), workers)
    same_as_reference(got, reference)


@pytest.mark.slow
def test_two_processes_of_two_workers(telemetry: Path, reference: Outcome) -> None:
    config = engine_config(telemetry, telemetry.parent / "procs", batch_size=500, **KNOBS)
    same_as_reference(run_processes_on(config, processes=2, workers=2), reference)


@pytest.mark.parametrize("window", ["session", "global", "sliding:2m"])
def test_tau_telemetry_through_every_engine(tau_telemetry: Path, tmp_path: Path,
                                            window: str) -> None:
    knobs = {"theta": 2, "window": WindowSpec.parse(window)}
    reference = run_reference_on(engine_config(tau_telemetry, tmp_path / "ref", **knobs))
    assert reference.counters["records_read"] == 1164 and reference.events
    assert run_polars_on(engine_config(tau_telemetry, tmp_path / "pol", **knobs)) == reference
    for workers in (1, 3):
        config = engine_config(tau_telemetry, tmp_path / f"bw{workers}", batch_size=100, **knobs)
        same_as_reference(run_bytewax_on(config, workers), reference)
