"""Seeded telemetry simulator: valid ToolInvocation JSONL with ground truth beside it.

Profiles (all seeded: the same parameters give the same bytes):

* `paper` (default): modelled on the paper's evaluation. `sessions` agent sessions
  (int ids from 1, in start order; several run at once, as in a fleet) make background
  tool calls that succeed. `pairs` (tool, failure_mode) pairs are *injected*: pair `p`
  starts at session `onset_p` (uniform in the first `onset_max` share of the sessions)
  and from then on hits each session with probability `rate_p` (log-uniform in
  `[rate_min, rate_max]`); a hit is a burst of `1 + Geometric` consecutive failures of
  the pair (mean `burst_p`, uniform in `[burst_min, burst_max]`): the agent retrying.
  On top of that, each background call fails with probability `noise_rate` with a
  one-off (tool, failure_mode) that is not injected, repeated with probability
  `noise_retry` each time (a burst of 1 + Geometric(noise_retry)); a share
  `unclassified_rate` of calls fail with no failure_mode and `cancelled_rate` are
  cancelled (neither counts). The injected pairs are the ground truth: the friction a
  tool should be built for.
* `bulk`: `records` calls (throughput input): `failure_rate` of them fail with one of
  `keys` (tool, failure_mode) keys, the rest succeed; `calls_per_session` per session.
  A failure reuses its session's key with probability `session_repeat` (retries), so
  some keys reach θ within a session and events fire.
* `distinct`: `records` calls, a share `failure_rate` (default 1) fail, and every
  failure has a key never seen before (the state-size stress input).

Records: `ts` in unix ms from `start_ts` (2023-11-14, in the past), `id` the exact
content hash of `binloop.core.schema.record_id`, args and error texts shaped like a coding
agent's (`binloop.sim.catalogue`), a share `secret_rate` of records carry
credential-looking fakes in args or error. Generation is vectorised (polars): a million
records take seconds.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from binloop.sim.catalogue import (
    ALL_MODES,
    FINE_MODES,
    TOOL_NAMES,
    TOOLS,
    args_json,
    error_text,
)
from binloop.sim.params import DEFAULT_START_TS, PROFILES, SimParams

__all__ = ["DEFAULT_START_TS", "PROFILES", "SimParams", "Simulation"]

@dataclass
class Simulation:
    """The generated records (one row per record, arrival order) and the ground truth."""

    frame: pl.DataFrame
    truth: dict[str, Any]


def _uniform(rng: random.Random, n: int) -> pl.Series:
    return pl.Series([rng.random() for _ in range(n)], dtype=pl.Float64)


def _randbits(rng: random.Random, n: int) -> pl.Series:
    return pl.Series([rng.getrandbits(63) for _ in range(n)], dtype=pl.UInt64)


def _geometric_extra(u: pl.Expr, keep_going: pl.Expr | float) -> pl.Expr:
    """Number of extra repeats, P(>= k) = keep_going**k (inverse transform of `u`)."""
    q = keep_going if isinstance(keep_going, pl.Expr) else pl.lit(keep_going)
    return (pl.when(q <= 0).then(0.0)
            .otherwise((u.log() / q.log()).floor())).cast(pl.Int64)


# --- the paper profile -----------------------------------------------------------------

def _sessions_frame(p: SimParams, rng: random.Random, sessions: int) -> pl.DataFrame:
    calls = [rng.randint(p.calls_min, p.calls_max) for _ in range(sessions)]
    starts = [p.start_ts + i * p.session_spacing_s * 1000 + rng.randint(0, 30_000)
              for i in range(sessions)]
    return pl.DataFrame({"session_id": pl.int_range(1, sessions + 1, eager=True),
                         "calls": calls, "start": starts})


def _background_calls(p: SimParams, rng: random.Random, sessions: pl.DataFrame) -> pl.DataFrame:
    rows = sessions.select("session_id", "start", pl.int_ranges(0, "calls").alias("call")
                           ).explode("call")
    n = rows.height
    lo, hi = p.call_gap_s
    gaps = pl.Series([rng.randint(lo * 1000, hi * 1000) for _ in range(n)])
    tools = pl.Series(rng.choices(TOOL_NAMES, weights=list(TOOLS.values()), k=n))
    return rows.with_columns(gap=gaps).with_columns(
        ts=pl.col("start") + pl.col("gap").cum_sum().over("session_id"),
        tool=tools, u=_uniform(rng, n), u2=_uniform(rng, n),
        noise_mode=pl.Series(rng.choices(ALL_MODES, k=n)),
    ).drop("start", "gap")


def _injected_pairs(p: SimParams, rng: random.Random, sessions: int) -> pl.DataFrame:
    keys = [(t, m) for t in TOOL_NAMES for m in ALL_MODES]
    chosen = rng.sample(keys, p.pairs)
    log_lo, log_hi = math.log(p.rate_min), math.log(p.rate_max)
    return pl.DataFrame({
        "pair": list(range(p.pairs)),
        "tool": [t for t, _ in chosen],
        "failure_mode": [m for _, m in chosen],
        "rate": [math.exp(rng.uniform(log_lo, log_hi)) for _ in chosen],
        "onset_session": [1 + int(rng.random() * p.onset_max * sessions) for _ in chosen],
        "burst_mean": [rng.uniform(p.burst_min, p.burst_max) for _ in chosen],
    }, schema_overrides={"pair": pl.Int64})


def _bursts(hits: pl.DataFrame, extra: pl.Expr) -> pl.DataFrame:
    """One row per failure of each hit: the hit's row repeated 1 + extra times."""
    return (hits.with_columns(repeat=pl.int_ranges(0, extra + 1)).explode("repeat"))


