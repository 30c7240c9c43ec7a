"""θ sweep: replay one telemetry file for every (window, θ) and score the BINEvents.

Scoring (all polars expressions over the runs' events and the records' frame):

* A *key* is `(tool, failure_mode cut to mode_level)`; a record counts as in detection.
* Ground truth is a set of keys (see :mod:`binloop.sim.truth`). A fired key is a true
  positive when it is in the truth; `precision = tp / fired`, `recall = tp / |truth|`.
* `builds_per_session = fired / sessions`: each event is one build (the fired set keeps a
  key from firing twice; no build fails in a sweep, so nothing re-arms).
* `slices_per_session`: (key, session) slices whose count reaches θ, per session: what a
  detector without a fired set would build (one build per session per key).
* Detection delay of a true positive: records and sessions (in order of first
  appearance) from the key's first counted failure to the record that fired it.
* `used_after`: fired keys that fail again after their event (a tool would have been
  used); `failures_after`: how many such failures.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import polars as pl

from binloop.core.detection import DetectionParams
from binloop.core.events import BINEvent
from binloop.core.window import WindowSpec
from binloop.sim.replay_engine import Loaded, detect_events

KEY: Final = ("tool", "failure_mode")
RUN: Final = ("window", "theta")
DEFAULT_THETAS: Final = (2, 3, 4, 5)
DEFAULT_WINDOWS: Final = ("session", "global", "sliding:1h")
SUMMARY_FIELDS: Final = (
    "window", "theta", "precision", "recall", "f1", "builds_per_session", "fired", "tp", "fp",
    "fn", "positives", "slices_per_session", "delay_records_median", "delay_records_mean",
    "delay_sessions_median", "delay_sessions_mean", "delay_sessions_max", "used_after",
    "failures_after", "engine_s",
)


@dataclass(frozen=True)
class SweepPlan:
    thetas: tuple[int, ...]
    windows: tuple[WindowSpec, ...]
    base: DetectionParams

    def runs(self) -> list[DetectionParams]:
        from dataclasses import replace

        return [replace(self.base, theta=theta, window=window)
                for window in self.windows for theta in self.thetas]


def mode_cut(mode: pl.Expr, level: int | None) -> pl.Expr:
    """`failure_mode` cut to its first `level` levels (as `DetectionParams.key_of`)."""
    if level is None:
        return mode
    return mode.str.split(".").list.head(level).list.join(".")


def counted_records(frame: pl.DataFrame, params: DetectionParams) -> pl.DataFrame:
    """The records that count, with their key and the ordinal of their session."""
    ordinals = (frame.group_by("session").agg(first=pl.col("row").min())
                .with_columns(session_ord=pl.col("first").rank("ordinal").cast(pl.Int64) - 1)
                .drop("first"))
    return (frame.filter(pl.col("outcome").is_in(sorted(params.count_outcomes))
                         & pl.col("failure_mode").is_not_null())
            .with_columns(failure_mode=mode_cut(pl.col("failure_mode"), params.mode_level))
            .join(ordinals, on="session", how="left"))


def events_frame(runs: Sequence[tuple[DetectionParams, list[BINEvent], float]]) -> pl.DataFrame:
    """One row per event of each run: the run, the key and the id of the firing record."""
    rows = [{"window": str(params.window), "theta": params.theta, "tool": event["tool"],
             "failure_mode": event["failure_mode"], "fire_id": event["evidence"][-1]["id"]}
            for params, events, _ in runs for event in events]
    schema = {"window": pl.String, "theta": pl.Int64, "tool": pl.String,
              "failure_mode": pl.String, "fire_id": pl.String}
    return pl.DataFrame(rows, schema=schema)


def score(frame: pl.DataFrame, truth: pl.DataFrame, plan: SweepPlan,
          runs: Sequence[tuple[DetectionParams, list[BINEvent], float]]) -> pl.DataFrame:
    """The summary rows (one per window and θ) of the runs' events."""
    counted = counted_records(frame, plan.base)
    sessions = frame.select(pl.col("session").n_unique()).item()
    keys = (counted.group_by(KEY).agg(first_row=pl.col("row").min(),
                                      first_session=pl.col("session_ord").min())
            .join(truth.with_columns(positive=pl.lit(True)), on=KEY, how="full", coalesce=True)
            .with_columns(pl.col("positive").fill_null(False)))
    run_frame = pl.DataFrame([{"run": i, "window": str(p.window), "theta": p.theta,
                               "engine_s": s} for i, (p, _, s) in enumerate(runs)],
                             schema={"run": pl.Int64, "window": pl.String, "theta": pl.Int64,
                                     "engine_s": pl.Float64})
    fired = (events_frame(runs)
             .join(counted.select(fire_id="id", fire_row="row", fire_session="session_ord"),
                   on="fire_id", how="left")
             .group_by(*RUN, *KEY).agg(pl.col("fire_row", "fire_session").min()))
    per_key = (run_frame.join(keys, how="cross")
               .join(fired, on=[*RUN, *KEY], how="left")
               .with_columns(fired=pl.col("fire_row").is_not_null()))
    after = _failures_after(counted, fired)
    slices = _slices_per_session(counted, plan.thetas, sessions)
    totals = run_frame.join(_aggregate(per_key), on=RUN, how="left").with_columns(
        pl.col("fired", "tp", "positives").fill_null(0))
    return (_rates(totals, sessions).join(after, on=RUN, how="left")
            .join(slices, on="theta", how="left")
            .with_columns(pl.col("used_after", "failures_after").fill_null(0),
                          pl.col("slices_per_session").fill_null(0.0))
            .sort("run").select(SUMMARY_FIELDS))


