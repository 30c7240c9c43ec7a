"""`binloop bench engines`: every engine beside the anchors, on the same files, in one run.

The anchors are the reference loops of `../shared/bench/anchors.py` (plain, msgspec,
polars; `--anchors PATH` to point elsewhere). Each file is replayed by the anchors and by
`binloop detect` with every engine (`reference`, `bytewax` with 1 worker, `bytewax` as a
2-process cluster, `polars`), all with `--window global --theta 3` (what the anchors
compute), in rounds: every round runs each of them once, starting one further along the
list each round, so that a change in the machine's load hits all alike.

Every figure is a whole process, start to exit (interpreter start and imports included,
nothing subtracted): wall time, CPU seconds (user + system, its children included) and
peak RSS (the largest process, from the kernel; and the whole process tree, sampled).
Records/s is records over the median wall time of the rounds; ratios are to each anchor
in the same run. A run whose events (and dead-letter count) differ from the anchors' (or,
where no anchor can run, from the reference engine's) is *void*: it is reported as a
failure and the bench exits non-zero, so a fast but wrong engine cannot pass.

Files (`benchmarks.bench_files`, generated under `--workdir`, default
~/.cache/binloop/bench, never in the repository): `anchor`, `realistic`, `invalid` (10%
invalid lines; the polars anchor cannot read it, so there the plain and msgspec anchors
are the comparison).

`bytewax-halves` is no engine but the ceiling of `bytewax-2p` on this machine: two
independent 1-worker replays, each of one half of the file (cut at a line end), started
together and exchanging nothing. Its events are not the file's (a key's failures are split
between the halves), so only its records and rejects are checked; `bytewax-1w`'s wall time
over its own is the most any 2-process run could reach here.

binloop's packages are compiled to bytecode first (`benchmarks.bytecode`): an install has
its bytecode, and a process must not pay for compiling sources no user's process compiles.

Also measured: `startup`, each engine on an empty file (what interpreter start and
imports cost; shown, never subtracted); and with `--state-records BIG,SMALL`, bounded
state: the bytewax engine on streams where every record is a failure of a new key
(`binloop simulate --profile distinct`), whose peak RSS must not grow with the keys.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from benchmarks.bench_files import FILE_KINDS, anchors_script, bench_file
from benchmarks.bytecode import compile_packages

ANCHORS: Final = ("plain", "msgspec", "polars")
ENGINES: Final = ("reference", "bytewax-1w", "bytewax-2p", "polars-engine")
CEILINGS: Final = ("bytewax-halves",)
DETECT_FLAGS: Final = ("--window", "global", "--theta", "3")
DEFAULT_WORKDIR: Final = Path.home() / ".cache" / "binloop" / "bench"
DEFAULT_OUT: Final = Path("benchmarks/results/engines")
_RUN_FIELDS: Final = ("name", "file", "round", "wall_s", "cpu_s", "max_rss_mb", "void",
                      "load_before")


@dataclass
class Run:
    """One whole-process run of an anchor or an engine on a file."""

    name: str
    file: str
    round: int
    wall_s: float
    cpu_s: float
    max_rss_mb: float
    tree_rss_mb: float | None
    records: int
    invalid: int
    events: int
    event_ids: str  # hash of the sorted event ids ("" for anchors: they print counts)
    exit_code: int
    void: str = ""  # why the run does not count ("" when it does)
    load_before: float = 0.0


def engine_flags(name: str) -> list[str]:
    return {"reference": ["--engine", "reference"],
            "bytewax-1w": ["--engine", "bytewax", "--workers", "1"],
            "bytewax-2p": ["--engine", "bytewax", "--processes", "2"],
            "polars-engine": ["--engine", "polars"]}[name]


def command(name: str, path: Path, work: Path, anchors: Path | None,
            detect_flags: tuple[str, ...] = DETECT_FLAGS) -> list[str]:
    if name in ANCHORS:
        assert anchors is not None
        return [sys.executable, str(anchors), name, str(path)]
    if name in CEILINGS:
        halves = [detect_command(half, work, f"{name}-{i}", detect_flags,
                                 engine_flags("bytewax-1w"))
                  for i, half in enumerate(halves_of(path, work), start=1)]
        # both at once; the exit code is the first failure's
        script = (f"{shlex.join(halves[0])} & first=$!; {shlex.join(halves[1])}; "
                  "second=$?; wait $first || exit $?; exit $second")
        return ["/bin/sh", "-c", script]
    return detect_command(path, work, name, detect_flags, engine_flags(name))


def detect_command(path: Path, work: Path, name: str, detect_flags: tuple[str, ...],
                   engine: list[str]) -> list[str]:
    return [sys.executable, "-m", "binloop.cli", "detect", "--input", str(path),
            "--out", str(work / f"events-{name}.jsonl"),
            "--dead-letter", str(work / f"dead-{name}.jsonl"), "--no-progress",
            *detect_flags, *engine]


def halves_of(path: Path, work: Path) -> tuple[Path, Path]:
    """The file cut in two at the line end nearest its middle (made once, in `work`)."""
    halves = (work / f"{path.stem}.half1.jsonl", work / f"{path.stem}.half2.jsonl")
    size = path.stat().st_size
    if all(h.exists() for h in halves) and sum(h.stat().st_size for h in halves) == size:
        return halves
    with open(path, "rb") as whole:
        whole.seek(size // 2)
        whole.readline()  # to the end of the line the middle falls in
        cut = whole.tell()
        whole.seek(0)
        for half, length in zip(halves, (cut, size - cut), strict=True):
            with open(half, "wb") as out:
                while length:
                    block = whole.read(min(length, 1 << 24))
                    out.write(block)
                    length -= len(block)
    return halves


def measure(argv: list[str]) -> dict[str, Any]:
    """Run `argv` from a fresh helper process (so that its RUSAGE_CHILDREN is this run's
    alone): wall time, CPU, peak RSS, exit code, stdout and stderr's tail."""
    helper = [sys.executable, "-m", "benchmarks.engines", "--measure", orjson.dumps(argv).decode()]
    out = subprocess.run(helper, check=True, capture_output=True).stdout
    return orjson.loads(out)  # type: ignore[no-any-return]


