"""Reading telemetry for the polars engine: files as frames of valid records, a block at a
time, exactly as the reference reader (`binloop.replay.readers` + `binloop.replay.ingest`)
reads them.

The same valid records in the same order, the same dead letters (reasons, positions), the
same blank-line count. A plain JSONL file is read in blocks of whole lines as they lie in
the file (`_plain_blocks`); other inputs, and what only the line reader decides (`\\r`
line ends, byte order marks, oversized lines), go through
`binloop.replay.readers.line_blocks`. A block is validated with column expressions: polars
reads the fields detection needs, and a line is *proven* when nothing in its text can make
orjson (the schema's reader) see other values (`_DOUBTFUL`: a field polars reads written
twice, keys spelt with escapes, surrogates, a field whose type only the text shows) and
those values pass the schema's checks: outcomes and failure modes decided by the schema's
own functions once per distinct value, the rest built from its declared bounds
(`TOOL_MAX_CHARS`, the ts bounds, ...). Anything doubtful is simply not proven. Lines not
proven are decided by `binloop.core.schema.RecordParser`, which gives the reasons: in
Python only for the lines a block cannot prove (invalid ones and odd ones out), never for
the valid records of a well-formed file.

A proven line without an `id` has a null `id` here: its content hash is computed only
where it is used (`record_of`: evidence, late records, and keys where ids could collide).
`record` (the line, or `dumps_record` of the validated record) is kept only for records
with a failure mode.
"""

from __future__ import annotations

import functools
import io
import math
import os
import re
import sys
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Final, Literal, NamedTuple, Protocol

import orjson
import polars as pl

