"""FRICTION-DETECT: the detection semantics, written once and used by every engine.

Read this module as the specification. For each counted record, in arrival order:

1. The record *counts* when its outcome is in `count_outcomes` and it has a
   failure mode; its key is `(tool, failure_mode cut to mode_level levels)`.
2. A record of a *disarmed* key is ignored. A record whose `id` the key has already
   counted (among its last `dedup_max`) is a duplicate and is ignored.
3. The key's window takes the record and gives its count:
   * `session`: one slice per `(key, session_id)`. A slice restarts at 0 when the
     key's newest ts (this record included) is more than `session_gap` after the
     slice's newest ts. (That covers both "t is more than the gap after the slice"
     and "the slice is dead because the key moved on".)
   * `global`: everything since the key was armed.
   * `sliding:d`: records of the key arrived so far with ts in `(t - d, t]`; a record
     more than `d` older than the key's newest ts is *late* and counts nowhere.
4. When the count reaches θ the key fires one BINEvent and is disarmed; its windows
   are dropped. :meth:`Detector.rearm` arms it again with a fresh epoch.

Memory and clocks: every clock is a key's own. A key's state is pruned only on that key's
records, and only of what the rules above already make unreachable: session slices that
the key's newest ts has passed by more than `session_gap`, sliding entries older than
`newest - 2d`, ids beyond the last `dedup_max`. So eviction is invisible: no record of
any other key, however far its clock runs ahead or behind, changes a key's events (one
agent with a skewed clock cannot silence detection elsewhere). State grows with the
number of distinct keys (a few records each), never with the stream's length.
`beyond_lateness` counts the counted records that arrive more than `allowed_lateness`
behind the newest ts of their own key: a data-quality counter that changes no event.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any, Final, Literal

import orjson

from binloop.core.events import BINEvent, event_id
from binloop.core.schema import SessionId, ToolInvocation
from binloop.core.window import WindowSpec

Key = tuple[str, str]
Status = Literal["counted", "fired", "late", "duplicate", "disarmed"]

DEFAULT_SESSION_GAP_MS: Final = 30 * 60 * 1000
DEFAULT_ALLOWED_LATENESS_MS: Final = 60 * 60 * 1000


@dataclass(frozen=True, slots=True)
class DetectionParams:
    """Everything that decides which records fire which events."""

    theta: int = 3
    window: WindowSpec = WindowSpec("session")  # noqa: RUF009 - frozen value
    count_outcomes: frozenset[str] = frozenset({"failure", "timeout"})
    mode_level: int | None = None
    evidence_max: int = 10
    session_gap_ms: int = DEFAULT_SESSION_GAP_MS
    allowed_lateness_ms: int = DEFAULT_ALLOWED_LATENESS_MS
    dedup_max: int = 64
    # The digest of the other settings that can change an event (validation, the ts
    # unit, ...: `Config.detection` gives it).
    context_digest: str = ""
    # sha256 of the fields above: part of every event_id. Derived, so that a copy with
    # another theta (`dataclasses.replace`, as sweeps do) has its own.
    config_digest: str = field(init=False, default="", compare=False)

    def __post_init__(self) -> None:
        own = {f.name: _plain(getattr(self, f.name)) for f in fields(self)
               if f.name != "config_digest"}
        object.__setattr__(self, "config_digest", config_digest(own))
        if self.theta < 1:
            raise ValueError("theta must be >= 1")
        if self.evidence_max < 1:
            raise ValueError("evidence_max must be >= 1")
        if self.mode_level is not None and self.mode_level < 1:
            raise ValueError("mode_level must be >= 1 (or unset for the full mode)")
        if self.session_gap_ms <= 0 or self.allowed_lateness_ms < 0 or self.dedup_max < 0:
            raise ValueError("session_gap must be > 0, allowed_lateness and dedup_max >= 0")

    def counts(self, rec: ToolInvocation) -> bool:
        return rec["outcome"] in self.count_outcomes and rec["failure_mode"] is not None

    def key_of(self, rec: ToolInvocation) -> Key:
        mode: str = rec["failure_mode"]  # type: ignore[assignment]
        if self.mode_level is not None:
            mode = ".".join(mode.split(".")[: self.mode_level])
        return (rec["tool"], mode)

    def describe(self) -> dict[str, Any]:
        """The part of the configuration that is copied into every event."""
        return {
            "theta": self.theta,
            "window": str(self.window),
            "count_outcomes": sorted(self.count_outcomes),
            "mode_level": self.mode_level,
            "evidence_max": self.evidence_max,
            "session_gap_ms": self.session_gap_ms,
            "digest": self.config_digest,
        }


def config_digest(settings: dict[str, Any]) -> str:
    """sha256 (lowercase hex) of settings as canonical JSON."""
    return hashlib.sha256(orjson.dumps(settings, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _plain(value: Any) -> Any:
    if isinstance(value, frozenset):
        return sorted(value)
    return value if value is None or isinstance(value, (int, str)) else str(value)


class _Slice:
    """One counting window: its count, oldest and newest ts, and the newest records."""

    __slots__ = ("count", "first_ts", "newest", "records")

    def __init__(self, evidence_max: int) -> None:
        self.count = 0
        self.first_ts = math.inf
        self.newest = -math.inf
        self.records: deque[ToolInvocation] = deque(maxlen=evidence_max)

    def add(self, rec: ToolInvocation) -> int:
        ts = rec["ts"]
        self.count += 1
        self.first_ts = min(self.first_ts, ts)
        self.newest = max(self.newest, ts)
        self.records.append(rec)
        return self.count


class GlobalWindow:
    """Cumulative count since the key was armed."""

    __slots__ = ("newest", "slice")

    def __init__(self, evidence_max: int) -> None:
        self.slice = _Slice(evidence_max)
        self.newest = -math.inf

    def add(self, rec: ToolInvocation) -> int | None:
        self.newest = max(self.newest, rec["ts"])
        return self.slice.add(rec)

    def last_window(self) -> tuple[int, list[ToolInvocation]]:
        return int(self.slice.first_ts), list(self.slice.records)


class SessionWindows:
    """One slice per session; a slice ends `gap` after its newest ts."""

    __slots__ = ("_evidence_max", "_gap", "_last", "_sweep_at", "newest", "slices")

    def __init__(self, gap_ms: int, evidence_max: int) -> None:
        self._gap = gap_ms
        self._evidence_max = evidence_max
        self.slices: dict[SessionId, _Slice] = {}
        self.newest = -math.inf
        self._sweep_at = math.inf
        self._last = _Slice(evidence_max)

    def add(self, rec: ToolInvocation) -> int | None:
        self.newest = max(self.newest, rec["ts"])
        current = self.slices.get(rec["session_id"])
        if current is None or self.newest > current.newest + self._gap:
            current = self.slices[rec["session_id"]] = _Slice(self._evidence_max)
        count = current.add(rec)
        self._last = current
        self._sweep_at = min(self._sweep_at, current.newest + self._gap)
        if self.newest > self._sweep_at:
            self._drop_dead_slices()
        return count

    def last_window(self) -> tuple[int, list[ToolInvocation]]:
        return int(self._last.first_ts), list(self._last.records)

    def _drop_dead_slices(self) -> None:
        gap, newest = self._gap, self.newest
        self.slices = {s: sl for s, sl in self.slices.items() if sl.newest + gap >= newest}
        self._sweep_at = min((sl.newest + gap for sl in self.slices.values()), default=math.inf)


class SlidingWindow:
    """Records with ts in `(t - size, t]`; entries are kept sorted by (ts, arrival)."""

    __slots__ = ("_arrivals", "_evidence_max", "_last_ts", "_size", "entries", "newest")

    def __init__(self, size_ms: int, evidence_max: int) -> None:
        self._size = size_ms
        self._evidence_max = evidence_max
        self.entries: list[tuple[int, int, ToolInvocation]] = []
        self.newest = -math.inf
        self._arrivals = 0
        self._last_ts = 0

    def add(self, rec: ToolInvocation) -> int | None:
        ts = rec["ts"]
        if ts < self.newest - self._size:
            return None
        self.newest = max(self.newest, ts)
        self._arrivals += 1
        self._last_ts = ts
        bisect.insort(self.entries, (ts, self._arrivals, rec))
        expired = bisect.bisect_right(self.entries, (self.newest - 2 * self._size, math.inf))
        if expired:
            del self.entries[:expired]
        lo, hi = self._bounds(ts)
        return hi - lo

    def last_window(self) -> tuple[int, list[ToolInvocation]]:
        lo, hi = self._bounds(self._last_ts)
        in_window = self.entries[lo:hi]
        by_arrival = sorted(in_window, key=lambda entry: entry[1])[-self._evidence_max :]
        return in_window[0][0], [entry[2] for entry in by_arrival]

    def _bounds(self, ts: int) -> tuple[int, int]:
        lo = bisect.bisect_right(self.entries, (ts - self._size, math.inf))
        return lo, bisect.bisect_right(self.entries, (ts, math.inf))


Window = GlobalWindow | SessionWindows | SlidingWindow


def new_window(params: DetectionParams) -> Window:
    if params.window.kind == "session":
        return SessionWindows(params.session_gap_ms, params.evidence_max)
    if params.window.kind == "sliding":
        return SlidingWindow(params.window.size_ms, params.evidence_max)
    return GlobalWindow(params.evidence_max)


class KeyState:
    """Armed flag, arming epoch, window, recently counted ids and newest ts of one key."""

    __slots__ = ("armed", "epoch", "newest", "recent_ids", "recent_order", "window")

    def __init__(self, window: Window | None, armed: bool = True, epoch: int = 0) -> None:
        self.armed = armed
        self.epoch = epoch
        self.window = window
        # the newest ts of the key's counted records (disarmed ones too): its own clock
        self.newest = -math.inf
        self.recent_ids: set[str] = set()
        self.recent_order: deque[str] = deque()

    def remember(self, record_id: str, dedup_max: int) -> None:
        if dedup_max == 0:
            return
        self.recent_ids.add(record_id)
        self.recent_order.append(record_id)
        if len(self.recent_order) > dedup_max:
            self.recent_ids.discard(self.recent_order.popleft())


@dataclass(slots=True)
class DetectorStats:
    """The detector's counters (summed over the shards into the run's summary)."""

    counted: int = 0
    duplicates: int = 0
    late: int = 0
    disarmed: int = 0
    fired: int = 0
    beyond_lateness: int = 0

    def add(self, other: DetectorStats) -> None:
        for name in (f.name for f in fields(self)):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(slots=True)
class Observation:
    """What one record did to its key's state, and the event it fired (if any)."""

    status: Status
    event: BINEvent | None = None


