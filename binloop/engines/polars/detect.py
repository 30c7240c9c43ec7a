"""FRICTION-DETECT over a frame of records at once (the polars engine's detection).

It gives exactly what `binloop.core.detection` (the executable spec) gives for the same records
in the same order: the same BINEvents (content and order), the same late records and
counters.

How it works, per key `(tool, failure_mode cut to mode_level)`:

* The detector's clock (newest ts of all counted records) decides lateness and when idle
  windows are swept away; `binloop.engines.polars.clock` computes it for the whole stream.
* A key is *regular* when its counted records arrive in non-decreasing ts order with
  distinct ids (or `dedup_max` is 0). Then nothing of it is late or a duplicate, the
  newest ts before a record is its predecessor's, and every window is a column expression:
  `global` a running count; `session` a new slice per `(key, session)` where
  `ts - previous ts of that (key, session) > session_gap` (for a regular key the key's
  newest ts is the record's own); `sliding:d` the records of the key so far with
  `ts > t - d` (a sorted search per key). A sweep that dropped the key's window between two
  of its records starts a new *life* of the key, whose windows start empty.
  The key fires at its first record whose count reaches θ; evidence is the window's last
  `evidence_max` records in arrival order.
* Every other key is *irregular* (out-of-order ts, repeated ids: rare in real telemetry).
  Its counted records go, in arrival order, through `binloop.core.detection.Detector` itself,
  one detector for all irregular keys, with the clock set before each record to what it
  was in a detector of the whole stream (a clock record of a key no record can have, at
  each sweep that matters), so idle-state eviction happens exactly as there. The
  semantics thus stay written in one place.
* Replays never re-arm: each key fires at most once, with `arm_epoch` 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import polars as pl

from binloop.core.detection import DetectionParams, Detector, DetectorStats
from binloop.core.events import BINEvent, event_id
from binloop.core.schema import SessionId, ToolInvocation
from binloop.engines.polars.clock import Sweeps, beyond_lateness, sweeps
from binloop.engines.polars.frame import record_of
from binloop.engines.polars.load import LoadedRecords
from binloop.engines.polars.windows import (
    classify,
    evidence_table,
    fire_rows,
    lives,
    window_counts,
)

# Above this, ts arithmetic in float64 (the sweep schedule) is no longer exact: such a
# stream goes through the detector whole.
MAX_VECTOR_TS: Final = 1 << 53
# The clock records of irregular keys: a tool name no valid record can have.
_CLOCK_TOOL: Final = ""


@dataclass
class Detection:
    """What detection made of a frame: events in firing order, the frame rows of late
    records in arrival order, and the detector's counters."""

    events: list[BINEvent]
    late_rows: list[int]
    stats: DetectorStats = field(default_factory=DetectorStats)


def detect_rows(records: pl.DataFrame | LoadedRecords, params: DetectionParams) -> Detection:
    """Events, late rows and counters of a frame of valid records in arrival order."""
    frame = records.frame if isinstance(records, LoadedRecords) else records
    counted = _counted(frame, params)
    if counted.is_empty():
        return Detection([], [])
    if int(counted["ts"].max()) >= MAX_VECTOR_TS:  # type: ignore[arg-type]
        # The whole stream through one detector: its own clock is the stream's.
        whole = _detect_irregular(counted.with_columns(regular=pl.lit(False)), params, None)
        return _finish(frame, [whole], whole.clock_lateness)
    counted = counted.with_columns(pl.col("ts").cast(pl.Int64))
    ts = counted["ts"].to_numpy()
    late_clock = beyond_lateness(ts, params)
    counted = classify(counted, params)
    irregular = not bool(counted["regular"].all())
    schedule = sweeps(ts, params) if (irregular or late_clock) else None
    parts = [_regular_windows(counted, params, schedule),
             _detect_irregular(counted, params, schedule)]
    return _finish(frame, parts, late_clock)


def _finish(frame: pl.DataFrame, parts: list[_Fired], late_clock: int) -> Detection:
    """Merge the parts: events in firing order with their evidence records."""
    stats = DetectorStats()
    for part in parts:
        stats.add(part.stats)
    stats.beyond_lateness = late_clock
    fired = sorted((fire for part in parts for fire in part.fired), key=lambda f: f[0])
    events = [event for _, event in fired]
    _resolve_evidence(frame, events)
    late_rows = sorted(row for part in parts for row in part.late_rows)
    return Detection(events, late_rows, stats)


def _resolve_evidence(frame: pl.DataFrame, events: list[BINEvent]) -> None:
    """Replace the evidence placeholders (`{"_row": n}`) by the records of those rows."""
    wanted = sorted({ev["_row"] for event in events  # type: ignore[typeddict-item]
                     for ev in event["evidence"]})
    if not wanted:
        return
    picked = frame.select("record", "failure_mode")[wanted]
    by_row = {row: record_of(text, mode) for row, text, mode in
              zip(wanted, picked["record"].to_list(), picked["failure_mode"].to_list(),
                  strict=True)}
    for event in events:
        event["evidence"] = [by_row[ev["_row"]]  # type: ignore[typeddict-item]
                             for ev in event["evidence"]]