from binloop.core.classify import GIVEN, INFER
from binloop.core.reading import BOM, DEFAULT_READ, ReadOptions
from binloop.core.schema import (
    DEFAULT_LIMITS,
    LINE_MAX_BYTES,
    TOOL_MAX_CHARS,
    DeadLetter,
    InvalidRecord,
    RecordLimits,
    RecordParser,
    ToolInvocation,
    _check_failure_mode,
    _outcome,
    dumps_record,
    raw_text,
    ts_floor,
)
from binloop.replay.formats import AUTO, BINLOOP, LineMapper, mapped, mapper, resolve, sniff_file
from binloop.replay.readers import (
    GZ_SUFFIXES,
    STDIN,
    InputReader,
    LineBlock,
    RawItem,
    line_blocks,
)

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
# Bytes a plain file is read in (a block: its whole lines); the line reader's blocks
# hold READ_BYTES // LINE_GUESS lines.
READ_BYTES: Final = 8 << 20
LINE_GUESS: Final = 128
PARQUET_BATCH: Final = 1 << 16
# A record near the future-skew bound is left to the reference check (it reads the clock).
SKEW_MARGIN_MS: Final = 60_000
# `args` text of at most limit/5 bytes cannot re-encode to more than the limit (the worst
# growth of a JSON token under orjson is a short exponent float: `1e15` -> 18 bytes).
ARGS_GROWTH: Final = 5
BOM_TEXT: Final = BOM.decode()

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
    # lines of the block, blank ones included (`_load_block`)
    block_lines: int = 0


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
    dead letters' source); memory holds a few blocks, never the file. A plain JSONL file
    is read in blocks of whole lines as they are (`_plain_blocks`); other files and what
    a plain one holds beyond that (`\\r` line ends, byte order marks, oversized lines)
    are split and refused by `binloop.replay.readers.line_blocks`, as every engine reads
    them. Other input formats than binloop's own go through their mapper and the
    reference validator."""
    lowered = name.lower()
    if input_format == AUTO:
        input_format = _sniff_stdin() if name == STDIN else sniff_file(name)
    if lowered.endswith((".parquet", ".pq")) or input_format != BINLOOP:
        yield from _parquet_blocks(name, limits, input_format, options)
    elif name != STDIN and not lowered.endswith(GZ_SUFFIXES) and block_bytes is None:
        yield from _plain_blocks(name, limits, options)
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


def _jsonl_blocks(blocks: Iterable[LineBlock], source: str, limits: RecordLimits,
                  covered: int = 0) -> Iterator[Block]:
    """Blocks of lines as the line reader split and refused them, validated two at a
    time; line numbers (the dead letters' position) count from 1, `covered` lines lie
    before the first block. A block's `lines` counts the lines the reader refused too."""
    pending: list[tuple[Future[LoadedRecords], int, int]] = []
    # Two blocks in flight: polars releases the GIL while one block is validated.
    with ThreadPoolExecutor(max_workers=LOAD_THREADS) as pool:
        for block in blocks:
            end = block.first_line - 1 + len(block.lines)
            data = b"\n".join(block.lines) + b"\n" if block.lines else b""
            pending.append((pool.submit(_load_block, data, block.first_line, source, limits,
                                        None, block.rejects, block.damaged),
                            end - covered, block.done_bytes))
            covered = end
            if len(pending) >= LOAD_THREADS:
                future, lines, at = pending.pop(0)
                yield Block(source, future.result(), lines, at)
        for future, lines, at in pending:
            yield Block(source, future.result(), lines, at)


class _NeedsLineReader(Exception):
    """A block holds what only the line reader decides (an oversized line, a BOM)."""


def _plain_blocks(name: str, limits: RecordLimits, options: ReadOptions) -> Iterator[Block]:
    """A plain JSONL file in blocks of whole lines (`READ_BYTES` read at a time), each
    validated as read: no line is cut out in Python. Up to its size at open, as the line
    reader reads it. From the first block holding a `\\r`, a BOM at
    a line start or a line beyond `max_line_bytes`, and for a last line without its line
    end, the rest of the file goes to the line reader, which decides those."""
    pending: deque[_Pending] = deque()
    handover: tuple[int, int] | None = None  # (byte offset, lines before it)
    at_reader: tuple[int, int] | None = None  # where reading found what needs the line reader
    with open(name, "rb", buffering=0) as file, \
            ThreadPoolExecutor(max_workers=LOAD_THREADS) as pool:
        limit = os.fstat(file.fileno()).st_size
        offset = 0  # bytes of the blocks submitted so far
        taken = [0]  # lines of the blocks handed out so far

        def submit(data: bytes, size: int) -> None:
            # Numbered from 1 in the block, and renumbered in order (`_take`): counting
            # the lines here would hold the interpreter lock for a pass over the bytes.
            nonlocal offset
            pending.append(_Pending(pool.submit(_load_block, data, 1, name, limits, options),
                                    offset, offset + size))
            offset += size

        lines = _WholeLines(file, limit, options.max_line_bytes)
        while handover is None:
            block = lines.next_block()
            if block is None:
                if lines.held:
                    # A last line without its line end (the line reader decides whether
                    # it is complete or its writer is still at it), or one too long.
                    at_reader = (offset, -1)
                break
            if b"\r" in block:
                at_reader = (offset, -1)
                break
            submit(block, len(block))
            while len(pending) > LOAD_THREADS and handover is None:
                handover = yield from _take(pending, name, taken)
        # The blocks before: a block of them may itself need the line reader.
        while pending and handover is None:
            handover = yield from _take(pending, name, taken)
        for waiting in pending:
            waiting.future.cancel()
    if handover is None and at_reader is not None:
        handover = (at_reader[0], taken[0])  # every block before it has been handed out
    if handover is not None:
        at, before = handover
        yield from _jsonl_blocks(line_blocks(name, _block_lines(None), options, offset=at,
                                             line=before), name, limits, before)


class _WholeLines:
    """A file, up to `limit` bytes, in blocks of whole lines read through one buffer that
    is used again and again: the kernel copies into it and each block is one copy out
    of it. (A fresh buffer per read, and the partial last line joined to the next read,
    cost a page fault per 4 KiB: 0.32 s of system time on a 546 MB file against 0.11 s
    this way, measured.)"""

    def __init__(self, file: io.RawIOBase, limit: int, max_line_bytes: int) -> None:
        self._file = file
        self._left = limit
        self._max_line_bytes = max_line_bytes
        self._buffer = bytearray(READ_BYTES)
        self.held = 0  # bytes of a line without its line end (yet) at the buffer's start

    def next_block(self) -> bytes | None:
        """The next block, or None: the input is done (a last line without its line end
        is `held`), or a line has grown beyond `max_line_bytes` without one."""
        while True:
            if self.held == len(self._buffer):  # one line fills the buffer: make room
                self._buffer.extend(bytes(len(self._buffer)))
            want = min(len(self._buffer) - self.held, self._left)
            got = (self._file.readinto(memoryview(self._buffer)[self.held:self.held + want])
                   if want > 0 else 0)
            if not got:
                return None
            self._left -= got
            end = self.held + got
            cut = self._buffer.rfind(b"\n", 0, end) + 1
            if cut == 0:
                self.held = end
                if end > self._max_line_bytes:
                    return None
                continue
            with memoryview(self._buffer) as view:
                block = bytes(view[:cut])
                tail = bytes(view[cut:end])
            self._buffer[:len(tail)] = tail
            self.held = len(tail)
            return block


class _Pending(NamedTuple):
    future: Future[LoadedRecords]
    start: int  # byte offset of the block in its file
    end: int


def _take(pending: deque[_Pending], name: str,
          taken: list[int]) -> Generator[Block, None, tuple[int, int] | None]:
    """Yield the oldest block, its lines numbered after the `taken[0]` lines handed out
    before it; or say where the line reader must take over."""
    block = pending.popleft()
    try:
        loaded = block.future.result()
    except _NeedsLineReader:
        return (block.start, taken[0])
    before = taken[0]
    taken[0] += loaded.block_lines
    yield Block(name, _renumbered(loaded, before), loaded.block_lines, block.end)
    return None


def _renumbered(loaded: LoadedRecords, before: int) -> LoadedRecords:
    """A block numbered from 1, numbered after `before` lines."""
    if before == 0:
        return loaded
    frame = loaded.frame.with_columns(line=pl.col("line") + before)
    dead = [replace(letter, position=str(int(letter.position) + before))
            for letter in loaded.dead]
    return loaded._replace(frame=frame, dead=dead)


def concat_blocks(blocks: Iterable[Block]) -> LoadedRecords:
    """Blocks as one `LoadedRecords` (a whole input in memory: for sweeps and tests)."""
    parts = [block.loaded for block in blocks]
    frames = [part.frame for part in parts]
    return LoadedRecords(pl.concat(frames) if frames else empty_frame(),
                         [letter for part in parts for letter in part.dead],
                         sum(part.blank for part in parts),
                         damaged=sum(part.damaged for part in parts),
                         ts_converted=sum(part.ts_converted for part in parts))


def _lines_of(data: bytes) -> tuple[pl.Series, pl.Series, list[bytes] | None]:
    """The lines of a block (whole lines, each ending in \\n) as text and their sizes in
    bytes; and, only when some line is not UTF-8 (or the block is not readable as lines
    of text), as bytes, with null text for a line that is not UTF-8."""
    # A block of UTF-8 (every block of a well-formed file) is read as it is, and a U+FFFD
    # in it is written: no search for one. (0.18 CPU-s per 1M realistic lines against
    # 0.29 for the lenient read and the search; a block that is not UTF-8 pays both.)
    text = _read_lines(data, "utf8")
    if text is not None:
        size = text.str.len_bytes().fill_null(0)
        if size.sum() + text.len() == len(data):  # every line read, as it is
            return text, size, None
    else:
        text = _read_lines(data, "utf8-lossy")
    raw: list[bytes] | None = None
    if text is not None:
        size = text.str.len_bytes().fill_null(0)
        odd = text.str.contains("\ufffd", literal=True)
        if not odd.any():
            if size.sum() + text.len() == len(data):  # every line read, as it is
                return text, size, None
        else:
            raw = data.split(b"\n")
            raw.pop()
            if len(raw) == text.len():
                # Only the lines holding a U+FFFD are decoded here: is it written, or
                # read from bytes that are not UTF-8?
                rows = odd.arg_true().to_list()
                return (text.scatter(rows, [_decoded(raw[row]) for row in rows]),
                        size.scatter(rows, [len(raw[row]) for row in rows]), raw)
    if raw is None:
        raw = data.split(b"\n")
        raw.pop()
    return (pl.Series("text", [_decoded(line) for line in raw], dtype=pl.String),
            pl.Series("size", [len(line) for line in raw], dtype=pl.UInt32), raw)


def _read_lines(data: bytes, encoding: Literal["utf8", "utf8-lossy"]) -> pl.Series | None:
    """One column of text per line, or None where polars cannot read the block so: a
    control character as the separator (a line holding one is not JSON, and fails
    this), no quoting; `utf8` refuses a block with bytes that are not UTF-8,
    `utf8-lossy` reads them as U+FFFD."""
    try:
        return pl.read_csv(io.BytesIO(data), has_header=False, separator="\x1f",
                           quote_char=None, schema={"text": pl.String},
                           encoding=encoding)["text"]
    except pl.exceptions.PolarsError:
        return None


def _decoded(line: bytes) -> str | None:
    try:
        return line.decode()
    except UnicodeDecodeError:
        return None


def _load_block(data: bytes, first_line: int, source: str, limits: RecordLimits,
                options: ReadOptions | None, rejects: tuple[DeadLetter, ...] = (),
                damaged: int = 0) -> LoadedRecords:
    """A block of whole lines: proven ones, the others through the reference parser; the
    reader's `rejects` (lines before these, or a damaged file) are its first dead
    letters. `options` None: the line reader has cut and refused these lines already;
    else `_NeedsLineReader` is raised for a block that only the line reader may cut."""
    if not data:
        return LoadedRecords(empty_frame(), list(rejects), 0, damaged=damaged)
    text, size, raw_lines = _lines_of(data)
    block = pl.DataFrame({"text": text, "size": size}).with_row_index("row")
    if options is not None and (bool((size > options.max_line_bytes).any()) or (
            text.str.starts_with(BOM_TEXT).any() if raw_lines is None
            else any(line.startswith(BOM) for line in raw_lines))):
        raise _NeedsLineReader
    blank = int((block["size"] == 0).sum())
    whole = data if raw_lines is None and blank == 0 else None
    proven = _prove(block, limits, first_line, whole)
    if proven.height == block.height - blank:
        return LoadedRecords(proven.drop("row"), list(rejects), blank, damaged=damaged,
                             block_lines=block.height)
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
                         ts_converted=slow.ts_converted, block_lines=block.height)


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

