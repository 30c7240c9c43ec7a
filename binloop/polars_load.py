"""Telemetry files as a polars frame of valid records, for the polars engine and sweeps.

The result is exactly what the reference reader gives (`binloop.inputs` + `binloop.ingest`):
the same valid records in the same order, the same dead letters with the same reasons,
the same blank-line count. Speed comes from a *proof* path; exactness from a fallback:

* Fast path (JSONL): polars parses whole blocks of lines at once (`read_ndjson`, every
  field as text). A line is accepted there only when the line is byte for byte the JSON
  encoding of the typed values polars read (keys in sorted order, compact or `", "`/`": "`
  separators, as `dumps_record`, the simulator and Python's `json.dumps(sort_keys=True)`
  write), and those values pass the checks of `binloop.schema` (done here as conservative
  column expressions). Such a line cannot mean anything else to `orjson`, so it is valid
  and its record is known. `args` is not typed: it is the text between the fields before
  and after it, accepted only when it is an object that cannot be truncated.
* Every other line (unsorted keys, escapes we do not re-encode, a missing `id`, anything
  invalid) goes through `binloop.schema.parse_record`, which decides and gives the reason.

The frame holds the fields detection needs, plus `record`: a JSON text from which
:func:`record_of` rebuilds the normalised record (the evidence of an event). Only records
with a failure mode can be evidence, so `record` is null for the others.
"""

from __future__ import annotations

import gzip
import io
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, NamedTuple

import orjson
import polars as pl

from binloop.ingest import parse_item
from binloop.inputs import STDIN, InputReader, RawItem, list_input_files
from binloop.schema import (
    DEFAULT_LIMITS,
    FAILURE_MODE_MAX_CHARS,
    LINE_MAX_BYTES,
    OUTCOMES,
    TOOL_MAX_CHARS,
    DeadLetter,
    InvalidRecord,
    RecordLimits,
    ToolInvocation,
    dumps_record,
    raw_text,
    validate_record,
)

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
BLOCK_LINES: Final = 1 << 16
LOAD_THREADS: Final = 2
PARQUET_BATCH: Final = 1 << 16
# A record near the future-skew bound is left to the reference check (it reads the clock).
SKEW_MARGIN_MS: Final = 60_000
# `args` text of at most limit/5 bytes cannot re-encode to more than the limit (the worst
# growth of a JSON token under orjson is a short exponent float: `1e15` -> 18 bytes).
ARGS_GROWTH: Final = 5

_FIELDS: Final = ("agent_id", "args", "duration_ms", "error", "failure_mode", "id", "outcome",
                  "session_id", "tool", "ts")
_UINT: Final = r"^(0|[1-9][0-9]{0,17})$"
_INT: Final = r"^-?(0|[1-9][0-9]{0,17})$"
_MODE: Final = r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$"
_KNOWN_KEY: Final = '"(' + "|".join(_FIELDS) + r')"[ \t\r\n]*:'
# \uD800-\uDFFF escapes are left to the slow path: polars accepts a lone surrogate,
# orjson does not.
_UNSAFE_ESCAPE: Final = r"\\u[dD][89a-fA-F]"
# JSON tokens that orjson may re-encode longer than written: exponents, very long integers.
_GROWS: Final = r"[0-9][eE][+-]?[0-9]+[,}\] ]|[0-9]{19}"


class LoadedRecords(NamedTuple):
    """Valid records in arrival order (`FRAME_SCHEMA`), rejects, and blank lines skipped."""

    frame: pl.DataFrame
    dead: list[DeadLetter]
    blank: int


def empty_frame() -> pl.DataFrame:
    return pl.DataFrame(schema=FRAME_SCHEMA)


def load_records(path: str, limits: RecordLimits = DEFAULT_LIMITS) -> LoadedRecords:
    """Every record of `path` (a file, a directory of them, or - for stdin)."""
    frames: list[pl.DataFrame] = []
    dead: list[DeadLetter] = []
    blank = 0
    for name in list_input_files(path):
        part = load_file(name, limits)
        frames.append(part.frame)
        dead.extend(part.dead)
        blank += part.blank
    return LoadedRecords(pl.concat(frames) if frames else empty_frame(), dead, blank)


def load_file(name: str, limits: RecordLimits = DEFAULT_LIMITS) -> LoadedRecords:
    """One input file (the name as `list_input_files` gives it: it is the dead letters' source)."""
    lowered = name.lower()
    if lowered.endswith((".parquet", ".pq")):
        return _load_parquet(name, limits)
    if name == STDIN:
        data = sys.stdin.buffer.read()
    elif lowered.endswith(".gz"):
        data = gzip.decompress(Path(name).read_bytes())
    else:
        data = Path(name).read_bytes()
    return load_jsonl_bytes(data, name, limits)


