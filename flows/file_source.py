"""Replay of telemetry files (JSONL, JSONL.gz, Parquet, a directory of them) and stdin.

With several workers the input is one partition per worker (see `TelemetryFileSource`):
of a plain JSONL file each reads only its own blocks, seeking straight to them
(`binloop.replay.strided`); a .gz file (which cannot seek) each reads through, handing
out every n-th chunk. A file still being appended should be replayed with one worker
(each reader reads it up to the size it saw).

Delivery guarantee: exactly-once with Bytewax recovery. Each partition's snapshot is
its read position (file, offset, next chunk seq), so a resumed dataflow re-reads exactly
what followed the last snapshot (resume with the same number of workers: the partitions
are named by it). stdin cannot be re-read:
it is at-most-once across a restart.

The snapshot is versioned plain data (`{"format": "binloop.read/3", "seq", "file_index",
"offset", "line", "base"}`), not a pickled class, so that moving a module never breaks a
store. A chunk of a JSONL file is the lines of one block as the reader reads it, handed
over as read when it needed no rewriting, which the parse step decodes in one call
(`batch_size` lines for Parquet and stdin). A block is 256 KiB with one reader
(`binloop.replay.readers.SOLE_READER_BLOCK_BYTES`: its position is an offset, which holds
whatever the block size) and 1 MiB (`READ_BYTES`) with several, whose positions count
blocks of that size.
"""

from __future__ import annotations

from typing import Any, Final

from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
from typing_extensions import override

from binloop.core.config import default
from binloop.core.reading import DEFAULT_READ, ReadOptions
from binloop.core.summary import Progress
from binloop.ops.thread_state import keep_thread_state
from binloop.replay.readers import (
    SOLE_READER_BLOCK_BYTES,
    STDIN,
    InputReader,
    RawChunk,
    ReadPosition,
    input_size,
)
from binloop.replay.strided import SeekingReader

POSITION_FORMAT: Final = "binloop.read/3"
# Format 2 had no `base`; its strided readers numbered chunks otherwise (not by block).
_ONE_READER_FORMAT: Final = "binloop.read/2"


def position_to_plain(position: ReadPosition) -> dict[str, Any]:
    return {"format": POSITION_FORMAT, "seq": position.seq, "file_index": position.file_index,
            "offset": position.offset, "line": position.line, "base": position.base}


def position_from_plain(plain: Any, strided: bool = False) -> ReadPosition:
    """A read position from a snapshot (format 3; format 2 or a format-1 `ReadPosition`
    of a partition that is the only reader of its input)."""
    if isinstance(plain, ReadPosition) and not strided:
        return plain
    found = plain.get("format") if isinstance(plain, dict) else None
    if found != POSITION_FORMAT and (strided or found != _ONE_READER_FORMAT):
        raise ValueError(f"recovery store: file read position {plain!r:.80} is not in format "
                         f"{POSITION_FORMAT!r}; start a new recovery store")
    return ReadPosition(plain["seq"], plain["file_index"], plain["offset"], plain["line"],
                        plain.get("base", 0))


class _FilePartition(StatefulSourcePartition[RawChunk, Any]):
    def __init__(self, reader: InputReader, progress: Progress) -> None:
        self._reader = reader
        self._progress = progress

    @override
    def next_batch(self) -> list[RawChunk]:
        chunk = self._reader.next_chunk()
        if chunk is None:
            raise StopIteration
        # A strided reader knows its own lines only: the others' are about as many.
        readers = self._reader.stride[1]
        lines = (self._reader.position.line if readers == 1
                 else self._reader.lines_handed_out * readers)
        self._progress.update(self._reader.bytes_done, lines)
        return [chunk]

    @override
    def snapshot(self) -> dict[str, Any]:
        return position_to_plain(self._reader.position)

    @override
    def close(self) -> None:
        self._reader.close()


class TelemetryFileSource(FixedPartitionedSource[RawChunk, Any]):
    """Chunks of raw lines of a file, a directory (files in name order) or stdin (`-`)."""

    def __init__(self, path: str, batch_size: int = default("batch_size"),
                 progress: bool = False, input_format: str = "auto",
                 options: ReadOptions = DEFAULT_READ, readers: int = 1) -> None:
        """With `readers` > 1 (one per worker, e.g. workers x processes), the input is
        `readers` partitions that each hand out only every `readers`-th chunk
        (`InputReader.stride`; of a plain file, reading only those blocks): the chunks
        are decoded where they are read, and only the counted records travel to their
        shards. stdin is always one."""
        self._path = path
        self._readers = 1 if path == STDIN else max(1, readers)
        self._input_format = input_format
        self._batch_size = batch_size
        self._progress = progress
        self._options = options

    @override
    def list_parts(self) -> list[str]:
        if self._readers == 1:
            return [self._stream]
        return [f"{self._stream}#{i}/{self._readers}" for i in range(self._readers)]

    @property
    def _stream(self) -> str:
        """The partition the chunks are ordered in (all readers cut the same chunks)."""
        return f"file:{self._path}"

    @override
    def build_part(self, step_id: str, for_part: str,
                   resume_state: Any | None) -> _FilePartition:
        keep_thread_state()
        strided = self._readers > 1
        resume = (None if resume_state is None
                  else position_from_plain(resume_state, strided))
        mine = 0 if self._readers == 1 else int(for_part.rpartition("#")[2].split("/")[0])
        reader = (InputReader(self._path, self._batch_size, self._stream, resume,
                              self._input_format, self._options, whole_blocks=True,
                              block_bytes=SOLE_READER_BLOCK_BYTES)
                  if not strided else
                  SeekingReader(self._path, self._batch_size, self._stream, resume,
                                self._input_format, self._options,
                                stride=(mine, self._readers)))
        size = input_size(self._path, self._options.follow_symlinks)
        # Every reader goes through all of the input: one progress line is enough.
        return _FilePartition(reader, Progress(size, self._progress and mine == 0))

    @property
    def decoded_where_read(self) -> bool:
        """Whether each worker's reader hands out its own chunks (no need to spread them)."""
        return self._readers > 1