# The fields polars reads of a line (the others are checked in the text: `_DOUBTFUL`).
# ignore_errors: a value of another type reads as null rather than failing the block; a
# null where the line has a value is then caught by `_DOUBTFUL` or by a required field.
_READ_SCHEMA: Final = {"id": pl.String, "session_id": pl.String, "ts": pl.Int64,
                       "tool": pl.String, "failure_mode": pl.String, "outcome": pl.String}
_W: Final = "[ \t]*"
_STRING_FIELDS: Final = ("agent_id", "error", "error_template", "failure_mode", "id",
                         "outcome", "tool")


def _doubtful(any_char: str) -> str:
    """A line where polars' reading may differ from orjson's, or a field has a type it
    must not have. polars keeps the first of two equal keys, orjson the last: a field
    polars reads written twice (at any depth) is doubtful. A key spelt with \\u escapes
    (it could be one of ours) and a surrogate escape (polars accepts a lone one, orjson
    does not) are doubtful. A field polars does not read (or reads as text, which turns
    any value into a string) must show a value of its type right after its key,
    wherever it occurs: a string or null; `session_id` a string or an integer of at
    most 18 digits (polars writes `1.0` as 1); `args` an object or null; `duration_ms`
    a non-negative integer of at most 19 digits (within orjson's integers) or null;
    `id` a string of 64 lower-case hex digits (checked here, in the pass the line takes
    anyway, rather than in a second pass over the ids) or null. polars has read the
    line as JSON: after a key and its colon, `n` is null, `"` a string, `{` an object.
    `any_char` is what may stand between two keys (a line, or a block of them: not a
    newline)."""
    twice = [f'"{key}"{_W}:{any_char}*"{key}"{_W}:' for key in _READ_SCHEMA]
    escapes = [r"\\u[dD][89a-fA-F]", rf'\\u[0-9a-fA-F]{{4}}[a-zA-Z0-9_\\]*"{_W}:']
    strings = "|".join(_STRING_FIELDS)
    types = [f'"(?:{strings})"{_W}:{_W}[^"n \t\n]',
             f'"session_id"{_W}:{_W}(?:[^"0-9\\- \t]|-?[0-9]{{19}}|-?[0-9]+[.eE])',
             f'"args"{_W}:{_W}[^{{n \t\n]',
             f'"duration_ms"{_W}:{_W}(?:[^0-9n \t\n]|[0-9]{{20}}|[0-9]+[.eE])',
             # an id that is not 64 lower-case hex digits (the schema lower-cases it)
             f'"id"{_W}:{_W}"(?:[0-9a-f]{{0,63}}[^0-9a-f]|[0-9a-f]{{64}}[^"])']
    return "|".join([*twice, *escapes, *types])


