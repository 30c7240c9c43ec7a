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
    # `b"\n".join(items)` when the reader read the lines as one block (a block decoder
    # takes it as it is), else None.
    block: bytes | None = None


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
                 resume: ReadPosition | None = None, block_bytes: int | None = None) -> None:
        """`batch_size` lines (or Parquet rows) per chunk; with `block_bytes`, a chunk of a
        JSONL file is instead the lines of a block of about that many bytes (read and
        split in C: a block decoder wants MiB blocks, and 1M lines read one by one in
        Python cost as much as decoding them)."""
        self.files = list_input_files(path)
        self.partition = partition
        self.batch_size = batch_size
        self.block_bytes = block_bytes
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
                                items, self.start_seq, cursor.last_block)
            cursor.close()
            self._file = None
            self.position = ReadPosition(self.position.seq, self.position.file_index + 1)
        return None

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
            self._file = _open_cursor(name, self.position.offset, self.block_bytes)
        return self._file

    def _done_before(self) -> int:
        return sum(Path(f).stat().st_size for f in self.files[: self.position.file_index]
                   if f != STDIN)


class _FileCursor(ABC):
    """A file read line by line (or row by row) from an offset."""

    name: str
    offset: int
    # The last `read`'s items joined by b"\n", when they were read as one block.
    last_block: bytes | None = None

    @abstractmethod
    def read(self, n: int) -> list[RawItem]:
        """Up to `n` more items; an empty list at the end of the file."""

    def bytes_read(self) -> int:
        return self.offset

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        """Release the file."""


class _LineCursor(_FileCursor):
    def __init__(self, name: str, stream: IO[bytes] | gzip.GzipFile, offset: int,
                 raw: IO[bytes] | None = None, block_bytes: int | None = None) -> None:
        self.name = name
        self.offset = offset
        self._stream = stream
        self._raw = raw
        self._block_bytes = block_bytes

    def read(self, n: int) -> list[RawItem]:
        if self._block_bytes:
            return self._read_block(self._block_bytes)
        # Blank lines stay in the chunk (as b"") so that line numbers stay exact.
        items: list[RawItem] = []
        for line in self._stream:
            self.offset += len(line)
            items.append(line.rstrip(b"\r\n"))
            if len(items) == n:
                break
        return items

    def _read_block(self, size: int) -> list[RawItem]:
        """The whole lines of the next `size` bytes (and the rest of the last line): the
        same lines as iterating, `\r\n` endings stripped the same way."""
        self.last_block = None
        data = self._stream.read(size)
        if not data:
            return []
        if not data.endswith(b"\n"):
            data += self._stream.readline()
        self.offset += len(data)
        block = data[:-1] if data.endswith(b"\n") else data
        items: list[Any] = block.split(b"\n")
        if b"\r" in block:
            return [line.rstrip(b"\r") for line in items]
        self.last_block = block
        return items

    def bytes_read(self) -> int:
        return self._raw.tell() if self._raw is not None else self.offset

    def close(self) -> None:
        if self._stream is not sys.stdin.buffer:
            self._stream.close()


class _ParquetCursor(_FileCursor):
    def __init__(self, name: str, offset: int) -> None:
        import polars as pl  # only for Parquet: a JSONL replay does not pay its import

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


def _open_cursor(name: str, offset: int, block_bytes: int | None = None) -> _FileCursor:
    if name == STDIN:  # line by line: a block read would wait for a block of input
        return _LineCursor(name, sys.stdin.buffer, offset)
    kind = _kind(name)
    if kind == "parquet":
        return _ParquetCursor(name, offset)
    if kind == "gz":
        raw = open(name, "rb")  # noqa: SIM115 - owned by the cursor
        stream = gzip.GzipFile(fileobj=raw)
        _skip(stream, offset)
        return _LineCursor(name, stream, offset, raw, block_bytes)
    plain = open(name, "rb")  # noqa: SIM115 - owned by the cursor
    plain.seek(offset)
    return _LineCursor(name, plain, offset, block_bytes=block_bytes)


def _skip(stream: IO[bytes] | gzip.GzipFile, count: int) -> None:
    while count > 0:
        got = stream.read(min(count, io.DEFAULT_BUFFER_SIZE * 64))
        if not got:
            return
        count -= len(got)
