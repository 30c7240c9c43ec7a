"""JSON lines to standard output (or standard error) from a single writer.

Delivery guarantee: at-least-once. Lines are written whole, one writer for the whole
cluster, so a line is never interleaved with another; after a resume from recovery
the lines since the last snapshot are printed again. When the reader closes the pipe,
output stops and the dataflow goes on.
"""

from __future__ import annotations

import sys
from typing import BinaryIO

from bytewax.outputs import FixedPartitionedSink, StatefulSinkPartition
from typing_extensions import override


class _StreamPartition(StatefulSinkPartition[bytes, None]):
    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._closed = False

    @override
    def write_batch(self, values: list[bytes]) -> None:
        if self._closed:
            return
        try:
            self._stream.write(b"".join(value + b"\n" for value in values))
            self._stream.flush()
        except BrokenPipeError:
            # The reader went away (`binloop detect ... | head`): stop writing, keep running.
            self._closed = True

    @override
    def snapshot(self) -> None:
        return None


class StdOutLinesSink(FixedPartitionedSink[bytes, None]):
    """Write encoded JSON lines (items `(key, line)`) to stdout, or stderr with `stderr=True`."""

    def __init__(self, stderr: bool = False) -> None:
        self._stderr = stderr

    @override
    def list_parts(self) -> list[str]:
        return ["stderr" if self._stderr else "stdout"]

    @override
    def part_fn(self, item_key: str) -> int:
        return 0

    @override
    def build_part(self, step_id: str, for_part: str,
                   resume_state: None) -> _StreamPartition:
        return _StreamPartition(sys.stderr.buffer if self._stderr else sys.stdout.buffer)
