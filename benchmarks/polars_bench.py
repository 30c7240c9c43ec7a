"""The polars engine against the polars anchor, whole processes, in one run.

    python -m benchmarks.polars_bench make-realistic FILE [--records 1000000]
    python -m benchmarks.polars_bench run FILE [FILE ...] [--rounds 3] [--window global]
                                      [--theta 3] [--no-anchor] [--out RESULT.json]

`make-realistic` writes the simulator's `bulk` profile scaled to `--records` (7% failures,
error texts) with string session ids and args of a few hundred bytes. `run` alternates
rounds of `anchors.py polars FILE` (../shared/bench, skipped with a note where absent) and
`binloop detect --engine polars` on each file, each a whole process timed from start to
exit (wall) with its peak RSS (`ru_maxrss` of the child) and CPU seconds; a round whose
event count differs from the anchor's is void and reported. Prints medians, the ratio
engine/anchor in records/s, and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl

ANCHORS = Path(__file__).resolve().parents[2] / "shared" / "bench" / "anchors.py"
_BINLOOP = str(Path(sys.executable).with_name("binloop"))
_COUNTER = re.compile(r"(records read|events fired) ([\d,]+)")


def make_realistic(out: Path, records: int) -> None:
    """Bulk simulator output, session ids as strings, args padded to a few hundred bytes."""
    with tempfile.TemporaryDirectory() as scratch:
        bulk = Path(scratch) / "bulk.jsonl"
        subprocess.run([_BINLOOP, "simulate", "--profile", "bulk",
                        "--records", str(records), "--failure-rate", "0.07", "--out",
                        str(bulk), "--seed", "7"], check=True, stdout=subprocess.DEVNULL)
        lines = pl.read_csv(bulk, has_header=False, separator="\x01", quote_char=None,
                            new_columns=["line"], schema={"line": pl.String})
    note = "context: " + "retrying after the previous attempt; " * 7
    text = (pl.col("line")
            .str.replace(r'"session_id":(\d+)', r'"session_id":"sess-${1}-7f3a"')
            .str.replace('"args":{', f'"args":{{"note":"{note}",', literal=True))
    lines.select(text).write_csv(out, include_header=False, quote_style="never")


def _timed(command: list[str]) -> dict[str, Any]:
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    stdout = proc.stdout.read().decode() if proc.stdout else ""
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mb": usage.ru_maxrss / 1024, "code": proc.returncode,
            "stdout": stdout, "stderr": stderr}


def _engine(path: Path, window: str, theta: int, scratch: Path) -> dict[str, Any]:
    run = _timed([_BINLOOP, "detect", "--engine", "polars", "--input",
                  str(path), "--window", window, "--theta", str(theta), "--out",
                  str(scratch / "events.jsonl"), "--dead-letter", str(scratch / "dead.jsonl"),
                  "--no-progress"])
    if run["code"] != 0:
        raise SystemExit(f"binloop detect failed: {run['stderr'][-400:]}")
    counters = {name: int(value.replace(",", "")) for name, value in
                _COUNTER.findall(run["stderr"])}
    for name in ("events.jsonl", "dead.jsonl"):
        (scratch / name).unlink(missing_ok=True)
    return {**run, "records": counters["records read"], "events": counters["events fired"]}


def _anchor(path: Path) -> dict[str, Any]:
    run = _timed([sys.executable, str(ANCHORS), "polars", str(path)])
    if run["code"] != 0:
        raise SystemExit(f"the polars anchor failed: {run['stderr'][-400:]}")
    out = json.loads(run["stdout"])
    return {**run, "records": out["records"], "events": out["events"]}


def bench(path: Path, rounds: int, window: str, theta: int, anchor: bool) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"anchor": [], "engine": []}
    void = 0
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(rounds):
            if anchor:
                runs["anchor"].append(_anchor(path))
            runs["engine"].append(_engine(path, window, theta, Path(scratch)))
            if anchor and runs["engine"][-1]["events"] != runs["anchor"][-1]["events"]:
                void += 1
    out: dict[str, Any] = {"file": str(path), "window": window, "theta": theta,
                           "rounds": rounds, "void_rounds": void}
    for name, done in runs.items():
        if not done:
            continue
        wall = statistics.median(r["wall_s"] for r in done)
        out[name] = {"records": done[0]["records"], "events": done[0]["events"],
                     "wall_s_median": round(wall, 3),
                     "records_per_s": round(done[0]["records"] / wall),
                     "cpu_s_median": round(statistics.median(r["cpu_s"] for r in done), 3),
                     "peak_rss_mb_max": round(max(r["peak_rss_mb"] for r in done), 1)}
    if anchor:
        ratios = [a["wall_s"] / e["wall_s"] for a, e in zip(runs["anchor"], runs["engine"],
                                                            strict=True)]
        out["engine_vs_anchor_records_per_s"] = round(statistics.median(ratios), 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("make-realistic")
    make.add_argument("file", type=Path)
    make.add_argument("--records", type=int, default=1_000_000)
    run = sub.add_parser("run")
    run.add_argument("files", type=Path, nargs="+")
    run.add_argument("--rounds", type=int, default=3)
    run.add_argument("--window", default="global")
    run.add_argument("--theta", type=int, default=3)
    run.add_argument("--no-anchor", action="store_true")
    run.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.command == "make-realistic":
        make_realistic(args.file, args.records)
        return
    anchor = not args.no_anchor and ANCHORS.exists()
    if not anchor and not args.no_anchor:
        print(f"note: {ANCHORS} is absent: engine figures only", file=sys.stderr)
    report: dict[str, Any] = {"load_before": os.getloadavg(), "results": []}
    for path in args.files:
        result = bench(path, args.rounds, args.window, args.theta, anchor)
        report["results"].append(result)
        print(json.dumps(result), flush=True)
    report["load_after"] = os.getloadavg()
    print(json.dumps({"load_before": report["load_before"], "load_after": report["load_after"]}))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
