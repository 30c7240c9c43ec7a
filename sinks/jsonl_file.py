"""Append-only JSONL file output, idempotent on a key (BINEvents: `event_id`).

Delivery guarantee: exactly-once lines. On start the file's complete lines are read
back and the keys seen are skipped if written again, so a replay or a restart without
recovery appends nothing twice. With Bytewax recovery the file is first truncated to
the offset of the snapshot the dataflow resumes from. A torn last line (a crash in
the middle of a write) is cut off on open.
"""

from __future__ import annotations

from pathlib import Path

from bytewax.outputs import FixedPartitionedSink, StatefulSinkPartition
from typing_extensions import override

from binloop.replay.jsonl import JsonlFileWriter, KeyOf


class _JsonlFilePartition(StatefulSinkPartition[bytes, int]):
    def __init__(self, writer: JsonlFileWriter) -> None:
        self._writer = writer

    @override
    def write_batch(self, values: list[bytes]) -> None:
        self._writer.write(values)

    @override
    def snapshot(self) -> int:
        return self._writer.offset()

    @override
    def close(self) -> None:
        self._writer.close()


class JsonlFileSink(FixedPartitionedSink[bytes, int]):
    """Write encoded JSON lines to one file (one worker writes; items are `(key, line)`)."""

    def __init__(self, path: str | Path, key_of: KeyOf | None = None) -> None:
        self._path = Path(path)
        self._key_of = key_of

    @override
    def list_parts(self) -> list[str]:
        return [str(self._path)]

    @override
    def part_fn(self, item_key: str) -> int:
        return 0

    @override
    def build_part(self, step_id: str, for_part: str,
                   resume_state: int | None) -> _JsonlFilePartition:
        return _JsonlFilePartition(JsonlFileWriter(self._path, self._key_of, resume_state))