_DOUBTFUL: Final = _doubtful(".")
_SESSION_STRING: Final = f'"session_id"{_W}:{_W}"'
# An integer session id in a line's text (`_read_values`); the schema to read it as one.
_INT_SESSION: Final = re.compile(rb'"session_id"[ \t]*:[ \t]*-?[0-9]')
_INT_SESSION_SCHEMA: Final = {**_READ_SCHEMA, "session_id": pl.Int64}


def _prove(block: pl.DataFrame, limits: RecordLimits, first_line: int,
           whole: bytes | None) -> pl.DataFrame:
    """The lines of `block` (`text`, `size`, `row`) proven valid, as frame rows with their
    block `row`; `whole` is the block's bytes when they are exactly its lines. The checks
    that only the odd line fails run once over the whole block (a regex search per line
    costs more than the search itself on short lines), and per line only where the
    block fails them."""
    text = pl.col("text")
    is_candidate = (text.is_not_null() & pl.col("size").is_between(2, LINE_MAX_BYTES)
                    & text.str.starts_with("{") & text.str.ends_with("}"))
    mask = block.select(is_candidate.fill_null(False)).to_series()
    candidates = block if mask.all() else block.filter(mask)
    found = _read_fields(block.height, candidates, whole)
    if found is None:
        return _empty_rows()
    read, session_ints = found
    # A regex search costs as much per line as over the whole block at once: it runs
    # at the speed of its automaton, whatever the lines.
    doubtful = read.select(pl.col("text").str.contains(_DOUBTFUL)).to_series()
    if doubtful.any():
        read = read.filter(~doubtful)
    proven = _typed(read, limits, first_line, session_ints)
    small = limits.args_max_bytes // ARGS_GROWTH
    if (proven["size"] > small).any():
        # Long lines: `args` could re-encode longer than written, or nest deeper than
        # orjson allows; such lines are left to the reference parser.
        size = pl.col("size")
        proven = proven.filter((size <= small) | ((size <= limits.args_max_bytes)
                                                  & _args_stay(text)))
    return proven.select("row", *FRAME_SCHEMA)


