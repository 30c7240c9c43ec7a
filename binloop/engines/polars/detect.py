"""FRICTION-DETECT over frames of records, a batch at a time (the polars engine's detection).

It gives exactly what `binloop.core.detection` (the executable spec) gives for the same records
in the same order: the same BINEvents (content and order), late records and counters.
Every clock is a key's own (see `binloop.core.detection`), so each key is computed alone.

Per key `(tool, failure_mode cut to mode_level)`:

* A key is *regular* while its counted records arrive in non-decreasing ts order with
  distinct ids (or `dedup_max` is 0). Then nothing of it is late or a duplicate, the
  newest ts before a record is its predecessor's, and every window is a column
  expression: `global` a running count; `session` a new slice per `(key, session)` where
  `ts - previous ts of that (key, session) > session_gap`; `sliding:d` the records of the
  key so far with `ts > t - d` (a segmented sorted search). The key fires at its first
  record whose count reaches θ; the evidence is the window's last `evidence_max` records.
* A key stops being regular at its first out-of-order record or repeated id (rare in real
  telemetry): from then on its records go, in arrival order, through
  `binloop.core.detection.Detector` itself, which takes over the key's window as it stood. So
  the semantics stay written in one place.
* Ids: a proven line without an `id` has none here. Two such records can share their
  content hash only if they share their ts, so ids are computed (in Python) only for
  records of a key that share a ts; a key mixing written and absent ids is irregular.

State between batches (`DetectState`), bounded by the keys, not by the stream: the fired
keys; each key's newest ts; the counted records still in a live window of an armed
regular key (fewer than θ per window for `global` and `session`); its last `dedup_max`
records (ids); and the detector with the irregular keys. Replays never re-arm: a key
fires at most once, with `arm_epoch` 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import polars as pl

from binloop.core.detection import (
    DetectionParams,
    Detector,
    DetectorStats,
    KeyState,
    make_event,
    new_window,
)
from binloop.core.events import BINEvent
from binloop.core.schema import SessionId, ToolInvocation
from binloop.engines.polars.read import LoadedRecords, record_of

KEY: Final = ("tool", "mode")
# Above this the segmented search's keys could overflow int64 (they never do on real
# telemetry); then a per-group search is used instead.
_KEY_LIMIT: Final = 1 << 62
_COUNTED_SCHEMA: Final = {
    "seq": pl.Int64, "pos": pl.Int64, "carried": pl.Boolean, "ts": pl.Int64, "id": pl.String,
    "session_id": pl.String, "session_int": pl.Boolean, "tool": pl.String,
    "failure_mode": pl.String, "mode": pl.String, "outcome": pl.String, "record": pl.Binary,
}


@dataclass
class Detection:
    """What detection made of a batch: events in firing order, the batch rows of late
    records in arrival order, and the detector's counters."""

    events: list[BINEvent]
    late_rows: list[int]
    stats: DetectorStats = field(default_factory=DetectorStats)


def _empty_counted() -> pl.DataFrame:
    return pl.DataFrame(schema=_COUNTED_SCHEMA)


def _keys_frame(keys: Iterable[tuple[str, str]]) -> pl.DataFrame:
    pairs = list(keys)
    return pl.DataFrame({"tool": [k[0] for k in pairs], "mode": [k[1] for k in pairs]},
                        schema={"tool": pl.String, "mode": pl.String})


