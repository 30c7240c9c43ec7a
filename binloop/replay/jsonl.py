"""Append-only JSONL files, crash-safe and idempotent on a key (no Bytewax here).

On open the file's complete lines are read back; with `key_of`, a line whose key is
already in the file is skipped, so a replay or a restart appends nothing twice. A
torn last line (a crash in the middle of a write) is cut off. `resume_offset` first
truncates the file to a snapshot's offset (Bytewax recovery).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import orjson

KeyOf = Callable[[bytes], str | None]


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
        self.keys: set[str] = set()
        self._file = open(self.path, "a+b")  # noqa: SIM115 - closed by close()
        self._recover(resume_offset)

    def _recover(self, resume_offset: int | None) -> None:
        self._file.seek(0)
        content = self._file.read()
        end = len(content) if resume_offset is None else min(resume_offset, len(content))
        end = content.rfind(b"\n", 0, end) + 1
        if end != len(content):
            self._file.truncate(end)
        if self._key_of is not None:
            for line in content[:end].splitlines():
                if (key := self._key_of(line)) is not None:
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
