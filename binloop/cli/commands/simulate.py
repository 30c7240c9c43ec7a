"""`binloop simulate`: write seeded synthetic telemetry and its ground truth."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any

HELP = {
    "profile": "paper (sessions with injected pairs and noise; default) | bulk (throughput "
               "input: --records calls, --failure-rate of them over --keys keys) | distinct "
               "(every failure a new key)",
    "seed": "random seed: the same parameters and seed give the same file",
    "sessions": "paper: number of agent sessions",
    "pairs": "paper: injected (tool, failure_mode) pairs (the ground truth)",
    "records": "bulk/distinct: number of records (default 1000000); paper: about this many "
               "records (sets the number of sessions)",
    "calls_min": "paper: fewest background calls in a session",
    "calls_max": "paper: most background calls in a session",
    "call_gap_s": "paper: seconds between two calls of a session, as MIN,MAX",
    "session_spacing_s": "paper: seconds between the starts of consecutive sessions",
    "rate_min": "paper: lowest per-session hit probability of an injected pair",
    "rate_max": "paper: highest per-session hit probability (log-uniform in between)",
    "onset_max": "paper: pairs start within this share of the sessions",
    "burst_min": "paper: lowest mean failures per hit of a pair (retries; >= 1)",
    "burst_max": "paper: highest mean failures per hit of a pair",
    "noise_rate": "paper: probability that a call fails with a one-off, non-injected key",
    "noise_retry": "paper: probability that a one-off failure is repeated (each time)",
    "unclassified_rate": "paper: probability of a failure without failure_mode (never counts)",
    "cancelled_rate": "paper: probability of a cancelled call (never counts)",
    "secret_rate": "share of records with credential-looking fakes in args or error",
    "keys": "bulk: number of (tool, failure_mode) keys the failures are spread over",
    "session_repeat": "bulk: probability that a failure reuses its session's key (retries)",
    "failure_rate": "bulk/distinct: share of records that fail (default 0.05 bulk, 1 distinct)",
    "calls_per_session": "bulk/distinct: records per session",
    "record_gap_ms": "bulk/distinct: event time between two records",
    "agents": "number of distinct agent_id values",
    "start_ts": "event time of the first session (unix ms, default 2023-11-14)",
    "modes": "given (records carry their failure_mode) | text (failure_mode null, the error "
             "text kept: the job infers modes; the truth lists the keys the injected "
             "records' texts infer to)",
}


def register(subparsers: Any) -> None:
    from binloop.sim.params import SimParams

    parser = subparsers.add_parser(
        "simulate", help="write seeded synthetic telemetry (and ground truth beside it)",
        description="Write valid ToolInvocation JSONL to --out and the injected ground truth "
                    "to OUT.truth.json. See the README section 'Simulator'.")
    parser.add_argument("--out", required=True, metavar="FILE", help="JSONL file to write")
    for f in dataclasses.fields(SimParams):
        default = f.default
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, default=None,
                            metavar="VALUE", help=f"{HELP[f.name]} (default: {shown})")
    parser.set_defaults(func=run)


def params_from_args(args: argparse.Namespace) -> Any:
    """The SimParams given on the command line (unset flags keep their defaults)."""
    from binloop.sim.params import SimParams

    values: dict[str, Any] = {}
    for f in dataclasses.fields(SimParams):
        raw = getattr(args, f.name, None)
        if raw is None:
            continue
        values[f.name] = _parse(f.name, str(raw), f.default)
    return SimParams(**values)


def _parse(name: str, raw: str, default: Any) -> Any:
    try:
        if isinstance(default, tuple):
            return tuple(int(part) for part in raw.split(","))
        if isinstance(default, str):
            return raw
        if isinstance(default, float) or name == "failure_rate":
            return float(raw)
        return int(raw)
    except ValueError:
        raise ValueError(f"--{name.replace('_', '-')}: {raw!r} is not a valid value") from None


def run(args: argparse.Namespace) -> int:
    from binloop.replay.jsonl import check_output_path
    from binloop.sim.simulate import truth_path, write_simulation

    params = params_from_args(args)
    check_output_path(args.out, mkdirs=True)
    started = time.perf_counter()
    truth = write_simulation(params, args.out)
    elapsed = time.perf_counter() - started
    pairs = f", {len(truth['pairs'])} injected pairs" if truth["pairs"] else ""
    print(f"simulate: {truth['records']:,} records ({params.profile}{pairs}) to {args.out}, "
          f"ground truth to {truth_path(args.out)} in {elapsed:.1f}s", file=sys.stderr)
    return 0