@dataclass
class DetectState:
    """What detection carries from one batch to the next (see the module docstring)."""

    params: DetectionParams
    detector: Detector = field(init=False)
    irregular: set[tuple[str, str]] = field(default_factory=set)
    fired: pl.DataFrame = field(default_factory=lambda: _keys_frame([]))
    newest: pl.DataFrame = field(default_factory=lambda: _keys_frame([]).with_columns(
        newest=pl.lit(None, dtype=pl.Int64)))
    carry: pl.DataFrame = field(default_factory=_empty_counted)
    recent: pl.DataFrame = field(default_factory=_empty_counted)
    # keys that have shown a written id / a record without one
    with_ids: pl.DataFrame = field(default_factory=lambda: _keys_frame([]).with_columns(
        known=pl.lit(None, dtype=pl.Boolean)))
    seen: int = 0

    def __post_init__(self) -> None:
        self.detector = Detector(self.params)

    def detect(self, frame: pl.DataFrame) -> Detection:
        """The next batch of valid records (read's `FRAME_SCHEMA`), in arrival order."""
        counted = self._counted(frame)
        return _detect_batch(self, counted)

    def _counted(self, frame: pl.DataFrame) -> pl.DataFrame:
        params = self.params
        mode = pl.col("failure_mode")
        if params.mode_level is not None:
            mode = mode.str.split(".").list.head(params.mode_level).list.join(".")
        counted = (frame.select("ts", "id", "session_id", "session_int", "tool",
                                "failure_mode", "outcome", "record")
                   .with_row_index("pos")
                   .filter(pl.col("outcome").is_in(sorted(params.count_outcomes))
                           & pl.col("failure_mode").is_not_null())
                   .with_row_index("seq")
                   .select(seq=pl.col("seq").cast(pl.Int64) + self.seen,
                           pos=pl.col("pos").cast(pl.Int64), carried=pl.lit(False),
                           ts=pl.col("ts").cast(pl.Int64), id="id", session_id="session_id",
                           session_int="session_int", tool="tool",
                           failure_mode="failure_mode", mode=mode, outcome="outcome",
                           record="record"))
        self.seen += counted.height
        return counted


def detect_rows(records: pl.DataFrame | LoadedRecords, params: DetectionParams) -> Detection:
    """Events, late rows and counters of a whole frame of valid records in arrival order."""
    frame = records.frame if isinstance(records, LoadedRecords) else records
    return DetectState(params).detect(frame)


def detect_thetas(records: pl.DataFrame | LoadedRecords, params: DetectionParams,
                  thetas: Sequence[int]) -> dict[int, list[BINEvent]]:
    """The events of a whole frame for each θ (the other settings from `params`), in one
    pass: a window's counts do not depend on θ, only where the key fires does. Each θ's
    events carry that θ's configuration digest (`DetectionParams` derives it)."""
    frame = records.frame if isinstance(records, LoadedRecords) else records
    state = DetectState(params)
    counted = state._counted(frame)
    split = _split(state, counted)
    counts = _window_counts(split.regular, params) if not split.regular.is_empty() else None
    out: dict[int, list[BINEvent]] = {}
    for theta in thetas:
        run = DetectState(replace(params, theta=theta))
        fired: list[tuple[int, BINEvent]] = []
        if counts is not None:
            fired.extend(_regular_fires(run, counts)[0])
        fired.extend(_irregular(run, split.irregular, split.transfer).fired)
        out[theta] = [event for _, event in sorted(fired, key=lambda f: f[0])]
    return out


# --- one batch ---------------------------------------------------------------------------


@dataclass
class _Split:
    """A batch's counted records by route: the regular keys' (with the carried records of
    their windows), the detector's, and the keys the detector takes over now."""

    regular: pl.DataFrame
    irregular: pl.DataFrame
    transfer: dict[tuple[str, str], tuple[list[ToolInvocation], list[str], int | None]]
    disarmed: int
    beyond: int


def _detect_batch(state: DetectState, counted: pl.DataFrame) -> Detection:
    split = _split(state, counted)
    stats = DetectorStats(disarmed=split.disarmed, beyond_lateness=split.beyond)
    fired: list[tuple[int, BINEvent]] = []
    if not split.regular.is_empty():
        counts = _window_counts(split.regular, state.params)
        regular_fired, regular_stats = _regular_fires(state, counts)
        fired.extend(regular_fired)
        stats.add(regular_stats)
        _carry_over(state, counts)
    else:
        state.carry = _empty_counted()
    irregular = _irregular(state, split.irregular, split.transfer)
    fired.extend(irregular.fired)
    stats.add(irregular.stats)
    events = [event for _, event in sorted(fired, key=lambda f: f[0])]
    return Detection(events, sorted(irregular.late_rows), stats)


def _in_keys(keys: pl.DataFrame) -> pl.Expr:
    """Whether a row's key is one of `keys` (a frame of tool, mode)."""
    return pl.struct(KEY).is_in(keys.select(pl.struct(KEY)).to_series().implode())


