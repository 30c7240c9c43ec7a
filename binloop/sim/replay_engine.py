"""Which engine a sweep replays on: the polars engine when it is installed, else the reference.

A sweep loads a file once and runs the detector many times (every θ, every window), so
an engine here is two calls: `load(path, limits)` -> :class:`Loaded`, and
`detect(loaded, params)` -> BINEvents. `Loaded.frame` is the valid records in arrival
order as a polars frame (`row, id, session, ts, tool, failure_mode, outcome`), which is
what the sweep's metrics are computed on.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

import polars as pl

from binloop.core.detection import DetectionParams, detect
from binloop.core.events import BINEvent
from binloop.core.reading import DEFAULT_READ, ReadOptions
from binloop.core.schema import RecordLimits, ToolInvocation
from binloop.core.summary import Progress
from binloop.replay.ingest import parse_chunk
from binloop.replay.readers import InputReader, input_size

ENGINES: Final = ("auto", "polars", "reference")
POLARS_MODULE: Final = "binloop.engines.polars.engine"
METRIC_COLUMNS: Final = ("row", "id", "session", "ts", "tool", "failure_mode", "outcome")


@dataclass
class Loaded:
    """A replayed file: the engine's own input and the metrics frame."""

    engine: str
    frame: pl.DataFrame
    engine_input: Any
    invalid: int


def polars_engine_available() -> bool:
    return importlib.util.find_spec(POLARS_MODULE) is not None


def resolve(engine: str) -> str:
    """`auto` -> `polars` when `binloop.engines.polars.engine` exists, else `reference`."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r} is not one of {', '.join(ENGINES)}")
    if engine == "auto":
        return "polars" if polars_engine_available() else "reference"
    if engine == "polars" and not polars_engine_available():
        raise ValueError(f"the polars engine ({POLARS_MODULE}) is not installed")
    return engine


def load(path: str, limits: RecordLimits, engine: str = "auto",
         progress: bool = True, options: ReadOptions = DEFAULT_READ) -> Loaded:
    """Read `path` once for the sweep (valid records, in arrival order), through the
    reader every engine uses (`options`: `--max-line-bytes`, `--follow-symlinks`)."""
    name = resolve(engine)
    started = time.perf_counter()
    if progress:
        print(f"sweep: loading {path} for the {name} engine ...", file=sys.stderr, flush=True)
    loaded = _load(path, limits, name, options)
    if progress:
        print(f"sweep: loaded {loaded.frame.height:,} valid records ({loaded.invalid:,} invalid) "
              f"in {time.perf_counter() - started:.1f}s", file=sys.stderr, flush=True)
    return loaded


def _load(path: str, limits: RecordLimits, name: str, options: ReadOptions) -> Loaded:
    if name == "polars":
        module = importlib.import_module(POLARS_MODULE)
        progress = Progress(input_size(path, options.follow_symlinks), out=sys.stderr)
        frame_in = module.load_records(path, limits, on_progress=progress.update,
                                       options=options)
        return Loaded(name, metrics_frame_from_polars(frame_in), frame_in,
                      _invalid_of(frame_in))
    records, invalid = read_records(path, limits, options)
    return Loaded(name, metrics_frame(records), records, invalid)


def detect_events(loaded: Loaded, params: DetectionParams) -> list[BINEvent]:
    if loaded.engine == "polars":
        module = importlib.import_module(POLARS_MODULE)
        events: list[BINEvent] = module.detect_frame(loaded.engine_input, params)
        return events
    return detect(params, loaded.engine_input)


def detect_thetas(loaded: Loaded, params: DetectionParams,
                  thetas: Sequence[int]) -> dict[int, list[BINEvent]]:
    """The events of every θ of `thetas` (other settings from `params`). The polars engine
    computes a window's counts once for all θ; the reference engine, the spec, replays."""
    if loaded.engine == "polars":
        module = importlib.import_module(POLARS_MODULE)
        found: dict[int, list[BINEvent]] = module.detect_thetas(loaded.engine_input, params,
                                                                 thetas)
        return found
    # Each θ's own digest (DetectionParams derives it from its fields).
    return {theta: detect(replace(params, theta=theta), loaded.engine_input)
            for theta in thetas}


def read_records(path: str, limits: RecordLimits,
                 options: ReadOptions = DEFAULT_READ) -> tuple[list[ToolInvocation], int]:
    """All valid records of `path` in arrival order, and the number of invalid ones
    (progress lines on stderr for large inputs)."""
    records: list[ToolInvocation] = []
    invalid = 0
    progress = Progress(input_size(path, options.follow_symlinks), out=sys.stderr)
    reader = InputReader(path, 8192, options=options)
    for chunk in reader:
        parsed = parse_chunk(chunk, limits)
        records.extend(parsed.records)
        invalid += len(parsed.dead)
        progress.update(reader.bytes_done, len(records) + invalid)
    return records, invalid


def _session_key(session_id: object, is_int: bool) -> str:
    """A session id as text that keeps int 1 and string "1" apart (they are different)."""
    return ("i:" if is_int else "s:") + str(session_id)


def metrics_frame(records: list[ToolInvocation]) -> pl.DataFrame:
    """The metric columns of records (`session` as `i:<int>` or `s:<text>`)."""
    return pl.DataFrame({
        "row": pl.int_range(0, len(records), eager=True),
        "id": [r["id"] for r in records],
        "session": [_session_key(r["session_id"], type(r["session_id"]) is int)
                    for r in records],
        "ts": [r["ts"] for r in records],
        "tool": [r["tool"] for r in records],
        "failure_mode": [r["failure_mode"] for r in records],
        "outcome": [r["outcome"] for r in records],
    }, schema_overrides={"ts": pl.Int64, "failure_mode": pl.String, "id": pl.String,
                         "session": pl.String, "tool": pl.String, "outcome": pl.String})


def metrics_frame_from_polars(frame: Any) -> pl.DataFrame:
    """The metric columns of the polars engine's loaded frame."""
    data = frame if isinstance(frame, pl.DataFrame) else getattr(frame, "frame", frame)
    session = pl.col("session_id").cast(pl.String)
    if "session_int" in data.columns:
        session = pl.concat_str([pl.when(pl.col("session_int")).then(pl.lit("i:"))
                                 .otherwise(pl.lit("s:")), session])
    else:
        session = pl.concat_str([pl.lit("i:"), session])
    if "record" in data.columns and data["id"].null_count():
        data = _with_content_ids(data)
    return data.select(
        row=pl.int_range(0, pl.len()), id=pl.col("id"),
        session=session, ts=pl.col("ts").cast(pl.Int64),
        tool=pl.col("tool"), failure_mode=pl.col("failure_mode"), outcome=pl.col("outcome"))


def _with_content_ids(data: pl.DataFrame) -> pl.DataFrame:
    """Ids for the rows with a failure mode that the polars loader left without one (it
    computes a line's content hash only where used): the sweep matches events by id."""
    module = importlib.import_module("binloop.engines.polars.read")
    missing = data.with_row_index("_row").filter(pl.col("id").is_null()
                                                 & pl.col("record").is_not_null())
    ids = [module.record_of(text, mode)["id"] for text, mode in
           missing.select("record", "failure_mode").iter_rows()]
    filled = pl.Series("id", [None] * data.height, dtype=pl.String).scatter(
        missing["_row"].cast(pl.Int64).to_list(), ids) if ids else None
    if filled is None:
        return data
    return data.with_columns(id=pl.coalesce(pl.col("id"), filled))


def _invalid_of(frame: Any) -> int:
    dead = getattr(frame, "dead", None)
    return len(dead) if dead is not None else 0
