"""Engines on the same file, in one run: whole-command records/s, ratios, peak RSS.

`binloop bench engines --records N --out DIR` generates a bulk file of N records
(`binloop simulate --profile bulk`: 5% failures over 1000 keys) and runs
`binloop detect` on it once per engine as a child process: `reference`, `polars` (when
`binloop.engines.polars.engine` is installed), `bytewax` with 1 worker, and `bytewax` as a
2-process local cluster. Throughput is records / wall time of the whole command
(interpreter start included), and every figure is also given as a ratio to the
reference engine of the same run, since absolute numbers depend on the machine and its
load. Peak RSS is sampled over the child's whole process tree (psutil, every 20 ms;
the sum over processes) and also read from the kernel (`wait4`: the largest single
process). The engines must fire the same events; the bench checks it.

Bounded state: the bytewax engine also replays a stream in which every record is a
failure of a new key (`--profile distinct`), with 1M and with 100k records at the same
event-time rate; if state is evicted as the stream moves on, peak RSS barely depends on
the number of keys.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from binloop.sim.replay_engine import polars_engine_available
from binloop.sim.simulate import SimParams, write_simulation


@dataclass
class EngineRun:
    name: str
    input: str
    records: int
    wall_s: float
    records_per_s: float
    peak_rss_tree_mb: float | None
    peak_rss_max_process_mb: float
    events: int
    event_ids_hash: str
    exit_code: int
    summary_line: str


def engine_commands(include_polars: bool) -> dict[str, list[str]]:
    """The `binloop detect` flags of each engine variant."""
    commands = {"reference": ["--engine", "reference"]}
    if include_polars:
        commands["polars"] = ["--engine", "polars"]
    commands["bytewax-1w"] = ["--engine", "bytewax", "--workers", "1"]
    commands["bytewax-2p"] = ["--engine", "bytewax", "--processes", "2"]
    return commands


def _tree_rss(proc: Any) -> int:
    total = 0
    try:
        members = [proc, *proc.children(recursive=True)]
    except Exception:  # the process ended between two samples
        return 0
    for member in members:
        try:
            total += member.memory_info().rss
        except Exception:
            continue
    return total


def run_detect(name: str, flags: list[str], input_path: Path, work: Path,
               records: int) -> EngineRun:
    """Run `binloop detect` as a child; measure wall time and peak RSS."""
    events_path = work / f"events-{name}.jsonl"
    events_path.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "binloop.cli", "detect", "--input", str(input_path),
           "--out", str(events_path), "--dead-letter", str(work / f"dead-{name}.jsonl"),
           "--no-progress", *flags]
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is in the dev extra
        psutil = None
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    watched = psutil.Process(proc.pid) if psutil is not None else None
    peak = 0
    while proc.poll() is None:
        if watched is not None:
            peak = max(peak, _tree_rss(watched))
        time.sleep(0.02)
    wall = time.perf_counter() - started
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    max_rss_kb = _children_max_rss_kb()
    lines = events_path.read_bytes().splitlines() if events_path.exists() else []
    ids = sorted(orjson.loads(line)["event_id"] for line in lines)
    import hashlib

    return EngineRun(
        name=name, input=input_path.name, records=records, wall_s=round(wall, 3),
        records_per_s=round(records / wall, 1),
        peak_rss_tree_mb=round(peak / 2**20, 1) if watched is not None else None,
        peak_rss_max_process_mb=round(max_rss_kb / 1024, 1), events=len(ids),
        event_ids_hash=hashlib.sha256("".join(ids).encode()).hexdigest()[:16],
        exit_code=proc.returncode or 0,
        summary_line=next((ln for ln in stderr.splitlines() if ln.startswith("records read")),
                          stderr.strip()[-500:]),
    )


def _children_max_rss_kb() -> int:
    """ru_maxrss of the children waited for so far (the largest single process, in KiB).

    Each run is measured in a fresh helper process (see `measure`), so this is that
    run's figure alone.
    """
    import resource

    return int(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)


def measure(name: str, flags: list[str], input_path: Path, work: Path,
            records: int) -> EngineRun:
    """`run_detect` inside a fresh helper process, so RUSAGE_CHILDREN is this run's only."""
    helper = [sys.executable, "-c",
              "import sys, orjson, dataclasses; from pathlib import Path; "
              "from benchmarks.engines import run_detect; "
              "r = run_detect(sys.argv[1], orjson.loads(sys.argv[2]), Path(sys.argv[3]), "
              "Path(sys.argv[4]), int(sys.argv[5])); "
              "sys.stdout.buffer.write(orjson.dumps(dataclasses.asdict(r)))",
              name, orjson.dumps(flags).decode(), str(input_path), str(work), str(records)]
    out = subprocess.run(helper, check=True, capture_output=True).stdout
    return EngineRun(**orjson.loads(out))


