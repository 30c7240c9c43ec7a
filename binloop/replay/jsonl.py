"""Append-only JSONL files, crash-safe and idempotent on a key (no Bytewax here).

On open, the file's complete lines are streamed back (a block at a time, never the
whole file): `check_line` sees each and may refuse it (raise), e.g. an event of another
configuration; with `key_of`, the key of each is remembered as a 16-byte digest, so a
replay or a restart appends nothing twice while memory grows with the number of keys,
not with the size of the file. A line longer than `INDEX_LINE_MAX_BYTES` is skipped
unread (no line we write is that long; it is neither checked nor its key remembered).
Without `key_of` and `check_line` nothing is read but the tail. A torn last line (a crash
in the middle of a write) is cut off. `resume_offset` first truncates the file to a
snapshot's offset (Bytewax recovery).

A character device or a pipe (`/dev/null`, `/dev/stdout`, a FIFO) is a plain stream:
nothing is read back, truncated or fsynced. Errors are one-line
:class:`~binloop.core.errors.OutputError` (cannot open: exit 73) and
:class:`~binloop.core.errors.OutputWriteError` (writing failed: exit 74).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, Final

import orjson

from binloop.core.errors import OutputError, OutputWriteError

KeyOf = Callable[[bytes], str | None]
CheckLine = Callable[[bytes], None]

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


def is_stream(path: str | Path) -> bool:
    """Whether `path` is a character device or a pipe (written as a plain stream)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def check_output_path(path: str | Path, mkdirs: bool = False) -> None:
    """Raise :class:`OutputError` unless `path` can be opened for appending (its parent
    directory is created with `mkdirs`)."""
    target = Path(path)
    if is_stream(target):
        return
    if target.is_dir():
        raise OutputError(f"output {path} is a directory")
    parent = target.parent
    if not parent.exists():
        if not mkdirs:
            raise OutputError(f"output directory {parent} does not exist (create it, or pass "
                              "--mkdirs)")
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"cannot create directory {parent}: {_why(exc)}") from None
    elif not parent.is_dir():
        raise OutputError(f"output {path}: {parent} is not a directory")
    if target.exists() and not target.is_file():
        raise OutputError(f"output {path} is not a regular file, a device or a pipe")
    try:
        # Opening for appending changes nothing in the file (and root passes os.access
        # checks that the kernel then refuses, e.g. /proc/version).
        with open(target, "ab"):
            pass
    except OSError as exc:
        raise OutputError(f"cannot open {path} for writing: {_why(exc)}") from None


def ensure_output_dir(path: str | Path) -> Path:
    """An output directory (created with its parents when missing: a command whose
    `--out` is a directory makes it); raises :class:`OutputError`."""
    target = Path(path)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(f"output {path} exists and is not a directory") from None
    except OSError as exc:
        raise OutputError(f"cannot create directory {path}: {_why(exc)}") from None
    if not os.access(target, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write into directory {path}: permission denied")
    return target


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


class JsonlFileWriter:
    """Appends lines to a file; with `key_of`, a line whose key is already there is skipped."""

    def __init__(self, path: str | Path, key_of: KeyOf | None = None,
                 resume_offset: int | None = None, *, mkdirs: bool = True,
                 check_line: CheckLine | None = None) -> None:
        self.path = Path(path)
        self._key_of = key_of
        self.keys = KeyIndex()
        self._stream = is_stream(self.path)
        self._written = 0
        self._failed = False
        check_output_path(self.path, mkdirs)
        try:
            # A device or pipe is opened write-only: /dev/full and a FIFO cannot be read.
            self._file = open(self.path, "ab" if self._stream else "a+b")  # noqa: SIM115
        except OSError as exc:
            raise OutputError(f"cannot open {path} for writing: {_why(exc)}") from None
        if not self._stream:
            try:
                self._recover(resume_offset, check_line)
            except BaseException:
                self._file.close()
                raise

    def _recover(self, resume_offset: int | None, check_line: CheckLine | None) -> None:
        try:
            size = self._file.seek(0, os.SEEK_END)
            end = complete_end(self._file, size if resume_offset is None else
                               min(resume_offset, size))
            if self._key_of is not None or check_line is not None:
                # Checked before the file is cut: a refused file is left as it was.
                for line in stream_lines(self._file, end):
                    if check_line is not None:
                        check_line(line)
                    if line and self._key_of is not None and (
                            key := self._key_of(line)) is not None:
                        self.keys.add(key)
        except OSError as exc:
            raise OutputError(f"cannot read back {self.path}: {_why(exc)}") from None
        if end != size:
            self._file.truncate(end)
        self._file.seek(end)

    def write(self, lines: Iterable[bytes], sync: bool = True) -> int:
        """Append lines (without newlines) and flush them; returns how many were new.
        With `sync` they are also fsynced (else at the next :meth:`sync`)."""
        key_of = self._key_of
        return self.write_keyed((((None if key_of is None else key_of(line)), line)
                                 for line in lines), sync)

    def write_keyed(self, pairs: Iterable[tuple[str | None, bytes]], sync: bool = True) -> int:
        """:meth:`write` of `(key, line)` pairs whose key the caller knows (it must be
        what `key_of` gives for the line: an event's id, which the line need not be
        read again for); a None key is never skipped."""
        written = 0
        try:
            for key, line in pairs:
                if key is not None:
                    if key in self.keys:
                        continue
                    self.keys.add(key)
                self._file.write(line + b"\n")
                self._written += len(line) + 1
                written += 1
            self._file.flush()
            if sync and not self._stream:
                os.fsync(self._file.fileno())
        except OSError as exc:
            self._failed = True
            raise OutputWriteError(f"writing {self.path} failed: {_why(exc)}") from None
        return written

    def sync(self) -> None:
        """Make what was written durable (fsync; nothing for a stream)."""
        if self._stream or self._failed:
            return
        try:
            os.fsync(self._file.fileno())
        except OSError as exc:
            self._failed = True
            raise OutputWriteError(f"writing {self.path} failed: {_why(exc)}") from None

    def offset(self) -> int:
        return self._written if self._stream else self._file.tell()

    def close(self) -> None:
        try:
            self._file.close()
        except OSError as exc:
            if not self._failed:  # else already reported; closing is best effort
                raise OutputWriteError(f"writing {self.path} failed: {_why(exc)}") from None
