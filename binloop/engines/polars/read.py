"""Reading telemetry for the polars engine: files as frames of valid records, a block at a
time, exactly as the reference reader (`binloop.replay.readers` + `binloop.replay.ingest`)
reads them.

The same valid records in the same order, the same dead letters (reasons, positions), the
same blank-line count. A block of lines is validated with column expressions: a line is
*proven* when it is byte for byte the JSON encoding of the values polars read, in the key
order and with the separators its writer used (a block learns the few layouts its lines
use from one line each), and those values pass the checks of `binloop.core.schema`, built from
its declared bounds (`OUTCOMES`, `TOOL_MAX_CHARS`, the taxonomy, ...): anything doubtful
is simply not proven. Such a line can mean nothing else to orjson, so the reference
parser would accept it and produce exactly these values. `args` is the text between the
fields before and after it, accepted when it is one JSON object that validation keeps as
it is. Lines not proven are decided by `binloop.core.schema.parse_record`, which gives the
reasons: in Python only for the lines a block cannot prove (invalid ones and odd ones
out), never for the valid records of a well-formed file.

A proven line without an `id` has a null `id` here: its content hash is computed only
where it is used (`record_of`: evidence, late records, and keys where ids could collide).
`record` (the line, or `dumps_record` of the validated record) is kept only for records
with a failure mode.
"""

from __future__ import annotations

import functools
import io
import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final, NamedTuple, Protocol

import orjson
import polars as pl

from binloop.core.classify import GIVEN, INFER
from binloop.core.reading import DEFAULT_READ, ReadOptions
from binloop.core.schema import (
    DEFAULT_LIMITS,
    FAILURE_MODE_MAX_CHARS,
    LINE_MAX_BYTES,
    OUTCOMES,
    TOOL_MAX_CHARS,
    DeadLetter,
    InvalidRecord,
    RecordLimits,
    RecordParser,
    ToolInvocation,
    dumps_record,
    raw_text,
    ts_floor,
)
from binloop.replay.formats import AUTO, BINLOOP, LineMapper, mapped, mapper, resolve, sniff_file
from binloop.replay.readers import STDIN, InputReader, LineBlock, RawItem, line_blocks

