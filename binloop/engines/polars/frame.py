"""The frame the polars engine works on: one row per valid record, in arrival order."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import orjson
import polars as pl

from binloop.core.schema import RecordLimits, ToolInvocation, dumps_record, validate_record

FRAME_SCHEMA: Final = {
    # the line (or Parquet row) of the record in its file, from 1
    "line": pl.UInt64,
    "id": pl.String,
    # str(session_id); `session_int` tells an int id from a string one (1 and "1" differ)
    "session_id": pl.String,
    "session_int": pl.Boolean,
    "ts": pl.UInt64,
    "tool": pl.String,
    "failure_mode": pl.String,
    "outcome": pl.String,
    "record": pl.Binary,
}


def empty_frame() -> pl.DataFrame:
    return pl.DataFrame(schema=FRAME_SCHEMA)


def empty_rows() -> pl.DataFrame:
    """An empty frame with the block-row column `row` the loader sorts by."""
    return empty_frame().with_columns(row=pl.Series([], dtype=pl.UInt32)).select(
        "row", *FRAME_SCHEMA)


def records_frame(records: Iterable[ToolInvocation],
                  lines: list[int] | None = None) -> pl.DataFrame:
    """Valid records (as `parse_record` returns them) as a frame of `FRAME_SCHEMA`;
    `lines` defaults to 1, 2, ..."""
    recs = list(records)
    columns: dict[str, list[Any]] = {
        "line": lines if lines is not None else list(range(1, len(recs) + 1)),
        "id": [r["id"] for r in recs],
        "session_id": [str(r["session_id"]) for r in recs],
        "session_int": [type(r["session_id"]) is int for r in recs],
        "ts": [r["ts"] for r in recs],
        "tool": [r["tool"] for r in recs],
        "failure_mode": [r["failure_mode"] for r in recs],
        "outcome": [r["outcome"] for r in recs],
        "record": [dumps_record(r) if r["failure_mode"] is not None else None for r in recs],
    }
    return pl.DataFrame(columns, schema=FRAME_SCHEMA)


def record_of(record_json: bytes, failure_mode: str) -> ToolInvocation:
    """The normalised record of a frame row (`record` column) with a failure mode.

    The text is either a line proven valid under the run's limits or `dumps_record` of a
    validated record; validating it again with limits that cannot bite (no clock, no
    truncation, its own failure code) yields exactly the record the run's validation gave.
    """
    code = failure_mode.split(".", 1)[0]
    relaxed = RecordLimits(args_max_bytes=1 << 62, max_future_skew_ms=None,
                           taxonomy=frozenset({code}))
    return validate_record(orjson.loads(record_json), relaxed)