def _injected_failures(p: SimParams, rng: random.Random, pairs: pl.DataFrame,
                       calls: pl.DataFrame) -> pl.DataFrame:
    spans = calls.group_by("session_id").agg(first=pl.col("ts").min(), last=pl.col("ts").max())
    grid = pairs.join(spans, how="cross").filter(pl.col("session_id") >= pl.col("onset_session"))
    grid = grid.sort("pair", "session_id").with_columns(u=_uniform(rng, grid.height),
                                                        u2=_uniform(rng, grid.height),
                                                        u3=_uniform(rng, grid.height))
    hits = grid.filter(pl.col("u") < pl.col("rate"))
    keep_going = 1 - 1 / pl.col("burst_mean")
    failures = _bursts(hits, _geometric_extra(pl.col("u2"), keep_going))
    return failures.select(
        "session_id", "tool", "failure_mode",
        ts=(pl.col("first") + (pl.col("u3") * (pl.col("last") - pl.col("first"))).cast(pl.Int64)
            + pl.col("repeat") * 4000 + 1),
        kind=pl.lit("injected"), pair=pl.col("pair"))


def _noise_and_background(p: SimParams, calls: pl.DataFrame,
                          injected_keys: set[tuple[str, str]]) -> pl.DataFrame:
    is_injected = pl.concat_str(["tool", "noise_mode"], separator="\x1f").is_in(
        [f"{t}\x1f{m}" for t, m in injected_keys])
    noise_cut = p.noise_rate
    unclassified_cut = noise_cut + p.unclassified_rate
    cancelled_cut = unclassified_cut + p.cancelled_rate
    kind = (pl.when((pl.col("u") < noise_cut) & ~is_injected).then(pl.lit("noise"))
            .when((pl.col("u") >= noise_cut) & (pl.col("u") < unclassified_cut))
            .then(pl.lit("unclassified"))
            .when((pl.col("u") >= unclassified_cut) & (pl.col("u") < cancelled_cut))
            .then(pl.lit("cancelled"))
            .otherwise(pl.lit("success")))
    rows = calls.with_columns(kind=kind)
    repeats = pl.when(pl.col("kind") == "noise").then(
        _geometric_extra(pl.col("u2"), p.noise_retry)).otherwise(0)
    rows = _bursts(rows, repeats)
    return rows.select(
        "session_id", "tool",
        failure_mode=pl.when(pl.col("kind") == "noise").then(pl.col("noise_mode")),
        ts=pl.col("ts") + pl.col("repeat") * 3000, kind="kind",
        pair=pl.lit(None, pl.Int64))


