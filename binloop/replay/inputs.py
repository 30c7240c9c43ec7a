"""Replay inputs: JSONL, JSONL.gz and Parquet files, directories of them, and stdin.

A reader hands out :class:`RawChunk` batches of undecoded lines (or Parquet rows) in
arrival order, numbered by `seq`, and a :class:`ReadPosition` from which a new reader
resumes exactly after the last chunk handed out (for Bytewax recovery).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import sys
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson
import polars as pl

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
GZ_SUFFIXES = (".jsonl.gz", ".ndjson.gz", ".json.gz")
PARQUET_SUFFIXES = (".parquet", ".pq")
STDIN = "-"

RawItem = bytes | dict[str, Any]


@dataclass(frozen=True, slots=True)
class RawChunk:
    """Consecutive raw lines (or Parquet rows) of one input partition; item `i` is at
    line `first_line + i` of `source`. Blank lines are kept as `b""`."""

    partition: str
    seq: int
    source: str
    first_line: int
    items: list[RawItem]
    # The seq this reader started at (> 0 after a resume from recovery).
    start_seq: int = 0
    # How the lines are written (`binloop.replay.formats`); mapped in the parse step.
    input_format: str = "binloop"
    # Adopting a live stream that holds telemetry stored before it was partitioned
    # (flows.nats_source): a chunk is applied only after the backlog of partition
    # `waits_for`, which a chunk of that partition with `releases` ends.
    waits_for: str | None = None
    releases: bool = False


@dataclass(frozen=True, slots=True)
class ReadPosition:
    """Where a reader stands: the next chunk's seq, the file, and the offset in it."""

    seq: int = 0
    file_index: int = 0
    offset: int = 0
    line: int = 0


def list_input_files(path: str) -> list[str]:
    """The files a path stands for, in replay order (a directory: sorted by name)."""
    if path == STDIN:
        return [STDIN]
    target = Path(path)
    if target.is_dir():
        files = sorted(str(p) for p in target.iterdir() if p.is_file() and _kind(p.name))
        if not files:
            raise FileNotFoundError(f"no .jsonl, .jsonl.gz or .parquet files in {path}")
        return files
    if not target.is_file():
        raise FileNotFoundError(f"input {path} does not exist")
    if not _kind(target.name):
        raise ValueError(f"{path}: expected a .jsonl, .jsonl.gz, .ndjson or .parquet file")
    return [path]


def input_size(path: str) -> int | None:
    """Total bytes of the input files, for progress (None for stdin)."""
    files = list_input_files(path)
    return None if files == [STDIN] else sum(Path(f).stat().st_size for f in files)


def _kind(name: str) -> str | None:
    lowered = name.lower()
    if lowered.endswith(GZ_SUFFIXES):
        return "gz"
    if lowered.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if lowered.endswith(JSONL_SUFFIXES):
        return "jsonl"
    return None


class InputReader:
    """Reads one input (file, directory or stdin) as a sequence of chunks."""

    def __init__(self, path: str, batch_size: int, partition: str = "input",
                 resume: ReadPosition | None = None, input_format: str = "auto") -> None:
        self.files = list_input_files(path)
        self.input_format = input_format
        self._formats: dict[int, str] = {}  # `auto` resolved, per file index
        self.partition = partition
        self.batch_size = batch_size
        self.position = resume or ReadPosition()
        self.start_seq = self.position.seq
        self.bytes_done = 0
        self._file: _FileCursor | None = None

    def next_chunk(self) -> RawChunk | None:
        """The next chunk, or None at the end of the last file."""
        while self.position.file_index < len(self.files):
            cursor = self._cursor()
            first_line = self.position.line + 1
            items = cursor.read(self.batch_size)
            if items:
                self.position = ReadPosition(self.position.seq + 1, self.position.file_index,
                                             cursor.offset, self.position.line + len(items))
                self.bytes_done = self._done_before() + cursor.bytes_read()
                return RawChunk(self.partition, self.position.seq - 1, cursor.name, first_line,
                                items, self.start_seq, self._format_of(cursor.name, items))
            cursor.close()
            self._file = None
            self.position = ReadPosition(self.position.seq, self.position.file_index + 1)
        return None

    def _format_of(self, name: str, items: list[RawItem]) -> str:
        """The input format of the current file (`auto`: sniffed from its first line)."""
        from binloop.replay.formats import AUTO, BINLOOP, resolve, sniff_file

        if self.input_format != AUTO:
            return self.input_format
        index = self.position.file_index
        known = self._formats.get(index)
        if known is None:
            found = resolve(AUTO, items) if name == STDIN else sniff_file(name)
            if found is None:  # only blank lines so far: any format reads them alike
                return BINLOOP
            known = self._formats[index] = found
        return known

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __iter__(self) -> Iterator[RawChunk]:
        try:
            while (chunk := self.next_chunk()) is not None:
                yield chunk
        finally:
            self.close()

    def _cursor(self) -> _FileCursor:
        if self._file is None:
            name = self.files[self.position.file_index]
            self._file = _open_cursor(name, self.position.offset)
        return self._file

    def _done_before(self) -> int:
        return sum(Path(f).stat().st_size for f in self.files[: self.position.file_index]
                   if f != STDIN)