def load_jsonl_bytes(data: bytes, source: str,
                     limits: RecordLimits = DEFAULT_LIMITS) -> LoadedRecords:
    """JSONL content; line numbers (the dead letters' position) count from 1."""
    lines = split_lines(data)
    starts = range(0, len(lines), BLOCK_LINES)
    # Blocks overlap on two threads: polars releases the GIL while one block is parsed.
    with ThreadPoolExecutor(max_workers=LOAD_THREADS) as pool:
        parts = list(pool.map(
            lambda start: _load_block(lines[start:start + BLOCK_LINES], start + 1, source,
                                      limits), starts))
    frames = [part.frame for part in parts]
    dead = [letter for part in parts for letter in part.dead]
    blank = sum(part.blank for part in parts)
    return LoadedRecords(pl.concat(frames) if frames else empty_frame(), dead, blank)


def split_lines(data: bytes) -> list[bytes]:
    """Lines as `binloop.inputs` reads them: split at \\n, trailing \\r and \\n removed."""
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    if b"\r" in data:
        lines = [line.rstrip(b"\r") for line in lines]
    return lines


def _load_block(lines: list[bytes], first_line: int, source: str,
                limits: RecordLimits) -> LoadedRecords:
    raw = pl.Series("raw", lines, dtype=pl.Binary)
    block = pl.DataFrame({"text": _utf8(lines, raw), "size": raw.bin.size()}).with_row_index("row")
    candidates = block.filter(
        pl.col("text").is_not_null() & (pl.col("size") <= LINE_MAX_BYTES)
        & pl.col("text").str.starts_with("{") & pl.col("text").str.ends_with("}")
        & ~pl.col("text").str.contains(_UNSAFE_ESCAPE))
    proven = _prove(lines, candidates, limits, first_line)
    unsettled = block.filter((pl.col("size") > 0) & ~pl.col("row").is_in(proven["row"].implode()))
    slow = _slow_path(lines, unsettled["row"].to_list(), first_line, source,  # type: ignore[arg-type]
                      limits)
    frame = proven if slow.frame.is_empty() else pl.concat([proven, slow.frame]).sort("row")
    blank = int((block["size"] == 0).sum())
    return LoadedRecords(frame.drop("row"), slow.dead, blank)


def _utf8(lines: list[bytes], raw: pl.Series) -> pl.Series:
    """The lines as text, null where a line is not UTF-8 (the slow path rejects those)."""
    try:
        text: pl.Series = raw.cast(pl.String)
        return text
    except pl.exceptions.ComputeError:
        return pl.Series([_decoded(line) for line in lines], dtype=pl.String)


def _decoded(line: bytes) -> str | None:
    try:
        return line.decode()
    except UnicodeDecodeError:
        return None


def _slow_path(items: list[RawItem], rows: Iterable[int], first_line: int, source: str,
               limits: RecordLimits) -> LoadedRecords:
    """The reference parser, item by item: valid records and dead letters with reasons
    (as `binloop.ingest.parse_chunk`)."""
    kept: list[int] = []
    records: list[ToolInvocation] = []
    dead: list[DeadLetter] = []
    blank = 0
    for row in rows:
        item = items[row]
        if not item:
            blank += 1
            continue
        try:
            records.append(parse_item(item, limits))
            kept.append(row)
        except InvalidRecord as exc:
            raw = raw_text(item) if isinstance(item, bytes) else raw_text(orjson.dumps(item))
            dead.append(DeadLetter(raw, str(exc), source, str(first_line + row)))
    lines = [first_line + row for row in kept]
    frame = records_frame(records, lines).with_columns(row=pl.Series(kept, dtype=pl.UInt32))
    return LoadedRecords(frame.select("row", *FRAME_SCHEMA), dead, blank)


def _load_parquet(name: str, limits: RecordLimits) -> LoadedRecords:
    """Parquet rows go through the reference validator (rows arrive already decoded)."""
    frames: list[pl.DataFrame] = []
    dead: list[DeadLetter] = []
    blank = 0
    for chunk in InputReader(name, PARQUET_BATCH):
        part = _slow_path(chunk.items, range(len(chunk.items)), chunk.first_line, chunk.source,
                          limits)
        frames.append(part.frame.drop("row"))
        dead.extend(part.dead)
        blank += part.blank
    return LoadedRecords(pl.concat(frames) if frames else empty_frame(), dead, blank)


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


# --- the proof path -----------------------------------------------------------------


