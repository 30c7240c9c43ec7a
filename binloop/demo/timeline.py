"""The demo's timeline: one line per step of the loop, with the wall-clock offset from
the start of the demo, printed as it happens and kept in `timeline.txt`."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, TextIO

WIDTH = 10  # of the source column


def fmt_ms(ms: float | None) -> str:
    """`7 ms`, `1.83 s`, `2 min 5 s`."""
    if ms is None:
        return "?"
    if ms < 1000:
        return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.1f} ms"
    if ms < 120_000:
        return f"{ms / 1000:.2f} s"
    return f"{int(ms // 60_000)} min {ms % 60_000 / 1000:.0f} s"


def stages_line(stages: list[dict[str, Any]]) -> str:
    """`pause 5 ms · design 97 ms · ...` from a build result's or audit record's stages."""
    parts = []
    for stage in stages:
        mark = "" if stage.get("outcome") == "ok" else f" ({stage.get('outcome')})"
        parts.append(f"{stage.get('stage')} {fmt_ms(stage.get('duration_ms'))}{mark}")
    return " · ".join(parts)


class Timeline:
    def __init__(self, started: float, path: Path | None = None,
                 out: TextIO | None = None) -> None:
        self.started = started
        self.out = out or sys.stdout
        self._file = open(path, "a", encoding="utf-8") if path is not None else None  # noqa: SIM115

    def offset(self, at: float | None = None) -> float:
        return (time.monotonic() if at is None else at) - self.started

    def add(self, source: str, text: str, at: float | None = None) -> None:
        line = f"{self.offset(at):+8.2f}s  {source:<{WIDTH}} {text}"
        self.write(line)

    def write(self, line: str = "") -> None:
        print(line, file=self.out, flush=True)
        if self._file is not None:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
