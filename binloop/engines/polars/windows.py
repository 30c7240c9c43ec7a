"""Windows of *regular* keys as column expressions (see `binloop.engines.polars.engine`).

A key is regular when its counted records arrive in non-decreasing ts order with distinct
ids. For such a key nothing is late or a duplicate, and the newest ts before a record is
its predecessor's, so each window kind is a sort and a few running sums:

* `global`: the n-th record of the key has count n;
* `session`: records of one (key, life, session) in arrival order; a new slice starts where
  `ts - previous ts > session_gap` (the key's newest ts is the record's own);
* `sliding:d`: the records of the key's life so far with ts in `(t - d, t]`, a
  segmented sorted search.

A key's *life* ends where a sweep of the detector's clock dropped its window between two
of its records (`binloop.engines.polars.clock`); a new life starts with empty windows.

Work is done on frames sorted by segment, not with `over()` windows: a sort and shifted
comparisons cost far less than hash-partitioning tens of thousands of small groups.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from binloop.core.detection import DetectionParams
from binloop.engines.polars.clock import Sweeps

# Above this the segmented search's keys could overflow int64 (they never do on real
# telemetry); then a per-group search is used instead.
_KEY_LIMIT = 1 << 62


def segment_starts(by: Sequence[str]) -> pl.Expr:
    """True on the first row of each run of equal `by` values (frame sorted by `by`)."""
    start = pl.lit(False)
    for name in by:
        start = start | (pl.col(name) != pl.col(name).shift(1)).fill_null(True)
    return start


def classify(counted: pl.DataFrame, params: DetectionParams) -> pl.DataFrame:
    """`regular`: the key's records are in ts order and (with dedup on) have distinct ids."""
    by_key = counted.sort("kid", "seq")
    backwards = by_key.filter(~segment_starts(["kid"]) & (pl.col("ts") < pl.col("ts").shift(1)))
    irregular = backwards["kid"].unique()
    if params.dedup_max > 0:
        repeated = counted.group_by("kid", "id").len().filter(pl.col("len") > 1)["kid"]
        irregular = pl.concat([irregular, repeated]).unique()
    return counted.with_columns(regular=~pl.col("kid").is_in(irregular.implode()))


def lives(rows: pl.DataFrame, schedule: Sweeps | None) -> pl.DataFrame:
    """Sorted by (kid, seq), with `life`: sweeps that dropped the key's window so far."""
    rows = rows.sort("kid", "seq")
    if schedule is None:
        return rows.with_columns(life=pl.lit(0, dtype=pl.Int64))
    last = schedule.last_at(rows["seq"].cast(pl.Int64).to_numpy())
    start = segment_starts(["kid"])
    # The key's window holds its previous record, whose ts is the window's newest ts.
    dropped = (~start & (pl.col("sweep_seq") > pl.col("seq").shift(1))
               & (pl.col("sweep_cut") > pl.col("ts").shift(1)))
    return (rows.with_columns(sweep_seq=pl.Series(schedule.positions[last]),
                              sweep_cut=pl.Series(schedule.cutoffs[last]))
            .with_columns(start=start, dropped=dropped.cast(pl.Int64))
            .with_columns(life=_running_sum("dropped", "start"))
            .drop("sweep_seq", "sweep_cut", "start", "dropped"))


def _running_sum(values: str, start: str) -> pl.Expr:
    """Sum of `values` from the start of the row's segment up to the row."""
    total = pl.col(values).cum_sum()
    return total - pl.when(pl.col(start)).then(total - pl.col(values)).forward_fill()


def window_counts(rows: pl.DataFrame, params: DetectionParams) -> pl.DataFrame:
    """Sorted by window: `gid` (the counting window of a record), `idx` (its place in
    it, arrival order) and `count` (the window's count when it arrived)."""
    kind = params.window.kind
    if kind == "session":
        by = ["kid", "life", "session_int", "session_id"]
        rows = rows.sort(*by, "seq")
        gap = (pl.col("ts") - pl.col("ts").shift(1)) > params.session_gap_ms
        new_window = segment_starts(by) | gap
    else:
        by = ["kid"] if kind == "global" else ["kid", "life"]
        rows = rows.sort(*by, "seq")
        new_window = segment_starts(by)
    position = pl.int_range(pl.len(), dtype=pl.Int64)
    rows = rows.with_columns(gid=new_window.cast(pl.Int64).cum_sum(),
                             first=pl.when(new_window).then(position).forward_fill())
    rows = rows.with_columns(idx=position - pl.col("first"))
    if kind != "sliding":
        return rows.with_columns(count=pl.col("idx") + 1)
    before = _sliding_before(rows, params.window.size_ms)
    return rows.with_columns(count=pl.col("idx") + 1 - before)


def _sliding_before(rows: pl.DataFrame, size_ms: int) -> pl.Series:
    """For each record, the earlier records of its window segment with ts <= t - size.

    Segments are contiguous and ts-sorted, so one global sorted search works once each
    segment's ts are shifted past the previous segment's by more than `size`."""
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


def fire_rows(rows: pl.DataFrame, theta: int) -> pl.DataFrame:
    """`fire_seq`: the key's first record whose count reaches theta (null if none)."""
    fired = (rows.filter(pl.col("count") >= theta).group_by("kid")
             .agg(fire_seq=pl.col("seq").min()))
    return rows.join(fired, on="kid", how="left")


def evidence_table(rows: pl.DataFrame, fires: pl.DataFrame, evidence_max: int) -> pl.DataFrame:
    """Each fire with `first_ts` (its window's oldest record) and `evidence_rows` (the
    window's newest `evidence_max` frame rows, arrival order)."""
    window = fires.select("gid", fire_idx="idx", fire_count="count", fire_seq="seq")
    members = rows.select("gid", "idx", "row", "ts").join(window, on="gid")
    oldest = pl.col("fire_idx") - pl.col("fire_count") + 1
    first = members.filter(pl.col("idx") == oldest).select("fire_seq", first_ts="ts")
    kept = (pl.col("idx") >= oldest) & (pl.col("idx") <= pl.col("fire_idx")) & (
        pl.col("idx") > pl.col("fire_idx") - evidence_max)
    evidence = (members.filter(kept).sort("idx").group_by("fire_seq")
                .agg(evidence_rows=pl.col("row")))
    return (fires.join(first, left_on="seq", right_on="fire_seq")
            .join(evidence, left_on="seq", right_on="fire_seq").sort("seq"))