FRAME_SCHEMA: Final = {
    # the line (or Parquet row) of the record in its file, from 1
    "line": pl.UInt64,
    # null for a proven line without an id (see `record_of`)
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
LOAD_THREADS: Final = 2
# Bytes of whole lines a block aims at, as lines of a typical record (`LINE_GUESS` bytes).
READ_BYTES: Final = 8 << 20
LINE_GUESS: Final = 128
PARQUET_BATCH: Final = 1 << 16
# Layouts a block tries before leaving the rest of its lines to the reference parser.
MAX_LAYOUTS: Final = 16
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
    """Valid records in arrival order (`FRAME_SCHEMA`), rejects, and blank lines skipped;
    files found damaged, records whose ts was converted from seconds."""

    frame: pl.DataFrame
    dead: list[DeadLetter]
    blank: int
    # Non-blank lines read, where a line may hold several records or none (an OTLP
    # export); None: one record or one reject per line.
    lines: int | None = None
    damaged: int = 0
    ts_converted: int = 0


class Block(NamedTuple):
    """One block of one input file: its records, rejects and blanks, the number of lines
    it covers and how far into the file (bytes) reading has got."""

    source: str
    loaded: LoadedRecords
    lines: int
    done_bytes: int


def empty_frame() -> pl.DataFrame:
    return pl.DataFrame(schema=FRAME_SCHEMA)


def _empty_rows() -> pl.DataFrame:
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


@functools.lru_cache(maxsize=64)
def _relaxed(code: str) -> RecordParser:
    return RecordParser(RecordLimits(args_max_bytes=1 << 62, max_future_skew_ms=None,
                                     taxonomy=frozenset({code})))


def record_of(record_json: bytes, failure_mode: str) -> ToolInvocation:
    """The normalised record of a frame row (`record` column) with a failure mode.

    The text is either a line proven valid under the run's limits or `dumps_record` of a
    validated record; validating it again with limits that cannot bite (no clock, no
    truncation, its own failure code) yields exactly the record the run's validation gave,
    its content-hash `id` included.
    """
    return _relaxed(failure_mode.split(".", 1)[0]).validate(orjson.loads(record_json))


# --- files and blocks -----------------------------------------------------------------


OnProgress = Callable[[int, int], None]


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def file_blocks(name: str, limits: RecordLimits = DEFAULT_LIMITS,
                block_bytes: int | None = None, input_format: str = AUTO,
                options: ReadOptions = DEFAULT_READ) -> Iterator[Block]:
    """The blocks of one input file (the name as `list_input_files` gives it: it is the
    dead letters' source); memory holds a few blocks, never the file. Lines are read,
    split and refused by `binloop.replay.readers.line_blocks`, as every engine reads them
    (damaged files, oversized lines, line ends, byte order marks). Other input formats
    than binloop's own go through their mapper and the reference validator."""
    lowered = name.lower()
    if input_format == AUTO:
        input_format = _sniff_stdin() if name == STDIN else sniff_file(name)
    if lowered.endswith((".parquet", ".pq")) or input_format != BINLOOP:
        yield from _parquet_blocks(name, limits, input_format, options)
    else:
        yield from _jsonl_blocks(line_blocks(name, _block_lines(block_bytes), options),
                                 name, limits)


def jsonl_blocks(stream: Readable, source: str, limits: RecordLimits = DEFAULT_LIMITS,
                 block_bytes: int | None = None) -> Iterator[Block]:
    """JSONL from a stream (in memory or a pipe), as `file_blocks` reads a file."""
    yield from _jsonl_blocks(line_blocks(source, _block_lines(block_bytes), stream=stream),
                             source, limits)


def _block_lines(block_bytes: int | None) -> int:
    return max(1, (block_bytes or READ_BYTES) // LINE_GUESS)


def _jsonl_blocks(blocks: Iterable[LineBlock], source: str,
                  limits: RecordLimits) -> Iterator[Block]:
    """Blocks of lines, validated two at a time; line numbers (the dead letters'
    position) count from 1. A block's `lines` counts the lines the reader refused too."""
    pending: list[tuple[Future[LoadedRecords], int, int]] = []
    covered = 0  # lines of the file in the blocks so far
    # Two blocks in flight: polars releases the GIL while one block is validated.
    with ThreadPoolExecutor(max_workers=LOAD_THREADS) as pool:
        for block in blocks:
            end = block.first_line - 1 + len(block.lines)
            data = b"\n".join(block.lines) + b"\n" if block.lines else b""
            pending.append((pool.submit(_load_block, data, block.first_line, source, limits,
                                        block.rejects, block.damaged),
                            end - covered, block.done_bytes))
            covered = end
            if len(pending) >= LOAD_THREADS:
                future, lines, at = pending.pop(0)
                yield Block(source, future.result(), lines, at)
        for future, lines, at in pending:
            yield Block(source, future.result(), lines, at)


def concat_blocks(blocks: Iterable[Block]) -> LoadedRecords:
    """Blocks as one `LoadedRecords` (a whole input in memory: for sweeps and tests)."""
    parts = [block.loaded for block in blocks]
    frames = [part.frame for part in parts]
    return LoadedRecords(pl.concat(frames) if frames else empty_frame(),
                         [letter for part in parts for letter in part.dead],
                         sum(part.blank for part in parts),
                         damaged=sum(part.damaged for part in parts),
                         ts_converted=sum(part.ts_converted for part in parts))


def _lines_of(data: bytes) -> tuple[pl.Series, list[bytes] | None]:
    """The lines of a block as text, split at \n with trailing \r removed, and (only
    when the block is not all UTF-8) as bytes, with null text for lines not UTF-8."""
    try:
        whole = pl.Series([data], dtype=pl.Binary).cast(pl.String)
    except pl.exceptions.ComputeError:
        lines = data.split(b"\n")
        if data.endswith(b"\n"):
            lines.pop()
        lines = [line.rstrip(b"\r") for line in lines]
        return pl.Series("text", [_decoded(line) for line in lines], dtype=pl.String), lines
    text = whole.str.split("\n").explode()
    if data.endswith(b"\n"):
        text = text.head(-1)
    if b"\r" in data:
        text = text.str.strip_chars_end("\r")
    return text.rename("text"), None


def _load_block(data: bytes, first_line: int, source: str, limits: RecordLimits,
                rejects: tuple[DeadLetter, ...] = (), damaged: int = 0) -> LoadedRecords:
    """A block of lines: proven ones, the others through the reference parser; the
    reader's `rejects` (lines before these, or a damaged file) are its first dead letters."""
    if not data:
        return LoadedRecords(empty_frame(), list(rejects), 0, damaged=damaged)
    text, raw_lines = _lines_of(data)
    block = pl.DataFrame({"text": text}).with_columns(
        size=pl.col("text").str.len_bytes()).with_row_index("row")
    if raw_lines is not None:
        block = block.with_columns(size=pl.Series([len(line) for line in raw_lines],
                                                  dtype=pl.UInt32))
    whole = data if raw_lines is None and b"\r" not in data else None
    proven = _prove(block, _candidates(block), limits, first_line, whole)
    blank = int((block["size"] == 0).sum())
    if proven.height == block.height - blank:
        return LoadedRecords(proven.drop("row"), list(rejects), blank, damaged=damaged)
    unsettled = block.filter((pl.col("size") > 0) & ~pl.col("row").is_in(proven["row"].implode()))
    rows = unsettled["row"].to_list()
    if raw_lines is not None:
        items: Sequence[RawItem] = raw_lines
    else:
        items = dict(zip(rows, [t.encode() for t in unsettled["text"].to_list()],
                         strict=True))  # type: ignore[assignment]
    slow = _slow_path(items, rows, first_line, source, limits)
    frame = proven if slow.frame.is_empty() else pl.concat([proven, slow.frame]).sort("row")
    return LoadedRecords(frame.drop("row"), [*rejects, *slow.dead], blank, damaged=damaged,
                         ts_converted=slow.ts_converted)


def _decoded(line: bytes) -> str | None:
    try:
        return line.decode()
    except UnicodeDecodeError:
        return None


def _slow_path(items: Sequence[RawItem], rows: Iterable[int], first_line: int, source: str,
               limits: RecordLimits, line_mapper: LineMapper | None = None) -> LoadedRecords:
    """The reference parser, item by item: valid records and dead letters with reasons
    (as `binloop.replay.ingest.parse_chunk`)."""
    kept: list[int] = []
    records: list[ToolInvocation] = []
    dead: list[DeadLetter] = []
    blank = 0
    parser = RecordParser(limits)
    for row in rows:
        item = items[row]
        if not item:
            blank += 1
            continue
        try:
            if line_mapper is not None and isinstance(item, bytes):
                for fields in mapped(line_mapper, item, source, first_line + row):
                    try:
                        records.append(parser.validate(fields))
                        kept.append(row)
                    except InvalidRecord as exc:
                        dead.append(DeadLetter(raw_text(item), str(exc), source,
                                               str(first_line + row)))
            else:
                records.append(parser.validate(item) if isinstance(item, dict)
                               else parser.parse(item))
                kept.append(row)
        except InvalidRecord as exc:
            raw = raw_text(item) if isinstance(item, bytes) else raw_text(orjson.dumps(item))
            dead.append(DeadLetter(raw, str(exc), source, str(first_line + row)))
    lines = [first_line + row for row in kept]
    frame = records_frame(records, lines).with_columns(row=pl.Series(kept, dtype=pl.UInt32))
    return LoadedRecords(frame.select("row", *FRAME_SCHEMA), dead, blank,
                         ts_converted=parser.ts_converted)


def _sniff_stdin() -> str:
    """`auto` on stdin: the first line in what is buffered (nothing is consumed)."""
    stdin = sys.stdin.buffer
    head = stdin.peek(1 << 16) if isinstance(stdin, io.BufferedReader) else b""
    return resolve(AUTO, head.split(b"\n")) or BINLOOP


def _parquet_blocks(name: str, limits: RecordLimits, input_format: str = BINLOOP,
                    options: ReadOptions = DEFAULT_READ) -> Iterator[Block]:
    """Parquet rows go through the reference validator (rows arrive already decoded); so
    do the lines of other input formats, after their mapper."""
    line_mapper = mapper(input_format)
    reader = InputReader(name, PARQUET_BATCH, input_format=input_format, options=options)
    for chunk in reader:
        part = _slow_path(chunk.items, range(len(chunk.items)), chunk.first_line, chunk.source,
                          limits, line_mapper)
        lines = len(chunk.items) - part.blank if line_mapper is not None else None
        loaded = LoadedRecords(part.frame.drop("row"), [*chunk.rejects, *part.dead], part.blank,
                               lines, chunk.damaged_files, part.ts_converted)
        yield Block(name, loaded, len(chunk.items), reader.bytes_done)


# --- the fast path: lines proven valid --------------------------------------------------


class _Layout(NamedTuple):
    """How one writer lays a record out: its keys in order (each but `args` with a value
    or null; `args` flagged when written as null), whether `session_id` is a string, and
    the separators."""

    keys: tuple[tuple[str, bool], ...]
    session_str: bool
    kv: str
    sep: str


def _candidates(block: pl.DataFrame) -> pl.DataFrame:
    """The lines (`text`, `size`, `row`) worth trying: UTF-8 objects within the size limit."""
    text = pl.col("text")
    return block.filter(text.is_not_null() & (pl.col("size") <= LINE_MAX_BYTES)
                        & text.str.starts_with("{") & text.str.ends_with("}")
                        & ~text.str.contains(_UNSAFE_ESCAPE))


def _prove(block: pl.DataFrame, candidates: pl.DataFrame, limits: RecordLimits,
           first_line: int, whole: bytes | None) -> pl.DataFrame:
    """The candidate lines proven valid, as frame rows (with their block `row`); `whole`
    is the block's bytes when they are exactly its lines joined by \n."""
    read = _read_fields(block.height, candidates, whole)
    if read is None:
        return _empty_rows()
    proven: list[pl.DataFrame] = []
    tried: set[_Layout] = set()
    left = read
    for _ in range(MAX_LAYOUTS):
        if left.is_empty():
            break
        layout = _learn_layout(left["text"].head(64).to_list(), tried)
        if layout is None:
            break
        tried.add(layout)
        matched = _matching(left, layout, limits)
        if not matched.is_empty():
            proven.append(_typed(matched.lazy(), limits, first_line).collect())
            left = left.filter(~pl.col("row").is_in(matched["row"].implode()))
    if not proven:
        return _empty_rows()
    return pl.concat(proven).sort("row")


def _learn_layout(texts: list[str], tried: set[_Layout]) -> _Layout | None:
    """The layout of the first of `texts` that has a new one."""
    for text in texts:
        layout = _layout_of(text)
        if layout is not None and layout not in tried:
            return layout
    return None


def _layout_of(text: str) -> _Layout | None:
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not set(obj) <= set(_FIELDS) or "ts" not in obj:
        return None
    after_first = text.find('":', 1) + 2
    kv = ": " if text[after_first:after_first + 1] == " " else ":"
    sep = ", " if kv == ": " else ","
    return _Layout(tuple((key, key == "args" and obj[key] is None) for key in obj),
                   isinstance(obj.get("session_id"), str), kv, sep)


def _read_fields(lines: int, candidates: pl.DataFrame,
                 whole: bytes | None) -> pl.DataFrame | None:
    """The candidates with every field but `args` as text (`v_<name>`), None if polars
    cannot read them."""
    schema = {name: pl.String for name in _FIELDS if name != "args"}
    for attempt in range(2):
        if candidates.is_empty():
            return None
        if candidates.height == lines and whole is not None:
            joined = whole
        else:
            joined = "\n".join(candidates["text"].to_list()).encode()
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


def _encoded(key: str, layout: _Layout) -> pl.Expr:
    """The JSON text of field `key`'s value as the layout's writer writes it."""
    value = pl.col(f"v_{key}")
    if key in ("ts", "duration_ms"):
        return value
    if key == "session_id":
        return _json_string(value) if layout.session_str else value
    if key in ("agent_id", "error"):
        return _json_string(value)
    return _quoted(value)


def _matching(read: pl.DataFrame, layout: _Layout, limits: RecordLimits) -> pl.DataFrame:
    """The lines whose text is exactly `layout` filled with their values (`args` aside)."""
    kv, sep = layout.kv, layout.sep
    pieces: list[list[pl.Expr]] = [[]]
    for index, (key, is_null) in enumerate(layout.keys):
        lead = "{" if index == 0 else sep
        if key == "args" and not is_null:
            pieces[0].append(pl.lit(f'{lead}"args"{kv}'))
            pieces.append([])
            continue
        if is_null:
            pieces[-1].append(pl.lit(f'{lead}"{key}"{kv}null'))
            continue
        pieces[-1].extend([pl.lit(f'{lead}"{key}"{kv}'), pl.when(
            pl.col(f"v_{key}").is_null()).then(pl.lit("null")).otherwise(_encoded(key, layout))])
    pieces[-1].append(pl.lit("}"))
    absent = [pl.col(f"v_{name}").is_null() for name in _FIELDS
              if name != "args" and name not in dict(layout.keys)]
    shape = pl.all_horizontal([pl.lit(True), *absent])
    text = pl.col("text")
    base = read.with_columns(session_int=pl.lit(not layout.session_str))
    if len(pieces) == 1:
        return base.filter((shape & (text == pl.concat_str(pieces[0]))).fill_null(False))
    head, tail = pl.concat_str(pieces[0]), pl.concat_str(pieces[1])
    args_len = (pl.col("size").cast(pl.Int64) - pl.col("head").str.len_bytes().cast(pl.Int64)
                - pl.col("tail").str.len_bytes().cast(pl.Int64))
    framed = (base.lazy()
              .filter(shape.fill_null(False))
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


def _quoted(value: pl.Expr) -> pl.Expr:
    """A string that is only valid (or only taken here) without characters to escape."""
    return pl.concat_str([pl.lit('"'), value, pl.lit('"')])


def _json_string(value: pl.Expr) -> pl.Expr:
    """The JSON text of a string as orjson and json.dumps write it, for strings whose only
    characters to escape are `"`, `\\` and newline, tab, carriage return (others are left
    to the slow path)."""
    escaped = (value.str.replace_all("\\", "\\\\", literal=True)
               .str.replace_all('"', '\\"', literal=True)
               .str.replace_all("\n", "\\n", literal=True)
               .str.replace_all("\t", "\\t", literal=True)
               .str.replace_all("\r", "\\r", literal=True))
    return pl.concat_str([pl.lit('"'), escaped, pl.lit('"')])


def _args_object(args: pl.Expr) -> pl.Expr:
    """The text between the fields before and after `args` is one object: a line whose
    `args` is followed by another pair would show one of our keys in it (written plainly:
    a key spelt with \\u escapes is not taken here at all)."""
    return (args.str.starts_with("{") & args.str.ends_with("}")
            & ~args.str.contains(_KNOWN_KEY) & ~args.str.contains("\\u", literal=True))


def _args_stay(args: pl.Expr) -> pl.Expr:
    """Long `args` that orjson re-encodes no longer and that are not deeply nested."""
    return ~args.str.contains(_GROWS) & (args.str.count_matches(r"[\[{]") < 500)


def _typed(lines: pl.LazyFrame, limits: RecordLimits, first_line: int) -> pl.LazyFrame:
    """Rows whose values pass validation, as frame rows; the rest are dropped (slow path).
    The bounds are `binloop.core.schema`'s own constants and the run's `RecordLimits`."""
    mode = pl.col("v_failure_mode")
    code = mode.str.extract(r"^([^.]+)", 1).str.to_uppercase()
    taxonomy = sorted(limits.taxonomy)
    ts_ok = pl.col("v_ts").str.contains(_UINT)
    if limits.max_future_skew_ms is not None:
        bound = int(time.time() * 1000) + limits.max_future_skew_ms - SKEW_MARGIN_MS
        ts_ok = ts_ok & (pl.col("v_ts").cast(pl.UInt64, strict=False) <= max(bound, 0))
    floor = ts_floor(limits.ts_unit)  # a ts below it is in seconds: the slow path converts
    if floor > 0:
        ts_ok = ts_ok & (pl.col("v_ts").cast(pl.UInt64, strict=False) >= floor
                         if math.isfinite(floor) else pl.lit(False))
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
        & (pl.col("v_id").is_null() | pl.col("v_id").str.contains(r"^[0-9a-fA-F]{64}$"))
    )
    if limits.failure_modes != GIVEN:
        # A record whose failure mode is to be inferred takes the slow path, where the
        # one classifier of the parse step decides it.
        inferred = outcome.is_in(sorted(limits.infer_outcomes))
        valid = valid & ~(inferred if limits.failure_modes == INFER else
                          inferred & mode.is_null())
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