def _measure_here(argv: list[str]) -> dict[str, Any]:
    import resource

    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is in the dev extra
        psutil = None
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tree_peak = 0
    watched = psutil.Process(proc.pid) if psutil is not None else None
    while proc.poll() is None:
        if watched is not None:
            tree_peak = max(tree_peak, _tree_rss(watched))
        time.sleep(0.05)
    wall = time.perf_counter() - started
    stdout, stderr = proc.communicate()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "max_rss_mb": usage.ru_maxrss / 1024,
            "tree_rss_mb": tree_peak / 2**20 if watched is not None else None,
            "exit_code": proc.returncode, "stdout": stdout.decode(errors="replace")[-2000:],
            "stderr": stderr.decode(errors="replace")[-2000:]}


def _tree_rss(proc: Any) -> int:
    try:
        members = [proc, *proc.children(recursive=True)]
    except Exception:  # the process ended between two samples
        return 0
    total = 0
    for member in members:
        try:
            total += member.memory_info().rss
        except Exception:
            continue
    return total


def run_one(name: str, path: Path, work: Path, anchors: Path | None, round_no: int,
            detect_flags: tuple[str, ...] = DETECT_FLAGS) -> Run:
    load = os.getloadavg()[0]
    for part in (name, f"{name}-1", f"{name}-2"):
        for stale in (work / f"events-{part}.jsonl", work / f"dead-{part}.jsonl"):
            stale.unlink(missing_ok=True)
    got = measure(command(name, path, work, anchors, detect_flags))
    records = invalid = events = 0
    ids = ""
    if name in ANCHORS:
        try:
            printed = orjson.loads(got["stdout"].strip().splitlines()[-1])
            records, invalid, events = printed["records"], printed["invalid"], printed["events"]
        except (IndexError, orjson.JSONDecodeError, KeyError):
            got["exit_code"] = got["exit_code"] or 1
    elif name in CEILINGS:
        parts = [f"{name}-1", f"{name}-2"]
        events = sum(len(_lines(work / f"events-{part}.jsonl")) for part in parts)
        invalid = sum(len(_lines(work / f"dead-{part}.jsonl")) for part in parts)
        records = sum(_summary_counts(got["stderr"]))
    else:
        lines = _lines(work / f"events-{name}.jsonl")
        events = len(lines)
        ids = hashlib.sha256("".join(sorted(orjson.loads(ln)["event_id"] for ln in lines))
                             .encode()).hexdigest()[:16]
        invalid = len(_lines(work / f"dead-{name}.jsonl"))
        records = next(iter(_summary_counts(got["stderr"])), 0)
    return Run(name, path.name, round_no, round(got["wall_s"], 3), round(got["cpu_s"], 3),
               round(got["max_rss_mb"], 1),
               None if got["tree_rss_mb"] is None else round(got["tree_rss_mb"], 1),
               records, invalid, events, ids, got["exit_code"],
               "" if got["exit_code"] == 0 else f"exit {got['exit_code']}: "
               f"{got['stderr'].strip().splitlines()[-1:] or ['']}", round(load, 2))


