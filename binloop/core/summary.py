"""The end-of-run summary every engine prints, and progress lines for long inputs."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, fields
from typing import Any, TextIO

from binloop.core.detection import DetectorStats


@dataclass(slots=True)
class RunSummary:
    """Counters of one run; `add` merges the summaries of several workers."""

    records_read: int = 0
    valid: int = 0
    invalid: int = 0
    counted: int = 0
    duplicates: int = 0
    late: int = 0
    disarmed: int = 0
    events_fired: int = 0
    beyond_lateness: int = 0
    # Input files found damaged (each is one dead letter; their good part was read).
    damaged_files: int = 0
    # Records whose ts was in seconds and was converted (`--ts-unit`).
    ts_converted: int = 0
    elapsed_s: float = 0.0

    def add(self, other: RunSummary) -> None:
        for f in fields(self):
            if f.name != "elapsed_s":
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def add_detector(self, stats: DetectorStats) -> None:
        self.counted += stats.counted
        self.duplicates += stats.duplicates
        self.late += stats.late
        self.disarmed += stats.disarmed
        self.events_fired += stats.fired
        self.beyond_lateness += stats.beyond_lateness

    @property
    def records_per_s(self) -> float:
        return self.records_read / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "records_per_s": round(self.records_per_s, 1)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunSummary:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})

    def render(self) -> str:
        return (
            f"records read {self.records_read:,} | valid {self.valid:,} | "
            f"invalid {self.invalid:,} | counted {self.counted:,} | "
            f"duplicates {self.duplicates:,} | late {self.late:,} | "
            f"events fired {self.events_fired:,} | elapsed {self.elapsed_s:.2f}s | "
            f"{self.records_per_s:,.0f} records/s"
            + (f" | ts in seconds converted {self.ts_converted:,}" if self.ts_converted else "")
            + (f" | DAMAGED FILES {self.damaged_files:,} (see the dead letters)"
               if self.damaged_files else "")
        )


class Progress:
    """Rate-limited progress lines on stderr (only when the input is large enough)."""

    def __init__(self, total_bytes: int | None, enabled: bool = True,
                 min_bytes: int = 32 << 20, every_s: float = 1.0, out: TextIO | None = None):
        self.enabled = enabled and (total_bytes is None or total_bytes >= min_bytes)
        self.total = total_bytes
        self.every_s = every_s
        self.out = out
        self.started = time.monotonic()
        self._last = self.started

    def update(self, bytes_done: int, records: int) -> None:
        now = time.monotonic()
        if not self.enabled or now - self._last < self.every_s:
            return
        self._last = now
        rate = records / max(now - self.started, 1e-9)
        share = f" ({100 * bytes_done / self.total:.0f}%)" if self.total else ""
        print(f"progress: {records:,} records{share}, {rate:,.0f}/s", file=self.out or sys.stderr,
              flush=True)