def _split(state: DetectState, counted: pl.DataFrame) -> _Split:
    params = state.params
    at_detector = counted.filter(_in_keys(_keys_frame(state.irregular)))
    rest = counted.filter(~_in_keys(_keys_frame(state.irregular)))
    # Every key not at the detector keeps its newest ts here, for `beyond_lateness` and
    # to tell the order of its records.
    old_newest = state.newest
    prior = pl.max_horizontal(pl.col("newest"), pl.col("ts").cum_max().shift(1).over(KEY))
    beyond_rows = (rest.join(old_newest, on=KEY, how="left").sort("seq")
                   .with_columns(prior=prior)
                   .filter(pl.col("ts") < pl.col("prior") - params.allowed_lateness_ms)
                   .select(KEY))
    state.newest = (pl.concat([old_newest, rest.group_by(KEY).agg(newest=pl.col("ts").max())])
                    .group_by(KEY).agg(pl.col("newest").max()))
    was_fired = rest.filter(_in_keys(state.fired))
    armed = rest.filter(~_in_keys(state.fired))
    combined = pl.concat([state.carry, armed]).sort("seq")
    moving_keys = _irregular_keys(state, combined, old_newest)
    transfer: dict[tuple[str, str], tuple[list[ToolInvocation], list[str], int | None]] = {}
    if not moving_keys.is_empty():
        moving = _in_keys(moving_keys)
        known = dict(((t, m), n) for t, m, n in
                     old_newest.join(moving_keys, on=KEY).select(*KEY, "newest").iter_rows())
        for key in moving_keys.select(KEY).iter_rows():
            transfer[key] = ([], [], known.get(key))
        for tool, mode, text, fmode in combined.filter(moving & pl.col("carried")).select(
                "tool", "mode", "record", "failure_mode").iter_rows():
            transfer[(tool, mode)][0].append(record_of(text, fmode))
        for tool, mode, rid, text, fmode in state.recent.filter(moving).sort("seq").select(
                "tool", "mode", "id", "record", "failure_mode").iter_rows():
            transfer[(tool, mode)][1].append(rid or record_of(text, fmode)["id"])
        state.irregular.update(transfer)
        at_detector = pl.concat([at_detector, armed.filter(moving)]).sort("seq")
        combined = combined.filter(~moving)
        state.recent = state.recent.filter(~moving)
        state.newest = state.newest.filter(~moving)
        # the detector counts beyond_lateness of its own keys, this batch's included
        beyond_rows = beyond_rows.filter(~moving)
    return _Split(combined, at_detector, transfer, was_fired.height, beyond_rows.height)


def _irregular_keys(state: DetectState, combined: pl.DataFrame,
                    old_newest: pl.DataFrame) -> pl.DataFrame:
    """Keys of `combined` (carried + this batch, armed, regular so far) that stop being
    regular in this batch."""
    params = state.params
    fresh = combined.filter(~pl.col("carried"))
    # out of order: behind the key's newest ts before this record
    backwards = (fresh.join(old_newest, on=KEY, how="left").sort("seq")
                 .with_columns(prev=pl.max_horizontal(
                     pl.col("newest"), pl.col("ts").cum_max().shift(1).over(KEY)))
                 .filter(pl.col("ts") < pl.col("prev")).select(KEY).unique())
    if params.dedup_max == 0:
        return backwards
    history = pl.concat([state.recent, fresh]).sort("seq")
    # ids written in some records of a key and absent from others
    flags = history.group_by(KEY).agg(known=pl.col("id").is_not_null().any(),
                                      unknown=pl.col("id").is_null().any())
    flags = (pl.concat([flags, state.with_ids.with_columns(unknown=~pl.col("known"))],
                       how="diagonal")
             .group_by(KEY).agg(pl.col("known").any(), pl.col("unknown").any()))
    mixed = flags.filter(pl.col("known") & pl.col("unknown")).select(KEY)
    state.with_ids = flags.filter(~(pl.col("known") & pl.col("unknown"))).select(
        *KEY, known=pl.col("known"))
    repeated = (history.filter(pl.col("id").is_not_null()).group_by(*KEY, "id").len()
                .filter(pl.col("len") > 1).select(KEY))
    # records without an id can repeat one another only within one ts
    same_ts = (history.filter(pl.col("id").is_null())
               .filter(pl.len().over(*KEY, "ts") > 1))
    if not same_ts.is_empty():
        ids = [record_of(text, fmode)["id"] for text, fmode in
               same_ts.select("record", "failure_mode").iter_rows()]
        hashed = same_ts.with_columns(id=pl.Series(ids, dtype=pl.String))
        repeated = pl.concat([repeated, hashed.group_by(*KEY, "id").len()
                              .filter(pl.col("len") > 1).select(KEY)])
    return pl.concat([backwards, mixed, repeated]).unique()