def _lines(path: Path) -> list[bytes]:
    return [ln for ln in path.read_bytes().splitlines() if ln] if path.exists() else []


def _summary_counts(stderr: str) -> list[int]:
    """The records read of each summary line printed (one per `binloop detect`)."""
    return [int(line.split("|")[0].split()[2].replace(",", ""))
            for line in stderr.splitlines() if line.startswith("records read ")]


def check_rounds(runs: list[Run]) -> None:
    """Void every run whose events or rejects differ from what the anchors (else the
    reference engine) found on the same file."""
    by_file: dict[str, list[Run]] = {}
    for run in runs:
        by_file.setdefault(run.file, []).append(run)
    for file_runs in by_file.values():
        anchors = [r for r in file_runs if r.name in ANCHORS and r.exit_code == 0]
        reference = [r for r in file_runs if r.name == "reference" and r.exit_code == 0]
        if anchors:
            expected = statistics.mode((r.events, r.invalid, r.records) for r in anchors)
            what = "the anchors'"
        elif reference:
            expected = statistics.mode((r.events, r.invalid, r.records) for r in reference)
            what = "the reference engine's"
        else:
            continue
        expected_ids = statistics.mode(r.event_ids for r in reference) if reference else ""
        for run in file_runs:
            if run.void:
                continue
            if run.name in CEILINGS:  # other events by design: the halves' records only
                if (run.invalid, run.records) != expected[1:]:
                    run.void = (f"invalid/records {(run.invalid, run.records)} differ from "
                                f"{what} {expected[1:]}")
                continue
            got = (run.events, run.invalid, run.records)
            if got != expected:
                run.void = (f"events/invalid/records {got} differ from {what} {expected}")
            elif run.name not in ANCHORS and expected_ids and run.event_ids != expected_ids:
                run.void = "event ids differ from the reference engine's"


def summarise(runs: list[Run]) -> list[dict[str, Any]]:
    """Per file and runner: medians over the counted rounds and ratios to the anchors."""
    rows: list[dict[str, Any]] = []
    files = list(dict.fromkeys(r.file for r in runs))
    for file in files:
        names = list(dict.fromkeys(r.name for r in runs if r.file == file))
        medians: dict[str, dict[str, Any]] = {}
        for name in names:
            mine = [r for r in runs if r.file == file and r.name == name]
            good = [r for r in mine if not r.void]
            if not good:
                medians[name] = {"file": file, "name": name, "rounds": len(mine), "void": len(mine),
                                 "failure": mine[0].void if mine else ""}
                continue
            wall = statistics.median(r.wall_s for r in good)
            cpu = statistics.median(r.cpu_s for r in good)
            records = good[0].records
            medians[name] = {
                "file": file, "name": name, "rounds": len(mine), "void": len(mine) - len(good),
                "failure": next((r.void for r in mine if r.void), ""),
                "records": records, "events": good[0].events, "invalid": good[0].invalid,
                "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                "records_per_s": round(records / wall), "records_per_cpu_s": round(records / cpu),
                "max_rss_mb": max(r.max_rss_mb for r in good),
                "tree_rss_mb": max((r.tree_rss_mb or 0) for r in good),
                "walls": [r.wall_s for r in mine]}
        for row in medians.values():
            for anchor in ANCHORS:
                base = medians.get(anchor)
                if base and "wall_s" in base and "wall_s" in row:
                    row[f"vs_{anchor}"] = round(base["wall_s"] / row["wall_s"], 2)
            rows.append(row)
    return rows


