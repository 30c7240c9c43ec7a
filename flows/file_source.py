"""Replay of telemetry files (JSONL, JSONL.gz, Parquet, a directory of them) and stdin.

Delivery guarantee: exactly-once with Bytewax recovery. The input is one partition
whose snapshot is its read position (file, offset, next chunk seq), so a resumed
dataflow re-reads exactly what followed the last snapshot. stdin cannot be re-read:
it is at-most-once across a restart.
"""

from __future__ import annotations

from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
from typing_extensions import override

from binloop.core.config import default
from binloop.core.reading import DEFAULT_READ, ReadOptions
from binloop.core.summary import Progress
from binloop.replay.inputs import (
    InputReader,
    RawChunk,
    ReadPosition,
    input_size,
)


class _FilePartition(StatefulSourcePartition[RawChunk, ReadPosition]):
    def __init__(self, reader: InputReader, progress: Progress) -> None:
        self._reader = reader
        self._progress = progress
        self._records = 0

    @override
    def next_batch(self) -> list[RawChunk]:
        chunk = self._reader.next_chunk()
        if chunk is None:
            raise StopIteration
        self._records += len(chunk.items)
        self._progress.update(self._reader.bytes_done, self._records)
        return [chunk]

    @override
    def snapshot(self) -> ReadPosition:
        return self._reader.position

    @override
    def close(self) -> None:
        self._reader.close()


class TelemetryFileSource(FixedPartitionedSource[RawChunk, ReadPosition]):
    """Chunks of raw lines of a file, a directory (files in name order) or stdin (`-`)."""

    def __init__(self, path: str, batch_size: int = default("batch_size"),
                 progress: bool = False, input_format: str = "auto",
                 options: ReadOptions = DEFAULT_READ) -> None:
        self._path = path
        self._input_format = input_format
        self._batch_size = batch_size
        self._progress = progress
        self._options = options

    @override
    def list_parts(self) -> list[str]:
        return [f"file:{self._path}"]

    @override
    def build_part(self, step_id: str, for_part: str,
                   resume_state: ReadPosition | None) -> _FilePartition:
        reader = InputReader(self._path, self._batch_size, for_part, resume_state,
                             self._input_format, self._options)
        size = input_size(self._path, self._options.follow_symlinks)
        return _FilePartition(reader, Progress(size, self._progress))