def _prove(lines: list[bytes], candidates: pl.DataFrame, limits: RecordLimits,
           first_line: int) -> pl.DataFrame:
    """The candidate lines proven valid, as frame rows (with their block `row`)."""
    read = _read_fields(lines, candidates)
    if read is None:
        return _no_rows()
    spaced = (read["text"].str.slice(read["text"].str.find('":', literal=True) + 2, 1)
              == " ").fill_null(False)
    parts = [_prove_style(read.filter(spaced == style), limits, style, first_line)
             for style in (False, True)]
    return pl.concat(parts).sort("row")


def _no_rows() -> pl.DataFrame:
    return empty_frame().with_columns(row=pl.Series([], dtype=pl.UInt32)).select(
        "row", *FRAME_SCHEMA)


def _read_fields(lines: list[bytes], candidates: pl.DataFrame) -> pl.DataFrame | None:
    """The candidates with every field but `args` as text (`v_<name>`), None if polars
    cannot read them."""
    schema = {name: pl.String for name in _FIELDS if name != "args"}
    for attempt in range(2):
        if candidates.is_empty():
            return None
        if candidates.height == len(lines):
            joined = b"\n".join(lines)
        else:
            joined = b"\n".join([lines[row] for row in candidates["row"].to_list()])
        try:
            values = pl.read_ndjson(io.BytesIO(joined), schema=schema)
        except pl.exceptions.PolarsError:
            if attempt:
                return None
            # Some line is not JSON: keep those that polars can read one by one.
            candidates = candidates.filter(
                pl.col("text").str.json_path_match("$.ts").is_not_null())
            continue
        if values.height != candidates.height:
            return None
        return pl.concat([candidates, values.rename({n: f"v_{n}" for n in schema})],
                         how="horizontal")
    return None


def _prove_style(lines: pl.DataFrame, limits: RecordLimits, spaced: bool,
                 first_line: int) -> pl.DataFrame:
    """Lines (all written with one separator style) whose text is the encoding of their
    values: `head` + `args` object + `tail`, or `whole` for a line without an object."""
    if lines.is_empty():
        return _no_rows()
    kv, sep = (": ", ", ") if spaced else (":", ",")
    text = pl.col("text")
    session_is_str = text.str.contains(f'"session_id"{kv}"', literal=True)
    session = pl.when(session_is_str).then(_json_string(pl.col("v_session_id"))).otherwise(
        pl.col("v_session_id"))
    # Every field after `args`, up to the closing brace; null if a required one is missing.
    after = pl.concat_str([
        _optional("duration_ms", kv, sep, pl.col("v_duration_ms")),
        _optional("error", kv, sep, _json_string(pl.col("v_error"))),
        _optional("failure_mode", kv, sep, _quoted(pl.col("v_failure_mode"))),
        pl.lit(f'"id"{kv}"'), pl.col("v_id"),
        pl.lit(f'"{sep}"outcome"{kv}"'), pl.col("v_outcome"),
        pl.lit(f'"{sep}"session_id"{kv}'), session,
        pl.lit(f'{sep}"tool"{kv}'), _quoted(pl.col("v_tool")),
        pl.lit(f'{sep}"ts"{kv}'), pl.col("v_ts"), pl.lit("}")])
    agent = _optional("agent_id", kv, sep, _json_string(pl.col("v_agent_id")))
    marked = lines.with_columns(session_int=~session_is_str,
                                args_object=text.str.contains(f'"args"{kv}{{', literal=True))
    with_args = _with_args(marked.filter(pl.col("args_object")), limits, kv, sep, agent, after)
    args_null = pl.when(text.str.contains(f'"args"{kv}null', literal=True)).then(
        pl.lit(f'"args"{kv}null{sep}')).otherwise(pl.lit(""))
    whole = pl.concat_str([pl.lit("{"), agent, args_null, after])
    without = (marked.lazy().filter(~pl.col("args_object"))
               .filter((text == whole).fill_null(False)).collect())
    checked = pl.concat([with_args, without], how="diagonal")
    return _typed(checked.lazy(), limits, first_line).collect()


def _with_args(lines: pl.DataFrame, limits: RecordLimits, kv: str, sep: str, agent: pl.Expr,
               after: pl.Expr) -> pl.DataFrame:
    """Lines `head` + args + `tail` whose args text is an object kept as it is."""
    text = pl.col("text")
    head = pl.concat_str([pl.lit("{"), agent, pl.lit(f'"args"{kv}')])
    tail = pl.concat_str([pl.lit(sep), after])
    args_len = (pl.col("size").cast(pl.Int64) - pl.col("head").str.len_bytes().cast(pl.Int64)
                - pl.col("tail").str.len_bytes().cast(pl.Int64))
    framed = (lines.lazy()
              .with_columns(head=head, tail=tail)
              .with_columns(args_len=args_len)
              .filter((text.str.starts_with(pl.col("head")) & text.str.ends_with(pl.col("tail"))
                       & pl.col("args_len").is_between(2, limits.args_max_bytes))
                      .fill_null(False))
              .with_columns(args=text.str.slice(pl.col("head").str.len_chars(),
                                                pl.col("args_len")))
              .filter(_args_object(pl.col("args")))
              .drop("head", "tail")
              .collect())
    # Long `args` could re-encode longer, or nest deeper than orjson allows: check those.
    long_args = pl.col("args_len") * ARGS_GROWTH > limits.args_max_bytes
    return pl.concat([framed.filter(~long_args),
                      framed.filter(long_args & _args_stay(pl.col("args")))])