def bench(files: list[str], records: int, workdir: Path, rounds: int, runners: list[str],
          anchors: Path | None, seed: int, say: Any,
          state_records: tuple[int, ...] = ()) -> dict[str, Any]:
    runs: list[Run] = []
    notes = [compile_packages()]
    if anchors is None:
        notes.append("anchors skipped: ../shared/bench/anchors.py not found (pass --anchors); "
                     "runs are checked against the reference engine instead")
    load_start = os.getloadavg()
    for kind in files:
        path = bench_file(kind, records, workdir, seed, anchors)
        names = [n for n in runners if n in ENGINES + CEILINGS or anchors is not None]
        if kind == "invalid":
            names = [n for n in names if n != "polars"]  # polars' reader raises on bad lines
        say(f"{path.name}: {', '.join(names)}; {rounds} rounds; load {os.getloadavg()[0]:.2f}")
        for round_no in range(rounds):
            shift = round_no % len(names)
            for name in names[shift:] + names[:shift]:
                run = run_one(name, path, workdir, anchors, round_no + 1)
                say(f"  round {round_no + 1} {name}: {run.wall_s:.2f} s wall, {run.cpu_s:.2f} "
                    f"CPU-s, {run.max_rss_mb:.0f} MB, {run.events} events"
                    + (f"  FAILED: {run.void}" if run.void else ""))
                runs.append(run)
    check_rounds(runs)
    startup = []
    empty = workdir / "empty.jsonl"
    empty.write_bytes(b"")
    for name in [n for n in runners if n in ENGINES]:
        got = run_one(name, empty, workdir, None, 1)
        startup.append({"name": name, "cpu_s": got.cpu_s, "wall_s": got.wall_s,
                        "max_rss_mb": got.max_rss_mb})
    state = []
    for count in state_records:
        path = workdir / f"distinct-{count}.jsonl"
        if not path.exists():
            subprocess.run([sys.executable, "-m", "binloop.cli", "simulate", "--profile",
                            "distinct", "--records", str(count), "--out", str(path)],
                           check=True, capture_output=True)
        # the default (session) window: a global window keeps every key by design
        got = run_one("bytewax-1w", path, workdir, None, 1, ())
        state.append({"records": count, "wall_s": got.wall_s, "max_rss_mb": got.max_rss_mb,
                      "exit_code": got.exit_code})
        say(f"bounded state: {count:,} distinct keys, peak RSS {got.max_rss_mb:.0f} MB")
    if "invalid" in files and anchors is not None:
        notes.append("invalid file: compared with the plain and msgspec anchors (polars' "
                     "JSON reader raises on the first bad line)")
    return {"files": files, "records": records, "rounds": rounds, "cpu_count": os.cpu_count(),
            "load_avg_before": [round(x, 2) for x in load_start],
            "load_avg_after": [round(x, 2) for x in os.getloadavg()],
            "notes": notes, "rows": summarise(runs),
            "runs": [{k: v for k, v in asdict(r).items() if k in _RUN_FIELDS} for r in runs],
            "void_runs": sum(1 for r in runs if r.void), "startup": startup, "state": state,
            "command": "binloop bench engines " + " ".join(sys.argv[3:])}