def simulate_paper(p: SimParams) -> Simulation:
    rng = random.Random(p.seed)
    sessions = p.sessions
    if p.records is not None:
        sessions = max(1, p.records * 2 // (p.calls_min + p.calls_max))
    session_frame = _sessions_frame(p, rng, sessions)
    calls = _background_calls(p, rng, session_frame)
    pairs = _injected_pairs(p, rng, sessions)
    injected = _injected_failures(p, rng, pairs, calls)
    keys = set(zip(pairs["tool"].to_list(), pairs["failure_mode"].to_list(), strict=True))
    rest = _noise_and_background(p, calls, keys)
    frame = pl.concat([rest, injected], how="vertical_relaxed").sort(
        "ts", "session_id", "tool", maintain_order=True)
    frame = _finish(frame, rng, p)
    truth = _paper_truth(p, sessions, pairs, frame)
    return Simulation(frame, truth)


def _paper_truth(p: SimParams, sessions: int, pairs: pl.DataFrame,
                 frame: pl.DataFrame) -> dict[str, Any]:
    per_session = (frame.filter(pl.col("kind") == "injected")
                   .group_by("pair", "session_id").agg(failures=pl.len()))
    seen = per_session.group_by("pair").agg(
        failures=pl.col("failures").sum(), sessions_hit=pl.len(),
        max_in_session=pl.col("failures").max())
    table = pairs.join(seen, on="pair", how="left").with_columns(
        pl.col("failures", "sessions_hit", "max_in_session").fill_null(0)).sort("pair")
    noise = frame.filter(pl.col("kind") == "noise")
    return {
        "profile": "paper",
        "params": p.to_json(),
        "sessions": sessions,
        "records": frame.height,
        "pairs": table.drop("pair").to_dicts(),
        "noise": {"failures": noise.height,
                  "keys": noise.select(pl.struct("tool", "failure_mode").n_unique()).item()},
        "truth_definition": "a (tool, failure_mode) key is positive iff it was injected",
    }


# --- the bulk and distinct profiles ----------------------------------------------------

def _stream_rows(p: SimParams, rng: random.Random) -> pl.DataFrame:
    n = p.records or 1_000_000
    index = pl.int_range(0, n, eager=True)
    return pl.DataFrame({
        "row": index,
        "session_id": index // p.calls_per_session + 1,
        "ts": p.start_ts + index * p.record_gap_ms,
        "tool": pl.Series(rng.choices(TOOL_NAMES, weights=list(TOOLS.values()), k=n)),
        "u": _uniform(rng, n),
    })


def simulate_bulk(p: SimParams) -> Simulation:
    rng = random.Random(p.seed)
    rows = _stream_rows(p, rng)
    # Level-3 variants (`ARGS.bad_date.v2`) when more keys are asked than tools x modes.
    variants = -(-p.keys // (len(TOOL_NAMES) * len(ALL_MODES)))
    all_keys = [(t, m if variants == 1 else f"{m}.v{v}")
                for t in TOOL_NAMES for m in ALL_MODES for v in range(variants)]
    chosen = rng.sample(all_keys, p.keys)
    key_tools = [t for t, _ in chosen]
    key_modes = [m for _, m in chosen]
    # A failure reuses its session's key with probability session_repeat (the agent
    # retrying), else it takes a key of its own.
    own = pl.Series(rng.choices(range(len(chosen)), k=rows.height))
    sessions = rows.height // p.calls_per_session + 1
    of_session = pl.Series(rng.choices(range(len(chosen)), k=sessions + 1))
    repeat = _uniform(rng, rows.height) < p.session_repeat
    pick = pl.select(pl.when(repeat).then(of_session.gather(rows["session_id"]))
                     .otherwise(own)).to_series()
    tools = pl.Series(key_tools).gather(pick)
    modes = pl.Series(key_modes).gather(pick)
    failed = pl.col("u") < p.failure_share()
    frame = rows.with_columns(
        tool=pl.when(failed).then(tools).otherwise(pl.col("tool")),
        failure_mode=pl.when(failed).then(modes),
        kind=pl.when(failed).then(pl.lit("noise")).otherwise(pl.lit("success")),
    ).drop("row", "u")
    frame = _finish(frame, rng, p)
    keys = frame.filter(pl.col("failure_mode").is_not_null()).select(
        pl.struct("tool", "failure_mode").n_unique()).item()
    return Simulation(frame, {"profile": "bulk", "params": p.to_json(), "records": frame.height,
                              "failure_keys": keys, "pairs": []})


def simulate_distinct(p: SimParams) -> Simulation:
    rng = random.Random(p.seed)
    rows = _stream_rows(p, rng)
    codes = list(FINE_MODES)
    code = pl.Series(codes).gather(pl.Series(rng.choices(range(len(codes)), k=rows.height)))
    failed = pl.col("u") < p.failure_share()
    frame = rows.with_columns(
        failure_mode=pl.when(failed).then(pl.concat_str(
            [code, pl.lit(".k"), pl.col("row").cast(pl.String).str.zfill(8)])),
        kind=pl.when(failed).then(pl.lit("noise")).otherwise(pl.lit("success")),
    ).drop("row", "u")
    frame = _finish(frame, rng, p)
    keys = frame.filter(pl.col("failure_mode").is_not_null()).height
    return Simulation(frame, {"profile": "distinct", "params": p.to_json(),
                              "records": frame.height, "failure_keys": keys, "pairs": []})


# --- shared: outcome, text fields, ids -------------------------------------------------

def _finish(frame: pl.DataFrame, rng: random.Random, p: SimParams) -> pl.DataFrame:
    """Add outcome, duration, agent, random bits and the secret flag to a record frame."""
    n = frame.height
    code = pl.col("failure_mode").str.split(".").list.first()
    outcome = (pl.when(pl.col("kind") == "cancelled").then(pl.lit("cancelled"))
               .when(pl.col("kind") == "success").then(pl.lit("success"))
               .when(code == "TIMEOUT").then(pl.lit("timeout"))
               .otherwise(pl.lit("failure")))
    frame = frame.with_columns(r1=_randbits(rng, n), r2=_randbits(rng, n), r3=_randbits(rng, n),
                               secret=_uniform(rng, n) < p.secret_rate)
    return frame.with_columns(
        outcome=outcome,
        duration_ms=pl.when(code == "TIMEOUT").then(30_000 + pl.col("r2") % 90_000)
        .otherwise(5 + pl.col("r2") % 3000).cast(pl.Int64),
        agent_id=pl.concat_str([pl.lit("agent-"),
                                (pl.col("session_id") % p.agents).cast(pl.String)]),
    )


def _json_str(expr: pl.Expr) -> pl.Expr:
    return pl.concat_str([pl.lit('"'), expr, pl.lit('"')])


def record_lines(frame: pl.DataFrame, modes: str = "given") -> pl.Series:
    """The JSONL text of each row, keys sorted and compact, with its content-hash `id`
    (`modes="text"`: every failure_mode written null, the error text kept)."""
    error = (pl.when(pl.col("outcome").is_in(["failure", "timeout"]))
             .then(error_text()))  # a failure without a mode has no text: nothing to infer
    head = pl.concat_str([
        pl.lit('{"agent_id":'), _json_str(pl.col("agent_id")),
        pl.lit(',"args":'), pl.col("args"),
        pl.lit(',"duration_ms":'), pl.col("duration_ms").cast(pl.String),
        pl.when(error.is_not_null()).then(pl.concat_str([pl.lit(',"error":'), _json_str(error)]))
        .otherwise(pl.lit("")),
        pl.lit(',"failure_mode":'),
        pl.when(pl.col("failure_mode").is_null() | pl.lit(modes == "text")).then(pl.lit("null"))
        .otherwise(_json_str(pl.col("failure_mode"))),
    ])
    tail = pl.concat_str([
        pl.lit(',"outcome":'), _json_str(pl.col("outcome")),
        pl.lit(',"session_id":'), pl.col("session_id").cast(pl.String),
        pl.lit(',"tool":'), _json_str(pl.col("tool")),
        pl.lit(',"ts":'), pl.col("ts").cast(pl.String), pl.lit("}"),
    ])
    parts = frame.with_columns(args=args_json(frame)).select(head=head, tail=tail)
    bodies = (parts["head"] + parts["tail"]).to_list()
    ids = pl.Series([hashlib.sha256(b.encode()).hexdigest() for b in bodies], dtype=pl.String)
    return parts.select(pl.concat_str([pl.col("head"), pl.lit(',"id":"'), ids, pl.lit('"'),
                                       pl.col("tail")]))["head"]


def simulate(params: SimParams) -> Simulation:
    """Generate the records of `params` (no file written)."""
    if params.profile == "bulk":
        return simulate_bulk(params)
    if params.profile == "distinct":
        return simulate_distinct(params)
    return simulate_paper(params)


def inferred_truth(sim: Simulation) -> dict[str, Any]:
    """The truth of a `modes=text` file: each injected pair stands for the keys that its
    records' error texts infer to (binloop.core.classify); a pair whose texts make two
    templates (e.g. a token quoted in some) is two keys. Level-1 errors of the rules do
    not show here (the key is whatever the texts infer to); splitting and merging do."""
    from binloop.core.classify import classify

    injected = sim.frame.filter(pl.col("kind") == "injected").with_columns(
        error=error_text()).select("tool", "failure_mode", "outcome", "error").unique()
    keys: dict[tuple[str, str], set[str]] = {}
    for tool, mode, outcome, error in injected.iter_rows():
        keys.setdefault((tool, mode), set()).add(classify(error, outcome).failure_mode)
    pairs = []
    for pair in sim.truth["pairs"]:
        for inferred in sorted(keys.get((pair["tool"], pair["failure_mode"]), ())):
            pairs.append({**pair, "given_mode": pair["failure_mode"], "failure_mode": inferred})
    return {**sim.truth, "pairs": pairs, "modes": "text",
            "truth_definition": "a (tool, failure_mode) key is positive iff the error texts "
                                "of an injected pair's records infer to it"}


def truth_path(out: str | Path) -> Path:
    return Path(f"{out}.truth.json")


def write_simulation(params: SimParams, out: str | Path) -> dict[str, Any]:
    """Write the records to `out` (JSONL) and the ground truth to `out.truth.json`.

    Both are written to a temporary name and renamed, so a reader never sees half a file.
    Returns the ground truth.
    """
    sim = simulate(params)
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    lines = record_lines(sim.frame, params.modes)
    if params.modes == "text":
        sim.truth = inferred_truth(sim)
    tmp = target.with_name(target.name + ".tmp")
    pl.DataFrame({"line": lines}).write_csv(tmp, include_header=False, quote_style="never")
    tmp.replace(target)
    truth_tmp = truth_path(target).with_name(truth_path(target).name + ".tmp")
    truth_tmp.write_bytes(orjson.dumps(sim.truth, option=orjson.OPT_INDENT_2))
    truth_tmp.replace(truth_path(target))
    return sim.truth