def generate(path: Path, profile: str, records: int, seed: int) -> float:
    started = time.perf_counter()
    if not path.exists():
        write_simulation(SimParams(profile=profile, records=records, seed=seed), path)
    return time.perf_counter() - started


def best_run(runs: list[EngineRun]) -> EngineRun:
    """The fastest run (the one least disturbed by other jobs on the machine), with the
    highest peak RSS seen in any of them."""
    middle = min(runs, key=lambda r: r.wall_s)
    trees = [r.peak_rss_tree_mb for r in runs if r.peak_rss_tree_mb is not None]
    return EngineRun(**{**asdict(middle),
                        "peak_rss_tree_mb": max(trees) if trees else None,
                        "peak_rss_max_process_mb": max(r.peak_rss_max_process_mb for r in runs),
                        "exit_code": max(r.exit_code for r in runs)})


def bench(out_dir: Path, records: int, state_records: tuple[int, int], work: Path,
          seed: int = 0, progress: bool = True, rounds: int = 1) -> dict[str, Any]:
    """Run every engine `rounds` times, round-robin (so that a change of machine load
    hits all engines alike), and keep each engine's fastest run."""
    def say(text: str) -> None:
        if progress:
            print(f"bench engines: {text}", file=sys.stderr, flush=True)

    bulk = work / f"bulk-{records}.jsonl"
    say(f"generated {bulk.name} in {generate(bulk, 'bulk', records, seed):.1f}s")
    commands = engine_commands(polars_engine_available())
    all_runs: dict[str, list[EngineRun]] = {name: [] for name in commands}
    for round_no in range(1, rounds + 1):
        for name, flags in commands.items():
            say(f"round {round_no}/{rounds}: running {name} on {records:,} records ...")
            run = measure(name, flags, bulk, work, records)
            say(f"{name}: {run.records_per_s:,.0f} records/s, peak RSS {run.peak_rss_tree_mb} "
                f"MB (tree), {run.events} events, exit {run.exit_code}")
            all_runs[name].append(run)
    runs = [best_run(found) for found in all_runs.values()]
    state = []
    for count in state_records:
        path = work / f"distinct-{count}.jsonl"
        say(f"generated {path.name} in {generate(path, 'distinct', count, seed):.1f}s")
        say(f"running bytewax-1w on {count:,} distinct keys ...")
        state.append(measure("bytewax-1w", engine_commands(False)["bytewax-1w"], path, work,
                             count))
    result = {**summarise(runs, state), "rounds": rounds,
              "all_rounds": {name: [r.records_per_s for r in found]
                             for name, found in all_runs.items()}}
    write(out_dir, result)
    return result