def markdown(result: dict[str, Any]) -> str:
    lines = ["# Engines beside the anchors: same files, one run", "",
             f"{result['cpu_count']} CPUs; load average (1, 5, 15 min) before "
             f"{result['load_avg_before']}, after {result['load_avg_after']}. "
             f"{result['rounds']} alternating rounds; medians of whole-process wall time "
             "(start to exit). Ratios: the anchor's wall time / this one's (> 1 = faster).",
             "", *[f"- {note}" for note in result["notes"]], "",
             "| file | run | records/s | wall s | CPU-s | records/CPU-s | max RSS MB | "
             "tree RSS MB | vs plain | vs msgspec | vs polars | events | invalid | void |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        if "wall_s" not in r:
            lines.append(f"| {r['file']} | {r['name']} | - | - | - | - | - | - | - | - | - | - "
                         f"| - | {r['void']}/{r['rounds']}: {r['failure']} |")
            continue
        lines.append(
            f"| {r['file']} | {r['name']} | {r['records_per_s']:,} | {r['wall_s']:.2f} | "
            f"{r['cpu_s']:.2f} | {r['records_per_cpu_s']:,} | {r['max_rss_mb']:.0f} | "
            f"{r['tree_rss_mb']:.0f} | {r.get('vs_plain', '-')} | {r.get('vs_msgspec', '-')} | "
            f"{r.get('vs_polars', '-')} | {r['events']} | {r['invalid']} | "
            f"{r['void']}/{r['rounds']}{': ' + r['failure'] if r['failure'] else ''} |")
    ceilings = [(r["file"], r["wall_s"]) for r in result["rows"]
                if r["name"] in CEILINGS and "wall_s" in r]
    walls = {(r["file"], r["name"]): r["wall_s"] for r in result["rows"] if "wall_s" in r}
    for file, ceiling in ceilings:
        one = walls.get((file, "bytewax-1w"))
        two = walls.get((file, "bytewax-2p"))
        if one is not None:
            lines += ["", f"Two processes on {file}: the ceiling (bytewax-1w / bytewax-halves) "
                      f"{one / ceiling:.2f}x"
                      + (f", reached (bytewax-1w / bytewax-2p) {one / two:.2f}x." if two else ".")]
    lines += ["", f"Void runs (events differ from the anchors'/reference's, or a crash): "
              f"{result['void_runs']}.", "",
              "Start-up (an empty file; included above, not subtracted): " + ", ".join(
                  f"{s['name']} {s['cpu_s']:.2f} CPU-s" for s in result.get("startup", [])) + "."]
    if result.get("state"):
        lines += ["", "Bounded state (bytewax, 1 worker, every record a failure of a new key): "
                  + ", ".join(f"{s['records']:,} keys {s['max_rss_mb']:.0f} MB"
                              for s in result["state"]) + "."]
    lines += ["", f"Reproduce: `{result['command']}`"]
    return "\n".join(lines) + "\n"


def write(out_dir: Path, result: dict[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "engines.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    (out_dir / "engines.md").write_text(markdown(result))


def register_bench(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "engines", help="every engine beside the anchors on the same files: records/s, "
                        "CPU-s, peak RSS, ratios",
        description="Writes engines.json and engines.md to --out (see benchmarks/engines.py).")
    parser.add_argument("--out", default=str(DEFAULT_OUT), metavar="DIR")
    parser.add_argument("--records", type=int, default=1_000_000, help="lines per file")
    parser.add_argument("--files", default=",".join(FILE_KINDS),
                        help=f"comma-separated, from {', '.join(FILE_KINDS)}")
    parser.add_argument("--runs", default=",".join(ANCHORS + ENGINES),
                        help=f"comma-separated, from {', '.join(ANCHORS + ENGINES + CEILINGS)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", default=str(DEFAULT_WORKDIR), metavar="DIR",
                        help="generated inputs and outputs live here (reused when present)")
    parser.add_argument("--anchors", metavar="PATH",
                        help="anchors.py (default: ../shared/bench/anchors.py)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--state-records", default="", metavar="BIG,SMALL",
                        help="also replay every-record-a-new-key streams of these sizes "
                             "(bounded state)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    files = [f for f in args.files.split(",") if f]
    runners = [r for r in args.runs.split(",") if r]
    unknown = [f for f in files if f not in FILE_KINDS] + \
        [r for r in runners if r not in ANCHORS + ENGINES + CEILINGS]
    if unknown or args.records < 1 or args.rounds < 1:
        raise ValueError(f"unknown --files/--runs {unknown} or --records/--rounds < 1")
    if "polars-engine" in runners:
        from binloop.sim.replay_engine import polars_engine_available

        if not polars_engine_available():
            runners.remove("polars-engine")
    anchors = anchors_script(args.anchors)
    state = tuple(int(v) for v in args.state_records.split(",") if v)
    result = bench(files, args.records, Path(args.workdir), args.rounds, runners, anchors,
                   args.seed, lambda text: print(f"bench engines: {text}", file=sys.stderr,
                                                  flush=True), state)
    if any(s["exit_code"] for s in result["state"]):
        return 1
    write(Path(args.out), result)
    print(markdown(result))
    return 1 if result["void_runs"] else 0


if __name__ == "__main__" and sys.argv[1:2] == ["--measure"]:
    sys.stdout.buffer.write(orjson.dumps(_measure_here(orjson.loads(sys.argv[2]))))