def _read_fields(lines: int, candidates: pl.DataFrame,
                 whole: bytes | None) -> tuple[pl.DataFrame, bool] | None:
    """The candidates with the fields polars reads (`v_<name>`), and whether every
    session id was read as an integer (`_read_values`); None if polars cannot read
    them."""
    for attempt in range(2):
        if candidates.is_empty():
            return None
        if candidates.height == lines and whole is not None:
            joined = whole
        else:
            joined = candidates["text"].str.join("\n").item().encode()
        try:
            values, session_ints = _read_values(joined)
        except pl.exceptions.PolarsError:
            if attempt:
                return None
            # Some line is not JSON: keep those that polars can read one by one.
            candidates = candidates.filter(
                pl.col("text").str.json_path_match("$.ts").is_not_null())
            continue
        if values.height != candidates.height:
            return None
        return pl.concat([candidates, values.rename({n: f"v_{n}" for n in _READ_SCHEMA})],
                         how="horizontal"), session_ints
    return None


def _read_values(joined: bytes) -> tuple[pl.DataFrame, bool]:
    """The `_READ_SCHEMA` fields of JSON lines, and whether every session id was read as
    an integer. Read as text, an integer session id cannot be told from a string of
    digits but by a search of every line (`_SESSION_STRING`); so a block whose first
    line has an integer one is read first with integer session ids and no tolerance of
    other types: it succeeds when all are integers (as in a file of one writer), else
    the block is read again leniently (one extra read, for that block only)."""
    first_end = joined.find(b"\n")
    if _INT_SESSION.search(joined, 0, first_end if first_end >= 0 else len(joined)):
        try:
            values = pl.read_ndjson(io.BytesIO(joined), schema=_INT_SESSION_SCHEMA)
        except pl.exceptions.PolarsError:
            pass
        else:
            return values.with_columns(pl.col("session_id").cast(pl.String)), True
    return pl.read_ndjson(io.BytesIO(joined), schema=_READ_SCHEMA, ignore_errors=True), False


def _args_stay(text: pl.Expr) -> pl.Expr:
    """Lines whose `args` orjson re-encodes no longer than written (no exponent, no long
    integer) and that are not deeply nested."""
    return ~text.str.contains(_GROWS) & (text.str.count_matches(r"[\[{]") < 500)