def _optional(name: str, kv: str, sep: str, encoded: pl.Expr) -> pl.Expr:
    """`"name": value, `, or `"name": null, ` when the line has that, or "" (absent)."""
    written_null = f'"{name}"{kv}null{sep}'
    return (pl.when(pl.col(f"v_{name}").is_not_null())
            .then(pl.concat_str([pl.lit(f'"{name}"{kv}'), encoded, pl.lit(sep)]))
            .when(pl.col("text").str.contains(written_null, literal=True))
            .then(pl.lit(written_null)).otherwise(pl.lit("")))


def _quoted(value: pl.Expr) -> pl.Expr:
    """A string that is only valid (or only taken here) without characters to escape."""
    return pl.concat_str([pl.lit('"'), value, pl.lit('"')])


def _json_string(value: pl.Expr) -> pl.Expr:
    """The JSON text of a string as orjson and json.dumps write it, for strings whose only
    characters to escape are `"` and `\\` (others are left to the slow path)."""
    escaped = (value.str.replace_all("\\", "\\\\", literal=True)
               .str.replace_all('"', '\\"', literal=True))
    return pl.concat_str([pl.lit('"'), escaped, pl.lit('"')])


def _args_object(args: pl.Expr) -> pl.Expr:
    """The text between the fields before and after `args` is one object (a valid line
    whose `args` is followed by another pair would show one of our keys in it)."""
    return args.str.starts_with("{") & args.str.ends_with("}") & ~args.str.contains(_KNOWN_KEY)


def _args_stay(args: pl.Expr) -> pl.Expr:
    """Long `args` that orjson re-encodes no longer and that are not deeply nested."""
    return ~args.str.contains(_GROWS) & (args.str.count_matches(r"[\[{]") < 500)


def _typed(lines: pl.LazyFrame, limits: RecordLimits, first_line: int) -> pl.LazyFrame:
    """Rows whose values pass validation, as frame rows; the rest are dropped (slow path)."""
    mode = pl.col("v_failure_mode")
    code = mode.str.extract(r"^([^.]+)", 1).str.to_uppercase()
    taxonomy = sorted(limits.taxonomy)
    ts_ok = pl.col("v_ts").str.contains(_UINT)
    if limits.max_future_skew_ms is not None:
        bound = int(time.time() * 1000) + limits.max_future_skew_ms - SKEW_MARGIN_MS
        ts_ok = ts_ok & (pl.col("v_ts").cast(pl.UInt64, strict=False) <= max(bound, 0))
    session = pl.col("v_session_id")
    outcome = pl.col("v_outcome").str.to_lowercase()
    valid = (
        ts_ok
        & pl.when(pl.col("session_int")).then(session.str.contains(_INT))
        .otherwise(session.str.len_chars().is_between(1, TOOL_MAX_CHARS))
        & pl.col("v_tool").str.len_chars().is_between(1, TOOL_MAX_CHARS)
        & pl.col("v_outcome").str.contains(r"^[A-Za-z]+$") & outcome.is_in(sorted(OUTCOMES))
        & (mode.is_null() | (mode.str.contains(_MODE)
                             & (mode.str.len_chars() <= FAILURE_MODE_MAX_CHARS)
                             & code.is_in(taxonomy)))
        & (pl.col("v_duration_ms").is_null() | pl.col("v_duration_ms").str.contains(_UINT))
        & pl.col("v_id").str.contains(r"^[0-9a-fA-F]{64}$")
    )
    normal_mode = pl.concat_str([code, mode.str.slice(code.str.len_bytes())])
    return lines.filter(valid.fill_null(False)).select(
        "row",
        line=pl.col("row").cast(pl.UInt64) + first_line,
        id=pl.col("v_id").str.to_lowercase(),
        session_id=session,
        session_int="session_int",
        ts=pl.col("v_ts").cast(pl.UInt64),
        tool="v_tool",
        failure_mode=normal_mode,
        outcome=outcome,
        record=pl.when(mode.is_not_null()).then(pl.col("text").cast(pl.Binary)),
    )