def _counted(frame: pl.DataFrame, params: DetectionParams) -> pl.DataFrame:
    """The counted records: frame `row`, order among them `seq`, key `mode` and `kid`."""
    mode = pl.col("failure_mode")
    if params.mode_level is not None:
        mode = mode.str.split(".").list.head(params.mode_level).list.join(".")
    return (frame.select("ts", "id", "session_id", "session_int", "tool", "failure_mode",
                         "outcome")
            .with_row_index("row")
            .filter(pl.col("outcome").is_in(sorted(params.count_outcomes))
                    & pl.col("failure_mode").is_not_null())
            .with_row_index("seq")
            .with_columns(mode=mode)
            .with_columns(kid=pl.struct("tool", "mode").rank("dense")))


# --- regular keys: column expressions -----------------------------------------------


@dataclass
class _Fired:
    """Events of a part of the keys with their counted position; late rows; counters."""

    fired: list[tuple[int, BINEvent]]
    late_rows: list[int] = field(default_factory=list)
    stats: DetectorStats = field(default_factory=DetectorStats)
    clock_lateness: int = 0


def _regular_windows(counted: pl.DataFrame, params: DetectionParams,
                     schedule: Sweeps | None) -> _Fired:
    rows = counted.filter(pl.col("regular"))
    if rows.is_empty():
        return _Fired([])
    rows = fire_rows(window_counts(lives(rows, schedule), params), params.theta)
    fires = rows.filter(pl.col("seq") == pl.col("fire_seq"))
    disarmed = rows.filter(pl.col("seq") > pl.col("fire_seq")).height
    stats = DetectorStats(counted=rows.height - disarmed, disarmed=disarmed, fired=fires.height)
    if fires.is_empty():
        return _Fired([], [], stats)
    table = evidence_table(rows, fires, params.evidence_max)
    return _Fired([(fire["seq"], _event(fire, params)) for fire in table.iter_rows(named=True)],
                  [], stats)


def _event(fire: dict[str, Any], params: DetectionParams) -> BINEvent:
    """A BINEvent as `Detector._event` builds it (evidence rows resolved later)."""
    return {
        "event_id": event_id(fire["tool"], fire["mode"], 0, params.config_digest),
        "tool": fire["tool"],
        "failure_mode": fire["mode"],
        "theta": params.theta,
        "window": str(params.window),
        "session_id": _session(fire["session_id"], fire["session_int"]),
        "count": int(fire["count"]),
        "first_ts": int(fire["first_ts"]),
        "fired_ts": int(fire["ts"]),
        "arm_epoch": 0,
        "evidence": [{"_row": row} for row in fire["evidence_rows"]],  # type: ignore[typeddict-unknown-key]
        "config": params.describe(),
    }


def _session(text: str, is_int: bool) -> SessionId:
    return int(text) if is_int else text


# --- irregular keys: the detector itself --------------------------------------------


def _detect_irregular(counted: pl.DataFrame, params: DetectionParams,
                      schedule: Sweeps | None) -> _Fired:
    rows = counted.filter(~pl.col("regular"))
    out = _Fired([])
    if rows.is_empty():
        return out
    detector = Detector(params)
    ticks = _clock_ticks(rows, schedule)
    statuses = DetectorStats()
    for rec, tick in zip(_light_records(rows), ticks, strict=True):
        if tick is not None:
            detector.observe(_clock_record(tick))
        seen = detector.observe(rec)
        _tally(statuses, seen.status)
        if seen.event is not None:
            out.fired.append((rec["_seq"], seen.event))  # type: ignore[typeddict-item]
        elif seen.status == "late":
            out.late_rows.append(rec["_row"])  # type: ignore[typeddict-item]
    out.stats = statuses
    out.clock_lateness = detector.stats.beyond_lateness
    return out


def _clock_ticks(rows: pl.DataFrame, schedule: Sweeps | None) -> list[int | None]:
    """Before each irregular record: the clock of the whole stream's last sweep, when it
    is one this detector has not seen yet (else None)."""
    if schedule is None:
        return [None] * rows.height
    last = schedule.last_at(rows["seq"].cast(pl.Int64).to_numpy())
    fresh = np.ones(last.size, dtype=bool)
    fresh[1:] = last[1:] != last[:-1]
    clocks = schedule.clocks[last]
    return [int(c) if f else None for c, f in zip(clocks.tolist(), fresh.tolist(), strict=True)]


def _clock_record(ts: int) -> ToolInvocation:
    return {"id": "", "session_id": 0, "ts": ts, "tool": _CLOCK_TOOL, "args": {},
            "outcome": "failure", "failure_mode": "CLOCK"}


def _light_records(rows: pl.DataFrame) -> Iterator[ToolInvocation]:
    """The fields the detector reads, plus the frame row and counted position."""
    for row in rows.select("id", "session_id", "session_int", "ts", "tool", "failure_mode",
                           "outcome", "row", "seq").iter_rows():
        rid, sid, sid_int, ts, tool, mode, outcome, frame_row, seq = row
        yield {"id": rid, "session_id": _session(sid, sid_int), "ts": int(ts), "tool": tool,
               "failure_mode": mode, "outcome": outcome, "_row": frame_row,  # type: ignore[typeddict-unknown-key]
               "_seq": seq}


_STATUS_FIELD: Final = {"counted": "counted", "duplicate": "duplicates", "late": "late",
                        "disarmed": "disarmed"}


def _tally(stats: DetectorStats, status: str) -> None:
    if status == "fired":
        stats.fired += 1
        stats.counted += 1
    else:
        name = _STATUS_FIELD[status]
        setattr(stats, name, getattr(stats, name) + 1)