@dataclass
class Detector:
    """Keyed FRICTION-DETECT state over any set of keys (a whole stream or one shard)."""

    params: DetectionParams
    keys: dict[Key, KeyState] = field(default_factory=dict)
    stats: DetectorStats = field(default_factory=DetectorStats)
    # The newest event time seen (informational: no state depends on it). False: moved
    # by `observe`; True: by the owner with `advance_clock` (a dataflow shard).
    external_clock: bool = False
    max_ts: float = -math.inf

    def observe(self, rec: ToolInvocation) -> Observation:
        """Apply one counted record (`params.counts(rec)` must hold)."""
        ts = rec["ts"]
        if not self.external_clock and ts > self.max_ts:
            self.max_ts = ts
        key = self.params.key_of(rec)
        state = self.keys.get(key)
        if state is None:
            state = self.keys[key] = KeyState(None)
        if ts < state.newest - self.params.allowed_lateness_ms:
            self.stats.beyond_lateness += 1
        if ts > state.newest:
            state.newest = ts
        if not state.armed:
            self.stats.disarmed += 1
            return Observation("disarmed")
        if rec["id"] in state.recent_ids:
            self.stats.duplicates += 1
            return Observation("duplicate")
        if state.window is None:
            state.window = new_window(self.params)
        count = state.window.add(rec)
        if count is None:
            self.stats.late += 1
            return Observation("late")
        state.remember(rec["id"], self.params.dedup_max)
        self.stats.counted += 1
        if count < self.params.theta:
            return Observation("counted")
        self.stats.fired += 1
        event = self._event(key, state.epoch, count, state.window, rec)
        state.armed, state.window = False, None
        return Observation("fired", event)

    def ignores(self, key: Key, ts: int) -> bool:
        """Whether a counted record of `key` at `ts` is ignored because `key` is disarmed;
        if so it is accounted exactly as `observe` would (the key's own clock included). A
        cheap test that lets a caller build the full record only for a key that can use it."""
        state = self.keys.get(key)
        if state is None or state.armed:
            return False
        if ts < state.newest - self.params.allowed_lateness_ms:
            self.stats.beyond_lateness += 1
        if ts > state.newest:
            state.newest = ts
        if not self.external_clock and ts > self.max_ts:
            self.max_ts = ts
        self.stats.disarmed += 1
        return True

    def rearm(self, key: Key, fired_epoch: int) -> bool:
        """Arm a key again after the build for its `fired_epoch` event failed.

        Idempotent: only the first re-arm of a given epoch has an effect.
        """
        state = self.keys.get(key)
        if state is None or state.armed or state.epoch != fired_epoch:
            return False
        state.armed, state.epoch, state.window = True, fired_epoch + 1, None
        return True

    def disarm(self, key: Key, epoch: int = 0) -> None:
        """Mark a key as answered by a tool (e.g. from the library at start-up)."""
        state = self.keys.setdefault(key, KeyState(None))
        state.armed, state.window = False, None
        state.epoch = max(state.epoch, epoch)

    def advance_clock(self, ts: float) -> None:
        """Event time has reached `ts` (informational: eviction runs on each key's own
        clock, so no other key's records, however skewed, change a key's events)."""
        if ts > self.max_ts:
            self.max_ts = ts

    def _event(
        self, key: Key, epoch: int, count: int, window: Window, rec: ToolInvocation
    ) -> BINEvent:
        first_ts, evidence = window.last_window()
        return make_event(self.params, key, epoch, count, first_ts, evidence, rec)


def make_event(params: DetectionParams, key: Key, epoch: int, count: int, first_ts: int,
               evidence: list[ToolInvocation], firing: ToolInvocation) -> BINEvent:
    """The BINEvent of `key` firing at record `firing` (every engine builds it here)."""
    tool, mode = key
    return {
        "event_id": event_id(tool, mode, epoch, params.config_digest),
        "tool": tool,
        "failure_mode": mode,
        "theta": params.theta,
        "window": str(params.window),
        "session_id": firing["session_id"],
        "count": count,
        "first_ts": first_ts,
        "fired_ts": firing["ts"],
        "arm_epoch": epoch,
        "evidence": evidence,
        "config": params.describe(),
    }


def detect(params: DetectionParams, records: Iterable[ToolInvocation]) -> list[BINEvent]:
    """All events of a stream of valid records (the whole spec in one call)."""
    detector = Detector(params)
    events = []
    for rec in records:
        if params.counts(rec):
            fired = detector.observe(rec).event
            if fired is not None:
                events.append(fired)
    return events
