"""The detector's clock over a whole stream at once: lateness and idle-state sweeps.

`binloop.core.detection.Detector` keeps one clock, the newest ts of all the counted records it
has seen (`max_ts`). Two things depend on it, and both are functions of the counted
records' ts in arrival order alone, whatever their keys:

* `beyond_lateness`: records more than `allowed_lateness` behind the clock;
* sweeps (`Detector._evict_idle`): the first record sweeps; afterwards a record that
  raises the clock to at least the last sweep's clock + max(horizon, 1s) / 2 sweeps
  again, dropping every window whose newest ts is below `clock - allowed_lateness -
  horizon`. A window that a sweep dropped starts afresh at its key's next record.

This module computes the sweeps (position and cut-off) with numpy; a Python loop runs
once per sweep, not per record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from binloop.core.detection import DetectionParams

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Sweeps:
    """Positions (in counted-record order) where the detector sweeps, with the cut-off
    of each: windows whose newest ts is below it are dropped."""

    positions: IntArray
    cutoffs: npt.NDArray[np.float64]
    clocks: IntArray

    def last_at(self, seq: IntArray) -> IntArray:
        """Index (into `positions`) of the last sweep at or before each position."""
        return np.searchsorted(self.positions, seq, side="right").astype(np.int64) - 1


def clock(ts: IntArray) -> IntArray:
    """The detector's `max_ts` after each counted record."""
    return np.maximum.accumulate(ts) if ts.size else ts


def beyond_lateness(ts: IntArray, params: DetectionParams) -> int:
    """Records more than `allowed_lateness` behind the newest ts seen before them."""
    if ts.size < 2:
        return 0
    return int(np.count_nonzero(ts[1:] < clock(ts)[:-1] - params.allowed_lateness_ms))


def sweeps(ts: IntArray, params: DetectionParams) -> Sweeps | None:
    """The sweeps of a detector fed these counted ts; None when it never drops anything
    (an unbounded window: only the first record sweeps, with no cut-off)."""
    horizon = params.horizon_ms()
    if math.isinf(horizon) or ts.size == 0:
        return None
    max_ts = clock(ts)
    step = max(horizon, 1000.0) / 2
    following = np.searchsorted(max_ts, max_ts + step, side="left").tolist()
    positions: list[int] = []
    at = 0
    while at < ts.size:
        positions.append(at)
        at = following[at]
    where = np.asarray(positions, dtype=np.int64)
    clocks = max_ts[where]
    cutoffs = (clocks - float(params.allowed_lateness_ms) - horizon).astype(np.float64)
    return Sweeps(where, cutoffs, clocks)
