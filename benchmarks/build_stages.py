"""Per-stage timings of offline builds, both targets (paper budget: <= 5 min trigger -> tool).

    python -m benchmarks.build_stages [--input TELEMETRY] [--theta 2] [--repeat 3]
                                     [--targets python,typescript] [--out DIR]

Replays the telemetry through the reference detector to get real BINEvents, then builds
each event with the offline designer into a fresh library, `--repeat` times per
target, and reports each stage's median / p95 / max (ms) and the whole build
(pause -> resume) against the 5-minute budget, as JSON (`build_stages.json`) and a
Markdown table (`build_stages.md`). The TypeScript toolchain is installed before
timing starts; its install time is reported on its own.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from binloop.core.detection import DetectionParams, detect
from binloop.core.events import BINEvent
from binloop.core.schema import parse_record
from binloop.library.store import ToolLibrary
from pipeline_runner.designers.offline import OfflineDesigner
from pipeline_runner.pause_resume import LogControl
from pipeline_runner.runner import BuildRunner
from pipeline_runner.stages import STAGES
from pipeline_runner.targets import Target, load_target

DEFAULT_INPUT = Path(__file__).resolve().parents[2] / "shared/data/tau_airline_telemetry.jsonl"
BUDGET_MS = 5 * 60 * 1000


def events_of(path: Path, theta: int) -> list[BINEvent]:
    params = DetectionParams(theta=theta)
    records = (parse_record(line) for line in path.read_bytes().splitlines() if line.strip())
    return detect(params, (r for r in records if params.counts(r)))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def time_builds(target: Target, events: list[BINEvent], repeat: int) -> dict[str, Any]:
    per_stage: dict[str, list[float]] = {stage: [] for stage in STAGES}
    totals: list[float] = []
    outcomes: dict[str, int] = {}
    for _ in range(repeat):
        for event in events:
            with tempfile.TemporaryDirectory(prefix="binloop-bench-") as tmp:
                runner = BuildRunner(ToolLibrary(tmp), OfflineDesigner(), target, LogControl())
                started = time.perf_counter()
                result = runner.build(event)
                totals.append((time.perf_counter() - started) * 1000)
            outcomes[result.outcome] = outcomes.get(result.outcome, 0) + 1
            for stage in result.stages:
                per_stage[stage.stage].append(stage.duration_ms)
    return {
        "builds": len(totals), "outcomes": outcomes,
        "stages": {stage: summary(values) for stage, values in per_stage.items() if values},
        "total": summary(totals),
        "worst_vs_budget": max(totals) / BUDGET_MS,
    }


def summary(values: list[float]) -> dict[str, float]:
    return {"median_ms": round(statistics.median(values), 1),
            "p95_ms": round(percentile(values, 0.95), 1), "max_ms": round(max(values), 1)}


def markdown(report: dict[str, Any]) -> str:
    lines = [f"Offline builds of {report['events']} events from `{report['input']}` "
             f"(θ={report['theta']}), {report['repeat']} repeats per target.", ""]
    targets = list(report["targets"])
    lines.append("| stage | " + " | ".join(f"{t} median / p95 / max (ms)" for t in targets) + " |")
    lines.append("|---|" + "---|" * len(targets))
    for stage in [*STAGES, "total"]:
        cells = []
        for target in targets:
            data = report["targets"][target]
            row = data["total"] if stage == "total" else data["stages"].get(stage)
            cells.append("-" if row is None else
                         f"{row['median_ms']:.0f} / {row['p95_ms']:.0f} / {row['max_ms']:.0f}")
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    lines.append("")
    for target in targets:
        data = report["targets"][target]
        lines.append(f"- {target}: outcomes {data['outcomes']}; slowest build is "
                     f"{data['worst_vs_budget']:.4f} of the 5-minute budget")
    if "toolchain_install_ms" in report:
        lines.append(f"- TypeScript toolchain install (once, before timing): "
                     f"{report['toolchain_install_ms']:.0f} ms")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT)
    parser.add_argument("--theta", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--targets", default="python,typescript")
    parser.add_argument("--out", type=Path, default=Path("out/build_stages"))
    args = parser.parse_args(argv)
    if not args.input.is_file():
        print(f"no telemetry at {args.input}: give --input", file=sys.stderr)
        return 2
    events = events_of(args.input, args.theta)
    report: dict[str, Any] = {"input": str(args.input), "theta": args.theta,
                              "events": len(events), "repeat": args.repeat, "targets": {}}
    for name in args.targets.split(","):
        target = load_target(name)
        if name == "typescript":
            started = time.perf_counter()
            target.toolchain()  # type: ignore[attr-defined]
            report["toolchain_install_ms"] = (time.perf_counter() - started) * 1000
        print(f"timing {len(events)} x {args.repeat} {name} builds ...", file=sys.stderr)
        report["targets"][name] = time_builds(target, events, args.repeat)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "build_stages.json").write_bytes(
        orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    table = markdown(report)
    (args.out / "build_stages.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
