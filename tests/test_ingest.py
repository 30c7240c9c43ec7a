"""`parse_counted` (the dataflow's parser) against `parse_chunk` (every engine's)."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from binloop.core.schema import RecordLimits
from binloop.replay.ingest import parse_chunk, parse_counted
from binloop.replay.readers import RawChunk, RawItem
from tests.strategies import telemetry_lines

COUNTS = frozenset({"failure", "timeout"})


def counted_view(chunk: RawChunk, limits: RecordLimits, counts: frozenset[str]) -> Any:
    parsed = parse_chunk(chunk, limits)
    counted = [r for r in parsed.records
               if r["outcome"] in counts and r["failure_mode"] is not None]
    max_ts = max((r["ts"] for r in parsed.records), default=None)
    return counted, parsed.dead, len(parsed.records), parsed.blank, max_ts


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None, max_examples=200)
@given(telemetry_lines(max_lag=50, max_size=60), st.integers(0, 3),
       st.sampled_from([COUNTS, frozenset({"failure"}), frozenset({"success", "cancelled"})]),
       st.sampled_from([RecordLimits(), RecordLimits(args_max_bytes=10, max_future_skew_ms=None)]))
def test_parse_counted_is_parse_chunk_filtered(lines: list[bytes], dicts: int,
                                               counts: frozenset[str],
                                               limits: RecordLimits) -> None:
    items: list[RawItem] = list(lines)
    for index in range(min(dicts, len(items))):  # Parquet rows arrive decoded
        try:
            decoded = orjson.loads(items[index])
        except orjson.JSONDecodeError:
            continue
        if isinstance(decoded, dict):
            items[index] = decoded
    chunk = RawChunk("p", 0, "src", 5, items)
    got = parse_counted(chunk, counts, limits)
    assert (got.counted, got.dead, got.valid, got.blank, got.max_ts) == \
        counted_view(chunk, limits, counts)


def test_a_chunk_without_valid_records_has_no_max_ts() -> None:
    chunk = RawChunk("p", 0, "src", 1, [b"", b"nope", b"[1]"])
    got = parse_counted(chunk, COUNTS)
    assert (got.valid, got.blank, len(got.dead), got.max_ts) == (0, 1, 2, None)