def _typed(read: pl.DataFrame, limits: RecordLimits, first_line: int,
           session_ints: bool = False) -> pl.DataFrame:
    """Rows whose values pass validation, as frame rows (with `row`, `text` and `size`);
    the rest are dropped (slow path). Outcomes and failure modes repeat endlessly: each
    distinct one is decided by `binloop.core.schema` itself. The other bounds are the
    schema's constants and the run's `RecordLimits`. `session_ints`: every session id
    was read as an integer (`_read_values`)."""
    outcome = _decided(read["v_outcome"], _normal_outcome)
    taxonomy = limits.taxonomy
    mode = _decided(read["v_failure_mode"], lambda m: _check_failure_mode(m, taxonomy))
    ts = pl.col("v_ts")
    ts_ok = ts >= 0
    if limits.max_future_skew_ms is not None:
        bound = int(time.time() * 1000) + limits.max_future_skew_ms - SKEW_MARGIN_MS
        ts_ok = ts_ok & (ts <= max(bound, 0))
    floor = ts_floor(limits.ts_unit)  # a ts below it is in seconds: the slow path converts
    if floor > 0:
        ts_ok = ts_ok & (ts >= floor if math.isfinite(floor) else pl.lit(False))
    session = pl.col("v_session_id")
    if session_ints:
        session_str: pl.Expr = pl.lit(False)
    else:
        # polars reads an integer session id as its digits: which of the values that
        # look like integers were written as strings?
        looks_int = session.cast(pl.Int64, strict=False).is_not_null()
        if read.select(looks_int.any()).item():
            # `_DOUBTFUL` lets through only a string or an integer after the one key.
            session_str = ~looks_int | pl.col("text").str.contains(_SESSION_STRING)
        else:
            session_str = pl.lit(True)
    normal = read.lazy().with_columns(n_outcome=outcome, n_mode=mode,
                                      n_session_str=session_str)
    outcome, mode = pl.col("n_outcome"), pl.col("n_mode")
    valid = (
        ts_ok
        & pl.when(pl.col("n_session_str"))
        # else an integer (of at most 18 digits: valid), or none: a strict read of
        # integer session ids reads a missing one as null
        .then(session.str.len_chars().is_between(1, TOOL_MAX_CHARS))
        .otherwise(session.is_not_null())
        & pl.col("v_tool").str.len_chars().is_between(1, TOOL_MAX_CHARS)
        & outcome.is_not_null()
        & (pl.col("v_failure_mode").is_null() | mode.is_not_null())
    )
    if limits.failure_modes != GIVEN:
        # A record whose failure mode is to be inferred takes the slow path, where the
        # one classifier of the parse step decides it.
        inferred = outcome.is_in(sorted(limits.infer_outcomes))
        valid = valid & ~(inferred if limits.failure_modes == INFER else
                          inferred & mode.is_null())
    rows = normal.select(
        "row", "text", "size",
        line=pl.col("row").cast(pl.UInt64) + first_line,
        id="v_id",  # `_DOUBTFUL` let through only 64 lower-case hex digits
        session_id=session,
        session_int=~pl.col("n_session_str"),
        ts=ts.cast(pl.UInt64, strict=False),
        tool="v_tool",
        failure_mode=mode,
        outcome=outcome,
        record=pl.when(mode.is_not_null()).then(pl.col("text").cast(pl.Binary)),
        valid=valid.fill_null(False),
    ).collect()
    if not rows["valid"].all():
        rows = rows.filter("valid")
    return rows.drop("valid")


def _normal_outcome(value: str) -> str:
    return _outcome(value)


def _decided(values: pl.Series, decide: Callable[[str], str]) -> pl.Expr:
    """`values` as `decide` (a function of the schema) normalises them, null where it
    rejects one: decided once per distinct value (and the column kept as it is where
    every value is its own normal form)."""
    distinct = values.drop_nulls().unique().to_list()
    verdicts: list[str | None] = []
    for value in distinct:
        try:
            verdicts.append(decide(value))
        except InvalidRecord:
            verdicts.append(None)
    column = pl.col(values.name)
    if all(verdict in (value, None) for value, verdict in zip(distinct, verdicts, strict=True)):
        rejected = [value for value, verdict in zip(distinct, verdicts, strict=True)
                    if verdict is None]
        return column if not rejected else pl.when(~column.is_in(rejected)).then(column)
    return column.replace_strict(distinct, verdicts, default=None, return_dtype=pl.String)
