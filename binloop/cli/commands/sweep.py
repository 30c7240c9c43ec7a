"""`binloop sweep`: precision/recall/F1 and builds per session for a range of θ and windows."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from binloop.core.config import add_arguments, load_config, positive_int


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sweep", help="replay telemetry for several θ and windows; score against ground truth",
        description="Either --simulate (generate seeded telemetry with injected pairs, then "
                    "sweep it) or --input PATH (real telemetry; ground truth from the data). "
                    "Writes summary.json, summary.md, meta.json and PNG plots to --out.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--simulate", action="store_true", help="sweep freshly simulated data")
    source.add_argument("--input", metavar="PATH", help="telemetry file or directory to sweep")
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder")
    parser.add_argument("--thetas", default="2,3,4,5", metavar="LIST",
                        help="θ values (default 2,3,4,5; --theta N sweeps only N)")
    parser.add_argument("--windows", default="session,global,sliding:1h", metavar="LIST",
                        help="windows (default session,global,sliding:1h; --window W only W)")
    parser.add_argument("--truth", default="auto", metavar="SPEC",
                        help="auto | injected | sessions:N | failures:N (default auto: the "
                             "injected pairs of FILE.truth.json when present, else sessions:2)")
    parser.add_argument("--engine", dest="sweep_engine", default="auto",
                        choices=("auto", "polars", "reference"),
                        help="replay engine (auto: polars when installed)")
    parser.add_argument("--sessions", type=int, default=500, help="--simulate: sessions")
    parser.add_argument("--pairs", type=int, default=50, help="--simulate: injected pairs")
    parser.add_argument("--seed", type=int, default=0, help="--simulate: random seed")
    parser.add_argument("--repeats", type=int, default=1, metavar="N",
                        help="--simulate: average over N simulations (seeds SEED..SEED+N-1); "
                             "the metrics get a _sd column (standard deviation over seeds)")
    parser.add_argument("--sim", action="append", default=[], metavar="NAME=VALUE",
                        help="--simulate: any other simulator parameter (see binloop simulate)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    add_arguments(parser, "sweep")
    parser.set_defaults(func=run)


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(positive_int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values:
        raise ValueError(f"--thetas {text!r}: give integers from 1 to 2^63-1, comma-separated")
    return values


def _windows(text: str) -> tuple[Any, ...]:
    from binloop.core.window import WindowSpec

    return tuple(WindowSpec.parse(v) for v in text.split(",") if v.strip())


def _simulated_input(args: argparse.Namespace, path: Path,
                     seed: int) -> tuple[str, dict[str, Any]]:
    from binloop.cli.commands.simulate import params_from_args
    from binloop.sim.simulate import write_simulation

    values = argparse.Namespace(sessions=args.sessions, pairs=args.pairs, seed=seed)
    for item in args.sim:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--sim {item!r}: use NAME=VALUE")
        setattr(values, name.strip().replace("-", "_"), value.strip())
    params = params_from_args(values)
    truth = write_simulation(params, path)
    print(f"sweep: simulated {truth['records']:,} records, {len(truth['pairs'])} injected pairs "
          f"(seed {seed}) -> {path}", file=sys.stderr)
    return str(path), params.to_json()


def _inputs(args: argparse.Namespace, out_dir: Path,
            tmp: Path) -> list[tuple[str, dict[str, Any] | None]]:
    """(path, simulator parameters) of each input: one file, or one simulation per seed.

    The first simulation is kept in the output folder; later seeds go to `tmp`.
    """
    if not args.simulate:
        return [(args.input, None)]
    if args.repeats < 1:
        raise ValueError("--repeats must be >= 1")
    return [_simulated_input(args, (out_dir if i == 0 else tmp) / f"telemetry{suffix}.jsonl",
                             args.seed + i)
            for i, suffix in enumerate(["", *(f"-seed{args.seed + i}"
                                              for i in range(1, args.repeats))])]


def run(args: argparse.Namespace) -> int:
    from binloop.sim.replay_engine import load
    from binloop.sim.sweep import SweepPlan, average_runs, counted_records, run_sweep, summary_rows
    from binloop.sim.sweep_report import write_report
    from binloop.sim.truth import TruthSpec, resolve

    config = load_config(args)
    thetas = (config.theta,) if args.theta is not None else _int_list(args.thetas)
    windows = (config.window,) if args.window is not None else _windows(args.windows)
    requested = TruthSpec.parse(args.truth)
    plan = SweepPlan(thetas, windows, config.detection())
    from binloop.replay.jsonl import ensure_output_dir
    from binloop.replay.readers import list_input_files

    if args.input:
        list_input_files(args.input, config.follow_symlinks)  # fail before any work
    out_dir = ensure_output_dir(args.out)
    started = time.perf_counter()
    summaries, metas = [], []
    with tempfile.TemporaryDirectory(prefix="binloop-sweep-") as tmp:
        for path, sim_params in _inputs(args, out_dir, Path(tmp)):
            loaded = load(path, config.record_limits(), args.sweep_engine,
                          options=config.read_options())
            truth, spec = resolve(requested, path, loaded.frame, plan.base)
            summaries.append(run_sweep(loaded, plan, truth))
            counted = counted_records(loaded.frame, plan.base)
            metas.append({
                "input": path, "engine": loaded.engine, "simulated": sim_params is not None,
                "simulator": sim_params, "records": loaded.frame.height,
                "invalid": loaded.invalid, "sessions": loaded.frame["session"].n_unique(),
                "keys": counted.select("tool", "failure_mode").unique().height,
                "positives": truth.height, "truth": spec.describe()})
    summary = summaries[0] if len(summaries) == 1 else average_runs(summaries)
    meta = {**metas[0], "repeats": len(summaries), "runs": metas, "thetas": list(thetas),
            "windows": [str(w) for w in windows], "detection": plan.base.describe(),
            "elapsed_s": round(time.perf_counter() - started, 3)}
    files = write_report(out_dir, summary, summary_rows(summary), meta, not args.no_plots)
    print(f"sweep: {len(summary)} rows in {meta['elapsed_s']}s on the {meta['engine']} engine; "
          f"wrote {', '.join(files)} to {out_dir}", file=sys.stderr)
    print((out_dir / "summary.md").read_text())
    return 0