# --- regular keys: column expressions ----------------------------------------------------


def _segment_starts(by: Sequence[str]) -> pl.Expr:
    """True on the first row of each run of equal `by` values (frame sorted by `by`)."""
    start = pl.lit(False)
    for name in by:
        start = start | (pl.col(name) != pl.col(name).shift(1)).fill_null(True)
    return start


def _window_counts(rows: pl.DataFrame, params: DetectionParams) -> pl.DataFrame:
    """Sorted by window: `gid` (the counting window of a record), `idx` (its place in
    it, arrival order) and `count` (the window's count when it arrived)."""
    kind = params.window.kind
    if kind == "session":
        by = ["tool", "mode", "session_int", "session_id"]
        rows = rows.sort(*by, "seq")
        gap = (pl.col("ts") - pl.col("ts").shift(1)) > params.session_gap_ms
        new_window = _segment_starts(by) | gap
    else:
        by = ["tool", "mode"]
        rows = rows.sort(*by, "seq")
        new_window = _segment_starts(by)
    position = pl.int_range(pl.len(), dtype=pl.Int64)
    rows = rows.with_columns(gid=new_window.cast(pl.Int64).cum_sum(),
                             first=pl.when(new_window).then(position).forward_fill())
    rows = rows.with_columns(idx=position - pl.col("first"))
    if kind != "sliding":
        return rows.with_columns(count=pl.col("idx") + 1)
    before = _sliding_before(rows, params.window.size_ms)
    return rows.with_columns(count=pl.col("idx") + 1 - before)


def _sliding_before(rows: pl.DataFrame, size_ms: int) -> pl.Series:
    """For each record, the earlier records of its key with ts <= t - size.

    Segments are contiguous and ts-sorted, so one global sorted search works once each
    segment's ts are shifted past the previous segment's by more than `size`."""
    import numpy as np  # only sliding windows need it: not imported by every run

    ts = rows["ts"].to_numpy()
    first = rows["first"].to_numpy()
    starts = np.flatnonzero(first == np.arange(ts.size))
    ends = np.append(starts[1:], ts.size) - 1
    widths = ts[ends] - ts[starts] + size_ms + 1
    if int(widths.astype(object).sum()) >= _KEY_LIMIT:
        return rows.select(pl.col("ts").search_sorted(pl.col("ts") - size_ms, side="right")
                           .over("gid").cast(pl.Int64))["ts"]
    offsets = np.concatenate(([0], np.cumsum(widths)[:-1])) - ts[starts]
    key = ts + np.repeat(offsets, ends - starts + 1)
    found = np.searchsorted(key, key - size_ms, side="right")
    return pl.Series(found - first, dtype=pl.Int64)


