"""Telemetry files as a polars frame of valid records, for the polars engine and sweeps.

The result is exactly what the reference reader gives (`binloop.replay.inputs` +
`binloop.replay.ingest`): the same valid records in the same order, the same dead letters with
the same reasons and positions, the same blank-line count. JSONL lines that
`binloop.engines.polars.proof` proves valid (the common case: what our own writers write) skip
the per-line parser; every other line goes through `binloop.core.schema.parse_record`, which
decides and gives the reason. Parquet rows go through the validator. Files of a directory in
name order, `.jsonl.gz`, and stdin (`-`) as in `binloop.replay.inputs`.
"""

from __future__ import annotations

import io
import sys
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Final, NamedTuple, Protocol

import orjson
import polars as pl

from binloop.core.reading import DEFAULT_READ, ReadOptions
from binloop.core.schema import (
    DEFAULT_LIMITS,
    DeadLetter,
    InvalidRecord,
    RecordLimits,
    RecordParser,
    ToolInvocation,
    raw_text,
)
from binloop.engines.polars.frame import FRAME_SCHEMA, empty_frame, records_frame
from binloop.engines.polars.proof import candidates, prove
from binloop.replay.formats import AUTO, BINLOOP, LineMapper, mapped, mapper, resolve, sniff_file
from binloop.replay.inputs import (
    STDIN,
    InputReader,
    LineBlock,
    RawItem,
    line_blocks,
    list_input_files,
)

BLOCK_LINES: Final = 1 << 16
LOAD_THREADS: Final = 2
READ_BYTES: Final = 16 << 20
PARQUET_BATCH: Final = 1 << 16


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


OnProgress = Callable[[int, int], None]


def load_records(path: str, limits: RecordLimits = DEFAULT_LIMITS,
                 on_progress: OnProgress | None = None,
                 options: ReadOptions = DEFAULT_READ) -> LoadedRecords:
    """Every record of `path` (a file, a directory of them, or - for stdin).

    `on_progress(bytes_read, lines_read)` is called after each block, with totals so far."""
    frames: list[pl.DataFrame] = []
    dead: list[DeadLetter] = []
    blank = lines_before = bytes_before = damaged = converted = 0
    for name in list_input_files(path, options.follow_symlinks):
        def report(done_bytes: int, done_lines: int, base: tuple[int, int] =
                   (bytes_before, lines_before)) -> None:
            if on_progress is not None:
                on_progress(base[0] + done_bytes, base[1] + done_lines)
        part = load_file(name, limits, report, options=options)
        frames.append(part.frame)
        dead.extend(part.dead)
        blank += part.blank
        damaged += part.damaged
        converted += part.ts_converted
        lines_before += part.frame.height + len(part.dead) - part.damaged + part.blank
        bytes_before += 0 if name == STDIN else Path(name).stat().st_size
    return LoadedRecords(pl.concat(frames) if frames else empty_frame(), dead, blank,
                         damaged=damaged, ts_converted=converted)


def load_file(name: str, limits: RecordLimits = DEFAULT_LIMITS,
              on_progress: OnProgress | None = None, input_format: str = AUTO,
              options: ReadOptions = DEFAULT_READ) -> LoadedRecords:
    """One input file (the name as `list_input_files` gives it: it is the dead letters' source).

    Lines are read, split and refused by `binloop.replay.inputs.line_blocks`, as every engine
    reads them (damaged files, oversized lines, line ends, byte order marks)."""
    lowered = name.lower()
    if input_format == AUTO:
        input_format = _sniff_stdin() if name == STDIN else sniff_file(name)
    if lowered.endswith((".parquet", ".pq")) or input_format != BINLOOP:
        return _load_parquet(name, limits, input_format, options)
    return load_blocks(line_blocks(name, BLOCK_LINES, options), name, limits, on_progress)


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def load_jsonl(stream: Readable, source: str, limits: RecordLimits = DEFAULT_LIMITS,
               on_progress: OnProgress | None = None,
               position: Callable[[], int] | None = None) -> LoadedRecords:
    """JSONL from a stream (in memory or a pipe), as `load_file` reads a file."""
    return load_blocks(line_blocks(source, BLOCK_LINES, stream=stream), source, limits,
                       on_progress)


