"""Append-only JSONL file output, idempotent on a key (BINEvents: `event_id`).

Delivery guarantee: exactly-once lines. On start the file's complete lines are read
back and the keys seen are skipped if written again, so a replay or a restart without
recovery appends nothing twice. With Bytewax recovery the file is first truncated to
the offset of the snapshot the dataflow resumes from. A torn last line (a crash in
the middle of a write) is cut off on open. With `defer_errors` a failed write (disk
full) stops this sink and is left in `DEFERRED_ERRORS` for an in-process caller.

Lines are flushed (visible to a reader) with every batch and fsynced at the end of every
epoch, before the offset is snapshotted, and at the end: what a snapshot claims is on
disk is on disk, and a batch costs no disk flush of its own (one per chunk of 1 MiB of
telemetry took a replay's wall time up by a third).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bytewax.outputs import FixedPartitionedSink, StatefulSinkPartition
from typing_extensions import override

from binloop.core.errors import OutputWriteError
from binloop.replay.jsonl import CheckLine, JsonlFileWriter, KeyOf

# Write errors of sinks built with `defer_errors` in this process, for the caller of an
# in-process run to report once the dataflow has ended (an exception raised inside a
# Bytewax sink ends the run with a Rust panic and two tracebacks on stderr).
DEFERRED_ERRORS: list[OutputWriteError] = []


class _JsonlFilePartition(StatefulSinkPartition[Any, int]):
    def __init__(self, writer: JsonlFileWriter, defer_errors: bool, keyed: bool) -> None:
        self._writer = writer
        self._defer = defer_errors
        self._broken = False
        self._keyed = keyed

    @override
    def write_batch(self, values: list[Any]) -> None:
        if self._broken:
            return
        try:
            if self._keyed:
                self._writer.write_keyed(values, sync=False)
            else:
                self._writer.write(values, sync=False)
        except OutputWriteError as exc:
            self._fail(exc)

    def _fail(self, exc: OutputWriteError) -> None:
        if not self._defer:
            raise exc
        self._broken = True
        DEFERRED_ERRORS.append(exc)

    @override
    def snapshot(self) -> int:
        if not self._broken:
            try:
                self._writer.sync()
            except OutputWriteError as exc:
                self._fail(exc)
        return self._writer.offset()

    @override
    def close(self) -> None:
        if not self._broken:
            try:
                self._writer.sync()
            except OutputWriteError as exc:
                self._fail(exc)
        self._writer.close()


class JsonlFileSink(FixedPartitionedSink[Any, int]):
    """Write encoded JSON lines to one file (one worker writes; items are `(key, line)`,
    or with `keyed` `(key, (line key, line))`: the line's idempotency key as `key_of`
    would read it back from the line, given where it is known, e.g. an event's id)."""

    def __init__(self, path: str | Path, key_of: KeyOf | None = None, *, mkdirs: bool = False,
                 check_line: CheckLine | None = None, defer_errors: bool = False,
                 keyed: bool = False) -> None:
        self._path = Path(path)
        self._key_of = key_of
        self._keyed = keyed
        self._mkdirs = mkdirs
        self._check_line = check_line
        self._defer = defer_errors

    @override
    def list_parts(self) -> list[str]:
        return [str(self._path)]

    @override
    def part_fn(self, item_key: str) -> int:
        return 0

    @override
    def build_part(self, step_id: str, for_part: str,
                   resume_state: int | None) -> _JsonlFilePartition:
        return _JsonlFilePartition(JsonlFileWriter(self._path, self._key_of, resume_state,
                                                   mkdirs=self._mkdirs,
                                                   check_line=self._check_line),
                                   self._defer, self._keyed)