def _regular_fires(state: DetectState, rows: pl.DataFrame) -> tuple[
        list[tuple[int, BINEvent]], DetectorStats]:
    """The events of the regular keys (rows with window counts); fired keys join
    `state.fired`. Counters of this batch's records."""
    params = state.params
    fire_at = (rows.filter(~pl.col("carried") & (pl.col("count") >= params.theta))
               .group_by(KEY).agg(fire_seq=pl.col("seq").min()))
    rows = rows.join(fire_at, on=KEY, how="left")
    fresh = rows.filter(~pl.col("carried"))
    after = fresh.filter(pl.col("seq") > pl.col("fire_seq")).height
    fires = rows.filter(pl.col("seq") == pl.col("fire_seq"))
    stats = DetectorStats(counted=fresh.height - after, disarmed=after, fired=fires.height)
    if fires.is_empty():
        return [], stats
    state.fired = pl.concat([state.fired, fires.select(KEY)])
    window = fires.select("gid", fire_idx="idx", fire_count="count", fire_seq="seq")
    members = rows.select("gid", "idx", "ts", "record", "failure_mode").join(window, on="gid")
    oldest = pl.col("fire_idx") - pl.col("fire_count") + 1
    first = members.filter(pl.col("idx") == oldest).select("fire_seq", first_ts="ts")
    kept = ((pl.col("idx") >= oldest) & (pl.col("idx") <= pl.col("fire_idx"))
            & (pl.col("idx") > pl.col("fire_idx") - params.evidence_max))
    evidence = (members.filter(kept).sort("idx").group_by("fire_seq")
                .agg(evidence=pl.col("record"), modes=pl.col("failure_mode")))
    table = (fires.join(first, left_on="seq", right_on="fire_seq")
             .join(evidence, left_on="seq", right_on="fire_seq").sort("seq"))
    out = []
    for fire in table.iter_rows(named=True):
        records = [record_of(text, mode) for text, mode in
                   zip(fire["evidence"], fire["modes"], strict=True)]
        firing = {"session_id": _session(fire["session_id"], fire["session_int"]),
                  "ts": int(fire["ts"])}
        out.append((fire["seq"], make_event(params, (fire["tool"], fire["mode"]), 0,
                                            int(fire["count"]), int(fire["first_ts"]),
                                            records, firing)))  # type: ignore[arg-type]
    return out, stats


def _carry_over(state: DetectState, rows: pl.DataFrame) -> None:
    """Keep the records of armed regular keys that a later record can still count with,
    and each such key's last `dedup_max` records (for its ids)."""
    params = state.params
    armed = rows.filter(~_in_keys(state.fired))
    kind = params.window.kind
    if kind == "global":
        live = armed
    elif kind == "session":
        key_newest = pl.col("ts").max().over(KEY)
        live = armed.filter((pl.col("gid") == pl.col("gid").max().over(
            "tool", "mode", "session_int", "session_id"))
            & (pl.col("ts").max().over("gid") + params.session_gap_ms >= key_newest))
    else:
        live = armed.filter(pl.col("ts") > pl.col("ts").max().over(KEY)
                            - 2 * params.window.size_ms)
    state.carry = (live.select(list(_COUNTED_SCHEMA)).with_columns(carried=pl.lit(True))
                   .sort("seq"))
    if params.dedup_max == 0:
        return
    fresh = armed.filter(~pl.col("carried")).select(list(_COUNTED_SCHEMA))
    history = pl.concat([state.recent, fresh])
    state.recent = (history.filter(~_in_keys(state.fired)).sort("seq")
                    .filter(pl.int_range(pl.len()).reverse().over(KEY) < params.dedup_max)
                    .with_columns(carried=pl.lit(True)))


def _session(text: str, is_int: bool) -> SessionId:
    return int(text) if is_int else text


# --- irregular keys: the detector itself -------------------------------------------------


@dataclass
class _Irregular:
    fired: list[tuple[int, BINEvent]] = field(default_factory=list)
    late_rows: list[int] = field(default_factory=list)
    stats: DetectorStats = field(default_factory=DetectorStats)


def _irregular(state: DetectState, rows: pl.DataFrame, transfer: dict[
        tuple[str, str], tuple[list[ToolInvocation], list[str], int | None]]) -> _Irregular:
    detector = state.detector
    for key, (records, ids, newest) in transfer.items():
        taken = KeyState(None)
        if records:
            taken.window = new_window(state.params)
            for rec in records:
                taken.window.add(rec)
        for rid in ids:
            taken.remember(rid, state.params.dedup_max)
        if newest is not None:
            taken.newest = newest
        detector.keys[key] = taken
    out = _Irregular()
    if rows.is_empty():
        return out
    before = DetectorStats()
    before.add(detector.stats)
    for text, fmode, seq, pos in rows.select("record", "failure_mode", "seq",
                                             "pos").iter_rows():
        seen = detector.observe(record_of(text, fmode))
        if seen.event is not None:
            out.fired.append((seq, seen.event))
        elif seen.status == "late":
            out.late_rows.append(pos)
    after: dict[str, Any] = {name: getattr(detector.stats, name) - getattr(before, name)
                             for name in ("counted", "duplicates", "late", "disarmed",
                                          "fired", "beyond_lateness")}
    out.stats = DetectorStats(**after)
    return out
