"""What a θ sweep costs against one θ on one window: whole `binloop sweep` processes,
alternating rounds, medians.

    python -m benchmarks.sweep_cost FILE [--rounds 3] [--thetas 2,3,4,5]
                                    [--windows session,global,sliding:1h]

FILE needs its ground truth beside it (FILE.truth.json, as `binloop simulate` writes it).
Prints the median wall and CPU seconds of the full sweep and of `--theta 3 --window
session`, their ratio (goal: <= 1.5), and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bytecode import compile_packages

_BINLOOP = str(Path(sys.executable).with_name("binloop"))


def _timed(command: list[str]) -> tuple[float, float]:
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        err = proc.stderr.read().decode()[-400:] if proc.stderr else ""
        raise SystemExit(f"{' '.join(command)} failed: {err}")
    return time.perf_counter() - started, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--thetas", default="2,3,4,5")
    parser.add_argument("--windows", default="session,global,sliding:1h")
    args = parser.parse_args()
    bytecode = compile_packages()
    load_before = os.getloadavg()
    full: list[tuple[float, float]] = []
    one: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as scratch:
        common = [_BINLOOP, "sweep", "--input", str(args.file), "--no-plots"]
        for index in range(args.rounds):
            full.append(_timed([*common, "--thetas", args.thetas, "--windows", args.windows,
                                "--out", f"{scratch}/full{index}"]))
            one.append(_timed([*common, "--theta", "3", "--window", "session",
                               "--out", f"{scratch}/one{index}"]))
    ratios = [f[0] / o[0] for f, o in zip(full, one, strict=True)]
    print(json.dumps({
        "file": str(args.file), "rounds": args.rounds, "bytecode": bytecode, "thetas": args.thetas,
        "windows": args.windows,
        "sweep_wall_s_median": round(statistics.median(f[0] for f in full), 2),
        "one_wall_s_median": round(statistics.median(o[0] for o in one), 2),
        "sweep_cpu_s_median": round(statistics.median(f[1] for f in full), 2),
        "one_cpu_s_median": round(statistics.median(o[1] for o in one), 2),
        "sweep_vs_one_wall": round(statistics.median(ratios), 3),
        "load_before": load_before, "load_after": os.getloadavg()}))


if __name__ == "__main__":
    main()
