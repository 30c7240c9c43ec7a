"""Ground truth for a sweep: which (tool, failure_mode) keys deserve a tool.

* `injected`: the pairs a simulator injected (`FILE.truth.json` beside the input).
* `sessions:N` (the default for real telemetry): a key deserves a tool when its
  failures recur in at least N distinct sessions. Recurrence across sessions, not within
  one, is what a built tool pays back on: the next session would have used it. A key
  that fails N times in one session only (one task stuck in a retry loop) is not.
* `failures:N`: at least N counted failures overall, whatever the sessions.
* `auto`: `injected` when the truth file exists and lists pairs, else `sessions:2`.

Both data definitions read only the records (counted as detection counts them), never
the detector's output, so they do not depend on θ or the window.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson
import polars as pl

from binloop.core.detection import DetectionParams
from binloop.sim.simulate import truth_path
from binloop.sim.sweep import KEY, counted_records, mode_cut


@dataclass(frozen=True)
class TruthSpec:
    kind: str  # injected | sessions | failures
    n: int = 0

    @classmethod
    def parse(cls, text: str) -> TruthSpec:
        name, _, arg = text.strip().partition(":")
        if name in ("auto", "injected") and not arg:
            return cls(name)
        if name in ("sessions", "failures") and arg.isdigit() and int(arg) >= 1:
            return cls(name, int(arg))
        raise ValueError(f"invalid truth {text!r}: use auto, injected, sessions:N or failures:N")

    def describe(self) -> str:
        if self.kind == "injected":
            return "positive iff the simulator injected the (tool, failure_mode) pair"
        if self.kind == "sessions":
            return (f"positive iff the key's counted failures occur in >= {self.n} distinct "
                    "sessions")
        return f"positive iff the key has >= {self.n} counted failures in the whole input"


def resolve(spec: TruthSpec, input_path: str, frame: pl.DataFrame,
            params: DetectionParams) -> tuple[pl.DataFrame, TruthSpec]:
    """The truth keys and the definition actually used (`auto` resolved)."""
    injected = _injected_pairs(input_path)
    if spec.kind == "auto":
        spec = TruthSpec("injected") if injected is not None else TruthSpec("sessions", 2)
    if spec.kind == "injected":
        if injected is None:
            raise ValueError(f"no injected pairs in {truth_path(input_path)}")
        keys = injected.select(pl.col("tool"),
                               mode_cut(pl.col("failure_mode"), params.mode_level)).unique()
        return keys, spec
    return from_data(frame, params, spec), spec


def from_data(frame: pl.DataFrame, params: DetectionParams, spec: TruthSpec) -> pl.DataFrame:
    per_key = counted_records(frame, params).group_by(KEY).agg(
        failures=pl.len(), sessions=pl.col("session").n_unique())
    column = "sessions" if spec.kind == "sessions" else "failures"
    return per_key.filter(pl.col(column) >= spec.n).select(KEY)


def _injected_pairs(input_path: str) -> pl.DataFrame | None:
    path = truth_path(input_path)
    if not Path(path).is_file():
        return None
    pairs = orjson.loads(Path(path).read_bytes()).get("pairs") or []
    if not pairs:
        return None
    return pl.DataFrame([{"tool": p["tool"], "failure_mode": p["failure_mode"]} for p in pairs])