def _aggregate(per_key: pl.DataFrame) -> pl.DataFrame:
    tp_rows = pl.col("fired") & pl.col("positive")
    delay_records = (pl.col("fire_row") - pl.col("first_row")).filter(tp_rows)
    delay_sessions = (pl.col("fire_session") - pl.col("first_session")).filter(tp_rows)
    return per_key.group_by(RUN).agg(
        fired=pl.col("fired").sum().cast(pl.Int64),
        tp=tp_rows.sum().cast(pl.Int64),
        positives=pl.col("positive").sum().cast(pl.Int64),
        delay_records_median=delay_records.median(),
        delay_records_mean=delay_records.mean(),
        delay_sessions_median=delay_sessions.median(),
        delay_sessions_mean=delay_sessions.mean(),
        delay_sessions_max=delay_sessions.max(),
    )


def _rates(totals: pl.DataFrame, sessions: int) -> pl.DataFrame:
    precision = pl.when(pl.col("fired") > 0).then(pl.col("tp") / pl.col("fired"))
    recall = pl.when(pl.col("positives") > 0).then(pl.col("tp") / pl.col("positives"))
    return totals.with_columns(
        fp=pl.col("fired") - pl.col("tp"), fn=pl.col("positives") - pl.col("tp"),
        precision=precision, recall=recall,
        builds_per_session=pl.col("fired") / max(sessions, 1),
    ).with_columns(
        f1=pl.when(pl.col("tp") > 0)
        .then(2 * pl.col("precision") * pl.col("recall")
              / (pl.col("precision") + pl.col("recall")))
        .when(pl.col("positives") > 0).then(0.0))


def _failures_after(counted: pl.DataFrame, fired: pl.DataFrame) -> pl.DataFrame:
    later = (fired.join(counted.select(*KEY, "row"), on=KEY, how="inner")
             .filter(pl.col("row") > pl.col("fire_row")))
    return later.group_by(RUN).agg(
        used_after=pl.struct(KEY).n_unique().cast(pl.Int64),
        failures_after=pl.len().cast(pl.Int64))


def _slices_per_session(counted: pl.DataFrame, thetas: Sequence[int],
                        sessions: int) -> pl.DataFrame:
    per_slice = counted.group_by(*KEY, "session").agg(count=pl.len())
    return (pl.DataFrame({"theta": list(thetas)}, schema={"theta": pl.Int64})
            .join(per_slice, how="cross")
            .group_by("theta").agg(
                slices_per_session=(pl.col("count") >= pl.col("theta")).sum() / max(sessions, 1)))


def run_sweep(loaded: Loaded, plan: SweepPlan, truth: pl.DataFrame,
              progress: bool = True) -> pl.DataFrame:
    """Run the engine for each (window, θ) of the plan and score the events."""
    runs: list[tuple[DetectionParams, list[BINEvent], float]] = []
    all_runs = plan.runs()
    started = time.perf_counter()
    for index, params in enumerate(all_runs, 1):
        begun = time.perf_counter()
        events = detect_events(loaded, params)
        runs.append((params, events, time.perf_counter() - begun))
        if progress:
            print(f"sweep: {index}/{len(all_runs)} window {params.window} theta {params.theta}: "
                  f"{len(events)} events ({time.perf_counter() - started:.1f}s)",
                  file=sys.stderr, flush=True)
    return score(loaded.frame, truth, plan, runs)


def summary_rows(summary: pl.DataFrame) -> list[dict[str, Any]]:
    """The rows of `summary.json`, floats rounded to 4 places."""
    rounded = summary.with_columns(pl.col(pl.Float64).round(4))
    return rounded.to_dicts()


def average_runs(summaries: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """The mean of several sweeps (one per seed) per (window, θ), with the standard
    deviation over seeds of precision, recall, F1 and builds per session."""
    every = pl.concat([s.with_columns(pl.col(pl.Int64).cast(pl.Float64)) for s in summaries])
    numeric = [c for c in SUMMARY_FIELDS if c not in RUN]
    spread = ("precision", "recall", "f1", "builds_per_session")
    return (every.with_columns(theta=pl.col("theta").cast(pl.Int64))
            .group_by(RUN, maintain_order=True)
            .agg(*(pl.col(c).mean() for c in numeric),
                 *(pl.col(c).std().alias(f"{c}_sd") for c in spread),
                 repeats=pl.len()))
