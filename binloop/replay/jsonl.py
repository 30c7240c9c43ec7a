"""Append-only JSONL files, crash-safe and idempotent on a key (no Bytewax here).

On open the file's complete lines are read back; with `key_of`, a line whose key is
already in the file is skipped, so a replay or a restart appends nothing twice. A
torn last line (a crash in the middle of a write) is cut off. `resume_offset` first
truncates the file to a snapshot's offset (Bytewax recovery). `check_line` sees each
line already in the file and may refuse it (raise), e.g. an event of another
configuration.

A character device or a pipe (`/dev/null`, `/dev/stdout`, a FIFO) is a plain stream:
nothing is read back, truncated or fsynced. Errors are one-line
:class:`~binloop.core.errors.OutputError` (cannot open: exit 73) and
:class:`~binloop.core.errors.OutputWriteError` (writing failed: exit 74).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

import orjson

from binloop.core.errors import OutputError, OutputWriteError

KeyOf = Callable[[bytes], str | None]
CheckLine = Callable[[bytes], None]


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
        self.keys: set[str] = set()
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
            self._recover(resume_offset, check_line)

    def _recover(self, resume_offset: int | None, check_line: CheckLine | None) -> None:
        try:
            self._file.seek(0)
            content = self._file.read()
        except OSError as exc:
            self._file.close()
            raise OutputError(f"cannot read back {self.path}: {_why(exc)}") from None
        end = len(content) if resume_offset is None else min(resume_offset, len(content))
        end = content.rfind(b"\n", 0, end) + 1
        lines = content[:end].splitlines()
        if check_line is not None:
            try:
                for line in lines:
                    check_line(line)
            except Exception:
                self._file.close()
                raise
        if end != len(content):
            self._file.truncate(end)
        if self._key_of is not None:
            for line in lines:
                if (key := self._key_of(line)) is not None:
                    self.keys.add(key)
        self._file.seek(end)

    def write(self, lines: Iterable[bytes]) -> int:
        """Append lines (without newlines); returns how many were new."""
        written = 0
        try:
            for line in lines:
                if self._key_of is not None:
                    key = self._key_of(line)
                    if key is not None:
                        if key in self.keys:
                            continue
                        self.keys.add(key)
                self._file.write(line + b"\n")
                self._written += len(line) + 1
                written += 1
            self._file.flush()
            if not self._stream:
                os.fsync(self._file.fileno())
        except OSError as exc:
            self._failed = True
            raise OutputWriteError(f"writing {self.path} failed: {_why(exc)}") from None
        return written

    def offset(self) -> int:
        return self._written if self._stream else self._file.tell()

    def close(self) -> None:
        try:
            self._file.close()
        except OSError as exc:
            if not self._failed:  # else already reported; closing is best effort
                raise OutputWriteError(f"writing {self.path} failed: {_why(exc)}") from None
