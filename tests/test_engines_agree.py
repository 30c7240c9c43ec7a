"""The three engines agree: reference (the spec), polars, and the Bytewax flow.

On random streams (every window kind, theta 1..5, mode_level None/1, small evidence_max,
out-of-order ts, interleaved int and str sessions, exact duplicates, invalid lines) they
must give the same events (content, and order per key), dead letters, late records and
counters.

Clock skew: every clock is a key's own (`binloop.core.detection`), so the streams carry any
disorder (lag far beyond `allowed_lateness`), records of other keys dated up to a day
ahead or behind, records beyond the future-skew allowance (dead letters), and damaged
(truncated) lines, for every engine, the Bytewax flow with 1 and 3 workers included.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import binloop.engines.polars.read as polars_read
from binloop.core.config import Config
from binloop.core.detection import Detector, DetectorStats
from binloop.core.schema import InvalidRecord, ToolInvocation
from binloop.core.window import WindowSpec
from binloop.engines.polars.engine import detect_rows, detect_thetas
from binloop.engines.polars.read import records_frame
from binloop.engines.reference import detect_records
from binloop.replay.ingest import parse_item
from tests.engine_runs import (
    engine_config,
    run_bytewax_on,
    run_polars_on,
    run_reference_on,
    same_as_reference,
)
from tests.strategies import detection_settings, telemetry_lines

FAST = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FILES = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
BYTEWAX = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))


def valid_records(lines: list[bytes]) -> list[ToolInvocation]:
    records = []
    for line in lines:
        try:
            records.append(parse_item(line))
        except InvalidRecord:
            continue
    return records


def reference_detection(config: Config, records: list[ToolInvocation]) -> tuple[
        list[Any], list[int], DetectorStats]:
    """The spec itself: events, indexes of late records, counters."""
    detector = Detector(config.detection())
    events, late = detect_records(detector, records)
    return list(events), late, detector.stats


def write_lines(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


@FAST
@given(lines=telemetry_lines(max_lag=3000), knobs=detection_settings())
def test_polars_detection_is_the_detector(lines: list[bytes], knobs: dict[str, Any]) -> None:
    """Any disorder, any lateness: events, lates and counters exactly as the detector's."""
    config = Config(**knobs)
    records = valid_records(lines)
    events, late, stats = reference_detection(config, records)
    got = detect_rows(records_frame(records), config.detection())
    assert got.events == events
    assert got.late_rows == late
    assert got.stats == stats


@FILES
@given(lines=telemetry_lines(max_lag=3000), knobs=detection_settings(),
       batch_size=st.sampled_from((1, 3, 8, 4096)), late_out=st.booleans(),
       block_bytes=st.sampled_from((1, 300, 1 << 23)))
def test_polars_run_writes_what_the_reference_writes(
        tmp_path_factory: pytest.TempPathFactory, lines: list[bytes], knobs: dict[str, Any],
        batch_size: int, late_out: bool, block_bytes: int) -> None:
    """Whole replays of a file: the same events, dead letters (reasons, positions, and
    the reference's order, lates interleaved chunk by chunk) and counters; also when the
    engine works in tiny blocks, carrying its state from one to the next."""
    base = tmp_path_factory.mktemp("run")
    path = write_lines(base / "in.jsonl", lines)
    extra = {"batch_size": batch_size, **({} if late_out else {"late_out": None})}
    reference = run_reference_on(engine_config(path, base / "ref", **knobs, **extra))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(polars_read, "READ_BYTES", block_bytes)
        polars = run_polars_on(engine_config(path, base / "pol", **knobs, **extra))
    assert polars == reference


@pytest.mark.slow
@BYTEWAX
@given(lines=telemetry_lines(max_lag=3000, max_size=60), knobs=detection_settings(),
       shards=st.sampled_from((1, 3, 64)), batch_size=st.sampled_from((4, 16, 4096)))
def test_bytewax_flow_agrees_with_reference_and_polars(
        tmp_path_factory: pytest.TempPathFactory, lines: list[bytes], knobs: dict[str, Any],
        shards: int, batch_size: int) -> None:
    """Any disorder and skew; 1 worker (`run_main`) and 3 worker threads."""
    base = tmp_path_factory.mktemp("flow")
    path = write_lines(base / "in.jsonl", lines)
    extra = {"shards": shards, "batch_size": batch_size}
    reference = run_reference_on(engine_config(path, base / "ref", **knobs, **extra))
    assert run_polars_on(engine_config(path, base / "pol", **knobs, **extra)) == reference
    one = run_bytewax_on(engine_config(path, base / "bw1", **knobs, **extra))
    same_as_reference(one, reference)
    three = run_bytewax_on(engine_config(path, base / "bw3", **knobs, **extra), workers=3)
    same_as_reference(three, reference)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(lines=telemetry_lines(max_lag=3000), knobs=detection_settings())
def test_one_pass_for_every_theta_is_a_run_per_theta(lines: list[bytes],
                                                     knobs: dict[str, Any]) -> None:
    """The sweep's one pass (`detect_thetas`) fires what one detector per θ fires."""
    config = Config(**knobs)
    records = valid_records(lines)
    thetas = (1, 2, 3, 5)
    # each θ's events carry that θ's configuration digest, as a run at that θ does
    got = detect_thetas(records_frame(records), config.detection(), thetas)
    for theta, events in got.items():
        assert events == reference_detection(config.replace(theta=theta), records)[0]


@pytest.mark.parametrize(("ts_unit", "failure_modes"),
                         [("auto", "given-else-infer"), ("s", "infer"), ("auto", "given")])
def test_bytewax_block_decoder_keeps_ts_unit_and_inferred_modes(
        tmp_path: Path, ts_unit: str, failure_modes: str) -> None:
    """The bytewax engine's block decoder defers what the schema rewrites (a ts in
    seconds, a failure mode inferred from the error text): same events, dead letters
    and counters as the reference engine, in blocks that mix both kinds."""
    base = 1_700_000_000_000
    lines: list[bytes] = []
    for i in range(60):
        fields: dict[str, Any] = {"session_id": i % 4, "tool": f"t{i % 2}", "args": {},
                                  "outcome": "failure" if i % 3 else "timeout"}
        # in seconds: every fifth (`auto` tells them apart), or all (`s`)
        in_seconds = ts_unit == "s" or i % 5 == 0
        fields["ts"] = (base + i * 1000) // 1000 if in_seconds else base + i * 1000
        if i % 2:
            fields["failure_mode"] = "PERM"
        fields["error"] = "permission denied: /srv/x" if i % 4 else "no such file: /tmp/y"
        lines.append(orjson.dumps(fields))
    path = write_lines(tmp_path / "in.jsonl", lines)
    knobs = {"ts_unit": ts_unit, "failure_modes": failure_modes, "theta": 3,
             "window": WindowSpec.parse("global"), "max_future_skew": None}
    reference = run_reference_on(engine_config(path, tmp_path / "ref", **knobs))
    assert reference.events  # the case is not vacuous
    same_as_reference(run_bytewax_on(engine_config(path, tmp_path / "bw", **knobs)), reference)