def summarise(runs: list[EngineRun], state: list[EngineRun]) -> dict[str, Any]:
    reference = next(r for r in runs if r.name == "reference")
    rows = [{**asdict(r), "ratio_to_reference": round(r.records_per_s / reference.records_per_s,
                                                      3)} for r in runs]
    agree = len({(r.events, r.event_ids_hash) for r in runs if r.exit_code == 0}) == 1
    big, small = (max(state, key=lambda r: r.records), min(state, key=lambda r: r.records))
    rss_ratio = ((big.peak_rss_tree_mb or big.peak_rss_max_process_mb)
                 / (small.peak_rss_tree_mb or small.peak_rss_max_process_mb))
    by_name = {r.name: r for r in runs}
    two_vs_one = (round(by_name["bytewax-2p"].records_per_s / by_name["bytewax-1w"].records_per_s,
                        3) if {"bytewax-2p", "bytewax-1w"} <= set(by_name) else None)
    return {"engines": rows, "same_events": agree, "bytewax_2p_over_1w": two_vs_one,
            "state": [asdict(r) for r in state],
            "state_rss_ratio": round(rss_ratio, 3), "cpu_count": os.cpu_count(),
            "load_avg_1m": round(os.getloadavg()[0], 2)}


def markdown(result: dict[str, Any]) -> str:
    lines = ["# Engines: same file, one run", "",
             f"Machine: {result['cpu_count']} CPUs, 1-minute load average "
             f"{result['load_avg_1m']} at the end (other jobs share it: read the ratios). "
             f"Each engine ran {result['rounds']} time(s), round-robin; the fastest run is "
             "shown (all runs' records/s in engines.json).", "",
             "| engine | records | wall s | records/s | ratio to reference | peak RSS tree MB | "
             "peak RSS max process MB | events |", "|---|---|---|---|---|---|---|---|"]
    for r in result["engines"]:
        lines.append(f"| {r['name']} | {r['records']:,} | {r['wall_s']:.2f} | "
                     f"{r['records_per_s']:,.0f} | {r['ratio_to_reference']:.2f} | "
                     f"{r['peak_rss_tree_mb']} | {r['peak_rss_max_process_mb']} | {r['events']} |")
    lines += ["", f"All engines fired the same events: {'yes' if result['same_events'] else 'NO'}.",
              f"Bytewax 2 processes / 1 worker: {result['bytewax_2p_over_1w']}.",
              "", "## Bounded state (bytewax, 1 worker, every record a new key)", "",
              "| records = distinct keys | wall s | records/s | peak RSS tree MB | "
              "peak RSS max process MB |", "|---|---|---|---|---|"]
    for r in result["state"]:
        lines.append(f"| {r['records']:,} | {r['wall_s']:.2f} | {r['records_per_s']:,.0f} | "
                     f"{r['peak_rss_tree_mb']} | {r['peak_rss_max_process_mb']} |")
    lines += ["", f"Peak RSS ratio, largest / smallest stream: {result['state_rss_ratio']:.2f} "
              "(1.0 = state does not grow with the number of keys)."]
    return "\n".join(lines) + "\n"


def write(out_dir: Path, result: dict[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "engines.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    (out_dir / "engines.md").write_text(markdown(result))


def register_bench(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "engines", help="records/s and peak RSS of every engine on the same generated file",
        description="Writes engines.json and engines.md to --out.")
    parser.add_argument("--out", required=True, metavar="DIR")
    parser.add_argument("--records", type=int, default=1_000_000, help="bulk file size")
    parser.add_argument("--state-records", default="1000000,100000", metavar="BIG,SMALL",
                        help="sizes of the every-record-a-new-key streams")
    parser.add_argument("--workdir", metavar="DIR",
                        help="keep generated inputs here (reused when present); default: a "
                             "temporary folder removed at the end")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every engine this many times, round-robin; report the fastest")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    sizes = tuple(int(v) for v in args.state_records.split(","))
    if len(sizes) != 2 or min(sizes) < 1 or args.records < 1 or args.rounds < 1:
        raise ValueError("--records >= 1, --rounds >= 1 and --state-records BIG,SMALL are "
                         "required")
    out = Path(args.out)
    if args.workdir:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
        result = bench(out, args.records, (sizes[0], sizes[1]), Path(args.workdir), args.seed,
                       rounds=args.rounds)
    else:
        with tempfile.TemporaryDirectory(prefix="binloop-bench-") as tmp:
            result = bench(out, args.records, (sizes[0], sizes[1]), Path(tmp), args.seed,
                           rounds=args.rounds)
    print(markdown(result))
    return 0 if all(r["exit_code"] == 0 for r in result["engines"]) else 1
