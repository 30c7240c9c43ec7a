"""Start-up time of `binloop --help` and `binloop config` (issue 10: goal <= 0.15 s).

    python -m benchmarks.cli_startup [--runs 21]

Runs each command `--runs` times as a whole process and prints wall and CPU time (median
and minimum; the minimum is the least disturbed run on a shared machine) beside
`python -c pass`, the interpreter's own start-up, in the same run. For where the time
goes: `python -X importtime -m binloop config 2>&1 >/dev/null | sort -t'|' -k2 -n`.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time


def measure(argv: list[str], runs: int) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return walls, cpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cli_startup")
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args(argv)
    binloop = shutil.which("binloop") or "binloop"
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for command in ([binloop, "--help"], [binloop, "config"], [sys.executable, "-c", "pass"]):
        walls, cpus = measure(command, args.runs)
        name = " ".join(part.rsplit("/", 1)[-1] for part in command)
        print(f"{name:22} wall median {statistics.median(walls):.3f} s, min {min(walls):.3f} s;"
              f" cpu median {statistics.median(cpus):.3f} s, min {min(cpus):.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
