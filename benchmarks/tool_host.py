"""Per-call latency of gated tools through the sandboxed tool host, both targets.

    python -m benchmarks.tool_host [--input TELEMETRY] [--calls 2000] [--cold 10]
                                   [--targets python,typescript] [--out DIR]

Builds one tool per target with the offline designer from the first real BINEvent of
the telemetry (into a temporary library), then measures in one run:

* `direct`: the same tool's `run` called in this process (python: what the registry did
  before the host existed, generated code imported into the agent) — the anchor;
* `warm`: a call through :class:`~pipeline_runner.sandbox.host.ToolHost` to its running
  worker (pipe round trip, JSON both ways, the manifest `stat` of withdraw);
* `cold`: the first call of a fresh host (sandbox start, worker start, tool import, call).

Reports p50/p99 (ms) of each and the added warm latency over `direct`, with the load
average, as JSON and Markdown. Figures are for this machine and its load, not asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import orjson

from benchmarks.build_stages import DEFAULT_INPUT, events_of, percentile
from binloop.library.store import ToolLibrary
from pipeline_runner.designers.offline import OfflineDesigner
from pipeline_runner.pause_resume import LogControl
from pipeline_runner.runner import BuildRunner
from pipeline_runner.sandbox.host import ToolHost
from pipeline_runner.targets import load_target


def stats(values_s: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values_s]
    return {"n": len(ms), "p50_ms": round(statistics.median(ms), 3),
            "p99_ms": round(percentile(ms, 0.99), 3), "max_ms": round(max(ms), 3)}


def build_one(library: Path, target: str, events: list[Any]) -> tuple[str, dict[str, Any]]:
    runner = BuildRunner(ToolLibrary(library), OfflineDesigner(), load_target(target),
                         LogControl())
    for event in events:
        result = runner.build(event)
        if result.outcome == "gated" and result.tool is not None:
            params = {"args": event["evidence"][-1]["args"]}
            return result.tool["name"], params
    raise SystemExit(f"no event of the telemetry gated a {target} tool")


def direct_run(library: Path, name: str) -> Any:
    """The tool's run(), imported into this process (the old way; trusted here only
    because the benchmark built it itself)."""
    entry = ToolLibrary(library).read()["tools"][name]
    source = (library / entry["path"] / "tool.py").read_bytes()
    module = types.ModuleType("bench_tool")
    sys.modules["bench_tool"] = module
    exec(compile(source, "bench_tool", "exec"), module.__dict__)
    return module.run


def measure(library: Path, target: str, name: str, params: dict[str, Any], calls: int,
            cold: int) -> dict[str, Any]:
    out: dict[str, Any] = {"tool": name}
    if target == "python":
        run = direct_run(library, name)
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            run(params, None)
            times.append(time.perf_counter() - started)
        out["direct"] = stats(times)
    host = ToolHost(library, (target,))
    host.reload()
    try:
        host.call(name, params)
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            host.call(name, params)
            times.append(time.perf_counter() - started)
        out["warm"] = stats(times)
    finally:
        host.close()
    firsts = []
    for _ in range(cold):
        fresh = ToolHost(library, (target,))
        fresh.reload()
        try:
            started = time.perf_counter()
            fresh.call(name, params)
            firsts.append(time.perf_counter() - started)
        finally:
            fresh.close()
    out["cold"] = stats(firsts)
    if "direct" in out:
        out["warm_added_p50_ms"] = round(out["warm"]["p50_ms"] - out["direct"]["p50_ms"], 3)
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = [f"Tool host per-call latency ({report['calls']} warm calls, {report['cold']} cold "
             f"starts; load average {report['loadavg']}).", "",
             "| target | direct p50 / p99 (ms) | warm p50 / p99 (ms) | cold p50 / p99 (ms) |",
             "|---|---|---|---|"]
    for target, data in report["targets"].items():
        cells = []
        for key in ("direct", "warm", "cold"):
            row = data.get(key)
            cells.append("-" if row is None else f"{row['p50_ms']:.3f} / {row['p99_ms']:.3f}")
        lines.append(f"| {target} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT)
    parser.add_argument("--theta", type=int, default=2)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--cold", type=int, default=10)
    parser.add_argument("--targets", default="python,typescript")
    parser.add_argument("--out", type=Path, default=Path("out/tool_host"))
    args = parser.parse_args(argv)
    if not args.input.is_file():
        print(f"no telemetry at {args.input}: give --input", file=sys.stderr)
        return 2
    events = events_of(args.input, args.theta)
    report: dict[str, Any] = {"input": str(args.input), "calls": args.calls, "cold": args.cold,
                              "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg()),
                              "targets": {}}
    for target in args.targets.split(","):
        with tempfile.TemporaryDirectory(prefix="binloop-bench-host-") as tmp:
            library = Path(tmp) / "library"
            name, params = build_one(library, target, events)
            print(f"measuring {target} tool {name} ...", file=sys.stderr)
            report["targets"][target] = measure(library, target, name, params, args.calls,
                                                args.cold)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tool_host.json").write_bytes(
        orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    table = markdown(report)
    (args.out / "tool_host.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