class _FileCursor(ABC):
    """A file read line by line (or row by row) from an offset."""

    name: str
    offset: int

    @abstractmethod
    def read(self, n: int) -> list[RawItem]:
        """Up to `n` more items; an empty list at the end of the file."""

    def bytes_read(self) -> int:
        return self.offset

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        """Release the file."""


class _LineCursor(_FileCursor):
    def __init__(self, name: str, stream: IO[bytes] | gzip.GzipFile, offset: int,
                 raw: IO[bytes] | None = None) -> None:
        self.name = name
        self.offset = offset
        self._stream = stream
        self._raw = raw

    def read(self, n: int) -> list[RawItem]:
        # Blank lines stay in the chunk (as b"") so that line numbers stay exact.
        items: list[RawItem] = []
        for line in self._stream:
            self.offset += len(line)
            items.append(line.rstrip(b"\r\n"))
            if len(items) == n:
                break
        return items

    def bytes_read(self) -> int:
        return self._raw.tell() if self._raw is not None else self.offset

    def close(self) -> None:
        if self._stream is not sys.stdin.buffer:
            self._stream.close()


class _ParquetCursor(_FileCursor):
    def __init__(self, name: str, offset: int) -> None:
        self.name = name
        self.offset = offset
        self._frame = pl.read_parquet(name)
        self._size = Path(name).stat().st_size

    def read(self, n: int) -> list[RawItem]:
        rows = self._frame.slice(self.offset, n).to_dicts()
        self.offset += len(rows)
        return [_parquet_row(row) for row in rows]

    def bytes_read(self) -> int:
        return self._size * self.offset // max(1, self._frame.height)


def _parquet_row(row: dict[str, Any]) -> dict[str, Any]:
    """A Parquet row as a record: null columns dropped, `args` JSON text decoded."""
    record = {k: v for k, v in row.items() if v is not None}
    args = record.get("args")
    if isinstance(args, str):
        # Undecodable text stays text: validation then rejects it with the reason.
        with contextlib.suppress(orjson.JSONDecodeError):
            record["args"] = orjson.loads(args)
    return record


def _open_cursor(name: str, offset: int) -> _FileCursor:
    if name == STDIN:
        return _LineCursor(name, sys.stdin.buffer, offset)
    kind = _kind(name)
    if kind == "parquet":
        return _ParquetCursor(name, offset)
    if kind == "gz":
        raw = open(name, "rb")  # noqa: SIM115 - owned by the cursor
        stream = gzip.GzipFile(fileobj=raw)
        _skip(stream, offset)
        return _LineCursor(name, stream, offset, raw)
    plain = open(name, "rb")  # noqa: SIM115 - owned by the cursor
    plain.seek(offset)
    return _LineCursor(name, plain, offset)


def _skip(stream: IO[bytes] | gzip.GzipFile, count: int) -> None:
    while count > 0:
        got = stream.read(min(count, io.DEFAULT_BUFFER_SIZE * 64))
        if not got:
            return
        count -= len(got)
