"""Append-only JSONL files, crash-safe and idempotent on a key (no Bytewax here).

On open, with `key_of`, the file's complete lines are streamed back (a block at a time,
never the whole file) and the key of each is remembered as a 16-byte digest, so a
replay or a restart appends nothing twice while memory grows with the number of keys,
not with the size of the file. A line longer than `INDEX_LINE_MAX_BYTES` is skipped
unread (no line we write is that long; its key is not remembered). Without `key_of`
nothing is read but the tail. A torn last line (a crash in the middle of a write) is
cut off. `resume_offset` first truncates the file to a snapshot's offset (Bytewax
recovery).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, Final

import orjson

KeyOf = Callable[[bytes], str | None]

READ_BLOCK_BYTES: Final = 1 << 20
INDEX_LINE_MAX_BYTES: Final = 16 << 20


class KeyIndex:
    """A set of keys held as 16-byte blake2b digests (a 64-hex event id costs ~50 bytes
    here instead of ~120 as a str); a collision is a 2**-128 event per pair."""

    __slots__ = ("_digests",)

    def __init__(self) -> None:
        self._digests: set[bytes] = set()

    @staticmethod
    def _digest(key: str) -> bytes:
        return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def add(self, key: str) -> None:
        self._digests.add(self._digest(key))

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._digest(key) in self._digests

    def __len__(self) -> int:
        return len(self._digests)


def complete_end(file: BinaryIO, limit: int) -> int:
    """The offset just past the last newline before `limit` (0 if none), found by reading
    backwards a block at a time."""
    end = limit
    while end > 0:
        start = max(0, end - READ_BLOCK_BYTES)
        file.seek(start)
        block = file.read(end - start)
        newline = block.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def stream_lines(file: BinaryIO, end: int, max_bytes: int | None = None) -> Iterator[bytes]:
    """The lines of `file[:end]` (which ends with a newline, or is empty), without their
    newline; a line longer than `max_bytes` (default `INDEX_LINE_MAX_BYTES`) is skipped
    without being held in memory."""
    if max_bytes is None:
        max_bytes = INDEX_LINE_MAX_BYTES
    file.seek(0)
    carry: list[bytes] = []
    carried = 0
    oversized = False
    done = 0
    while done < end:
        block = file.read(min(READ_BLOCK_BYTES, end - done))
        if not block:
            return
        done += len(block)
        start = 0
        while (newline := block.find(b"\n", start)) >= 0:
            piece = block[start:newline]
            if not oversized and carried + len(piece) <= max_bytes:
                yield b"".join([*carry, piece]) if carry else piece
            carry, carried, oversized = [], 0, False
            start = newline + 1
        rest = block[start:]
        carried += len(rest)
        if oversized or carried > max_bytes:
            carry, oversized = [], True
        elif rest:
            carry.append(rest)


def event_key(line: bytes) -> str | None:
    """The `event_id` of an encoded BINEvent line."""
    try:
        value = orjson.loads(line).get("event_id")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return value if isinstance(value, str) else None


class JsonlFileWriter:
    """Appends lines to a file; with `key_of`, a line whose key is already there is skipped."""

    def __init__(self, path: str | Path, key_of: KeyOf | None = None,
                 resume_offset: int | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._key_of = key_of
        self.keys = KeyIndex()
        self._file = open(self.path, "a+b")  # noqa: SIM115 - closed by close()
        self._recover(resume_offset)

    def _recover(self, resume_offset: int | None) -> None:
        size = self._file.seek(0, os.SEEK_END)
        end = complete_end(self._file, size if resume_offset is None else
                           min(resume_offset, size))
        if end != size:
            self._file.truncate(end)
        if self._key_of is not None:
            for line in stream_lines(self._file, end):
                if line and (key := self._key_of(line)) is not None:
                    self.keys.add(key)
        self._file.seek(end)

    def write(self, lines: Iterable[bytes]) -> int:
        """Append lines (without newlines); returns how many were new."""
        written = 0
        for line in lines:
            if self._key_of is not None:
                key = self._key_of(line)
                if key is not None:
                    if key in self.keys:
                        continue
                    self.keys.add(key)
            self._file.write(line + b"\n")
            written += 1
        self._file.flush()
        os.fsync(self._file.fileno())
        return written

    def offset(self) -> int:
        return self._file.tell()

    def close(self) -> None:
        self._file.close()
