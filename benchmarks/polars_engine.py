"""Throughput of `binloop detect --engine polars` against `--engine reference`, one run.

    python -m benchmarks.polars_engine [--records 1000000] [--input FILE] [--window W]
                                       [--repeat 3] [--no-sweep]

Generates a synthetic JSONL file (`benchmarks.synthetic`: mostly successes, a share of
failures over ~1000 keys and ~1000 sessions) unless `--input` is given, runs each engine
as a whole command (a subprocess: start-up, parsing, detection, writing) `--repeat`
times, alternating, and keeps each engine's best (the machine is shared: the best run
is the least disturbed), checks that both wrote the same events and dead letters, and
prints records/s (wall clock), their ratio, and each command's CPU seconds (polars
uses two threads, so its CPU time exceeds its wall time). It
also times a sweep: one `load_records`, then `detect_frame` for every theta 1..5 and
window kind, against the reference's `detect` on the same records.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.synthetic import Shape, write_synthetic

ENGINES = ("reference", "polars")
SWEEP_WINDOWS = ("session", "global", "sliding:10m")


def run_engine(engine: str, path: Path, out: Path, extra: list[str]) -> tuple[float, float]:
    """Wall-clock and CPU seconds of one `binloop detect` command (outputs start empty)."""
    for kind in ("events", "dead"):
        (out / f"{engine}-{kind}.jsonl").unlink(missing_ok=True)
    command = [sys.executable, "-m", "binloop.cli", "detect", "--engine", engine, "--input",
               str(path), "--out", str(out / f"{engine}-events.jsonl"), "--dead-letter",
               str(out / f"{engine}-dead.jsonl"), "--no-progress", *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, check=True, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def same_outputs(out: Path) -> bool:
    return all((out / f"reference-{kind}.jsonl").read_bytes()
               == (out / f"polars-{kind}.jsonl").read_bytes() for kind in ("events", "dead"))


def sweep_seconds(path: Path) -> dict[str, float]:
    """One load then 15 parameter sets, for each engine's own replay API."""
    from binloop.core.config import Config
    from binloop.core.detection import detect
    from binloop.core.window import WindowSpec
    from binloop.engines.polars.engine import detect_frame, load_records
    from binloop.replay.ingest import parse_chunk
    from binloop.replay.readers import InputReader

    settings = [Config(theta=t, window=WindowSpec.parse(w)).detection()
                for t in range(1, 6) for w in SWEEP_WINDOWS]
    # polars first: a million reference records alive in memory would slow every later
    # allocation (the garbage collector walks them).
    started = time.perf_counter()
    loaded = load_records(str(path))
    polars_load = time.perf_counter() - started
    started = time.perf_counter()
    got = [len(detect_frame(loaded, params)) for params in settings]
    polars_detect = time.perf_counter() - started
    del loaded
    started = time.perf_counter()
    records = [r for chunk in InputReader(str(path), 8192) for r in parse_chunk(chunk).records]
    reference_load = time.perf_counter() - started
    started = time.perf_counter()
    expected = [len(detect(params, records)) for params in settings]
    reference_detect = time.perf_counter() - started
    assert got == expected, "the engines disagree"
    return {"reference_load_s": reference_load, "reference_15_detects_s": reference_detect,
            "polars_load_s": polars_load, "polars_15_detects_s": polars_detect}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--input", help="an existing telemetry file instead of a generated one")
    parser.add_argument("--window", default="session")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-sweep", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="binloop-bench-") as tmp:
        out = Path(tmp)
        path = Path(args.input) if args.input else write_synthetic(
            out / "telemetry.jsonl", args.records, seed=1, shape=Shape())
        lines = sum(1 for _ in path.open("rb"))
        seconds = dict.fromkeys(ENGINES, float("inf"))
        cpu = dict.fromkeys(ENGINES, float("inf"))
        for _ in range(args.repeat):
            for engine in ENGINES:
                took, used = run_engine(engine, path, out, ["--window", args.window])
                seconds[engine] = min(seconds[engine], took)
                cpu[engine] = min(cpu[engine], used)
        result: dict[str, Any] = {f"{e}_records_per_s": round(lines / s) for e, s in
                                  seconds.items()}
        result["polars_over_reference"] = round(seconds["reference"] / seconds["polars"], 2)
        result.update({f"{e}_cpu_s": round(c, 2) for e, c in cpu.items()})
        result["same_events_and_dead_letters"] = same_outputs(out)
        if not args.no_sweep:
            result.update({k: round(v, 2) for k, v in sweep_seconds(path).items()})
    print(f"records: {lines:,} ({'given' if args.input else 'synthetic'}), "
          f"window {args.window}")
    for name, value in result.items():
        print(f"  {name}: {value}")
    return 0 if result["same_events_and_dead_letters"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
