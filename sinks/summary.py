"""Run counters: aggregated from every worker by one writer into a JSON file.

Delivery guarantee: exactly-once with Bytewax recovery: the running totals are the
sink's snapshot, so a resumed run goes on from the counters of the snapshot it
resumes from, and the part it replays is counted once. The file is replaced
atomically, at most once a second, at the end of each epoch if it changed, and at the
end of the run, so a reader never sees half of it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from bytewax.outputs import FixedPartitionedSink, StatefulSinkPartition
from typing_extensions import override

from binloop.core.detection import DetectorStats
from binloop.core.summary import RunSummary

OnSummary = Callable[[RunSummary], None]


def write_summary(path: Path, summary: RunSummary) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(orjson.dumps(summary.to_json()))
    os.replace(tmp, path)


Totals = dict[str, Any]


class _SummaryPartition(StatefulSinkPartition[Any, Totals]):
    def __init__(self, path: Path | None, on_update: OnSummary | None,
                 resume: Totals | None = None) -> None:
        self.summary = RunSummary.from_json(resume) if resume else RunSummary()
        self._path = path
        self._on_update = on_update
        self._written = 0.0
        self._dirty = False

    @override
    def write_batch(self, values: list[Any]) -> None:
        for value in values:
            if isinstance(value, DetectorStats):
                self.summary.add_detector(value)
            else:
                self.summary.records_read += value.records_read
                self.summary.valid += value.valid
                self.summary.invalid += value.invalid
                self.summary.damaged_files += value.damaged_files
                self.summary.ts_converted += value.ts_converted
        if self._on_update is not None:
            self._on_update(self.summary)
        self._dirty = True
        if self._path is not None and time.monotonic() - self._written >= 1.0:
            self._flush()

    def _flush(self) -> None:
        if self._path is not None:
            write_summary(self._path, self.summary)
            self._written = time.monotonic()
            self._dirty = False

    @override
    def snapshot(self) -> Totals:
        # At every epoch's end, so that the file of a quiet live job is not left stale.
        if self._dirty:
            self._flush()
        return self.summary.to_json()

    @override
    def close(self) -> None:
        self._flush()


class SummarySink(FixedPartitionedSink[Any, Totals]):
    """Sum `IngestStats` and `DetectorStats` items into a `RunSummary` JSON file."""

    def __init__(self, path: str | Path | None, on_update: OnSummary | None = None) -> None:
        self._path = Path(path) if path else None
        self._on_update = on_update

    @override
    def list_parts(self) -> list[str]:
        return ["summary"]

    @override
    def part_fn(self, item_key: str) -> int:
        return 0

    @override
    def build_part(self, step_id: str, for_part: str,
                   resume_state: Totals | None) -> _SummaryPartition:
        return _SummaryPartition(self._path, self._on_update, resume_state)