def load_blocks(blocks: Iterable[LineBlock], source: str, limits: RecordLimits = DEFAULT_LIMITS,
                on_progress: OnProgress | None = None) -> LoadedRecords:
    """Blocks of lines, parsed two at a time (memory holds a few blocks, not the file)."""
    parts: list[LoadedRecords] = []
    pending: deque[Future[LoadedRecords]] = deque()
    damaged = 0
    # Two blocks in flight: polars releases the GIL while one block is parsed.
    with ThreadPoolExecutor(max_workers=LOAD_THREADS) as pool:
        for block in blocks:
            damaged += block.damaged
            pending.append(pool.submit(_load_block, block.lines, block.first_line, source,
                                       limits, block.rejects))
            if len(pending) >= LOAD_THREADS:
                parts.append(pending.popleft().result())
            if on_progress is not None:
                on_progress(block.done_bytes, block.first_line + len(block.lines) - 1)
        parts.extend(future.result() for future in pending)
    frames = [part.frame for part in parts]
    dead = [letter for part in parts for letter in part.dead]
    blank = sum(part.blank for part in parts)
    converted = sum(part.ts_converted for part in parts)
    return LoadedRecords(pl.concat(frames) if frames else empty_frame(), dead, blank,
                         damaged=damaged, ts_converted=converted)


def load_jsonl_bytes(data: bytes, source: str,
                     limits: RecordLimits = DEFAULT_LIMITS) -> LoadedRecords:
    """JSONL content in memory."""
    return load_jsonl(io.BytesIO(data), source, limits)


def _load_block(lines: list[bytes], first_line: int, source: str,
                limits: RecordLimits, rejects: tuple[DeadLetter, ...] = ()) -> LoadedRecords:
    """A block of lines: proven ones, the others through the reference parser; the
    reader's `rejects` (lines before these) are its first dead letters."""
    if not lines:
        return LoadedRecords(empty_frame(), list(rejects), 0)
    raw = pl.Series("raw", lines, dtype=pl.Binary)
    block = pl.DataFrame({"text": _utf8(lines, raw), "size": raw.bin.size()}).with_row_index("row")
    proven = prove(lines, candidates(block), limits, first_line)
    unsettled = block.filter((pl.col("size") > 0) & ~pl.col("row").is_in(proven["row"].implode()))
    slow = _slow_path(lines, unsettled["row"].to_list(), first_line, source, limits)
    frame = proven if slow.frame.is_empty() else pl.concat([proven, slow.frame]).sort("row")
    blank = int((block["size"] == 0).sum())
    return LoadedRecords(frame.drop("row"), [*rejects, *slow.dead], blank,
                         ts_converted=slow.ts_converted)


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


def _load_parquet(name: str, limits: RecordLimits, input_format: str = "binloop",
                  options: ReadOptions = DEFAULT_READ) -> LoadedRecords:
    """Parquet rows go through the reference validator (rows arrive already decoded);
    so do the lines of other input formats, after their mapper."""
    frames: list[pl.DataFrame] = []
    dead: list[DeadLetter] = []
    blank = 0
    line_mapper = mapper(input_format)
    lines = 0
    damaged = converted = 0
    for chunk in InputReader(name, PARQUET_BATCH, input_format=input_format, options=options):
        part = _slow_path(chunk.items, range(len(chunk.items)), chunk.first_line, chunk.source,
                          limits, line_mapper)
        frames.append(part.frame.drop("row"))
        dead.extend(chunk.rejects)
        dead.extend(part.dead)
        blank += part.blank
        lines += len(chunk.items) - part.blank
        damaged += chunk.damaged_files
        converted += part.ts_converted
    return LoadedRecords(pl.concat(frames) if frames else empty_frame(), dead, blank,
                         lines if line_mapper is not None else None, damaged, converted)


