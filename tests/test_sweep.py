"""θ sweep: metrics on a hand-made stream, agreement with the Bytewax flow, real telemetry."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from bytewax.testing import cluster_main, run_main

from binloop.cli import main
from binloop.core.config import Config
from binloop.core.detection import DetectionParams
from binloop.core.schema import DEFAULT_LIMITS
from binloop.core.window import WindowSpec
from binloop.sim.replay_engine import detect_events, load, resolve
from binloop.sim.simulate import SimParams, write_simulation
from binloop.sim.sweep import SweepPlan, run_sweep, summary_rows
from binloop.sim.truth import TruthSpec
from binloop.sim.truth import resolve as resolve_truth
from flows.detect import build_flow

# (session, tool, failure_mode, outcome) in arrival order, one second apart.
HAND_STREAM = [
    (1, "a", "ARGS.x", "failure"),       # row 0
    (1, "b", "NETWORK.dns", "failure"),  # row 1
    (1, "a", "ARGS.x", "failure"),       # row 2
    (2, "c", "PERM.denied", "success"),  # row 3 (does not count)
    (2, "b", "NETWORK.dns", "timeout"),  # row 4
    (2, "a", "ARGS.x", "failure"),       # row 5
    (3, "b", "NETWORK.dns", "failure"),  # row 6
    (3, "d", "SYNTAX.json", "failure"),  # row 7
    (3, "d", "SYNTAX.json", "failure"),  # row 8
]


@pytest.fixture
def hand_file(tmp_path: Path) -> Path:
    path = tmp_path / "hand.jsonl"
    lines = [orjson.dumps({"session_id": s, "ts": 1_600_000_000_000 + i * 1000, "tool": t,
                           "failure_mode": m, "outcome": o, "args": {"i": i}})
             for i, (s, t, m, o) in enumerate(HAND_STREAM)]
    path.write_bytes(b"\n".join(lines) + b"\n")
    truth = {"pairs": [{"tool": "a", "failure_mode": "ARGS.x"},
                       {"tool": "b", "failure_mode": "NETWORK.dns"}]}
    Path(f"{path}.truth.json").write_bytes(orjson.dumps(truth))
    return path


def _sweep(path: Path, windows: tuple[str, ...], thetas: tuple[int, ...],
           truth: str = "auto", engine: str = "auto") -> dict[tuple[str, int], dict[str, Any]]:
    loaded = load(str(path), DEFAULT_LIMITS, engine, progress=False)
    plan = SweepPlan(thetas, tuple(WindowSpec.parse(w) for w in windows), DetectionParams())
    keys, _ = resolve_truth(TruthSpec.parse(truth), str(path), loaded.frame, plan.base)
    rows = summary_rows(run_sweep(loaded, plan, keys, progress=False))
    return {(r["window"], r["theta"]): r for r in rows}


@pytest.mark.parametrize("engine", ["reference", "polars"])
def test_metrics_of_a_hand_made_stream(hand_file: Path, engine: str) -> None:
    rows = _sweep(hand_file, ("session", "global"), (2, 3), engine=engine)
    s2 = rows[("session", 2)]  # fires a (row 2) and d (row 8); b never twice in a session
    assert (s2["fired"], s2["tp"], s2["fp"], s2["fn"]) == (2, 1, 1, 1)
    assert (s2["precision"], s2["recall"], s2["f1"]) == (0.5, 0.5, 0.5)
    assert s2["builds_per_session"] == round(2 / 3, 4)
    assert s2["slices_per_session"] == round(2 / 3, 4)  # (a, s1) and (d, s3)
    assert (s2["delay_records_median"], s2["delay_sessions_median"]) == (2, 0)
    assert (s2["used_after"], s2["failures_after"]) == (1, 1)  # a fails again at row 5
    g2 = rows[("global", 2)]  # a (row 2), b (row 4), d (row 8)
    assert (g2["fired"], g2["tp"], g2["precision"], g2["recall"]) == (3, 2, 0.6667, 1.0)
    assert (g2["delay_records_median"], g2["delay_sessions_median"]) == (2.5, 0.5)
    g3 = rows[("global", 3)]  # a at row 5 (session 2), b at row 6 (session 3)
    assert (g3["fired"], g3["precision"], g3["recall"], g3["f1"]) == (2, 1.0, 1.0, 1.0)
    assert (g3["delay_records_mean"], g3["delay_sessions_mean"]) == (5, 1.5)
    s3 = rows[("session", 3)]
    assert (s3["fired"], s3["precision"], s3["recall"], s3["f1"]) == (0, None, 0.0, 0.0)


def test_int_and_text_session_ids_are_different_sessions(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    lines = [orjson.dumps({"session_id": sid, "ts": 1_600_000_000_000 + i, "tool": "t",
                           "failure_mode": "ARGS.x", "outcome": "failure", "args": {"i": i}})
             for i, sid in enumerate([1, "1", 1, "1"])]
    path.write_bytes(b"\n".join(lines) + b"\n")
    for engine in ("reference", "polars"):
        row = _sweep(path, ("session",), (2,), truth="sessions:2", engine=engine)[("session", 2)]
        assert (row["positives"], row["fired"], row["builds_per_session"]) == (1, 1, 0.5)


def test_reference_and_polars_sweeps_agree(tmp_path: Path) -> None:
    path = tmp_path / "sim.jsonl"
    write_simulation(SimParams(sessions=200, pairs=15, seed=11), path)
    windows = ("session", "global", "sliding:20m")
    rows = [_sweep(path, windows, (2, 3, 5), engine=engine) for engine in ("reference", "polars")]
    for row in (*rows[0].values(), *rows[1].values()):
        row.pop("engine_s")
    assert rows[0] == rows[1]


def test_truth_from_the_data(hand_file: Path) -> None:
    # sessions:2 -> a (s1, s2) and b (s1, s2, s3); failures:3 -> a and b; failures:2 adds d
    rows = _sweep(hand_file, ("global",), (2,), truth="sessions:2")
    assert rows[("global", 2)]["positives"] == 2
    rows = _sweep(hand_file, ("global",), (2,), truth="failures:2")
    assert rows[("global", 2)]["positives"] == 3 and rows[("global", 2)]["precision"] == 1.0


def _bytewax_events(path: Path, out: Path, params: DetectionParams, workers: int) -> list[Any]:
    config = Config(input=str(path), out=str(out), theta=params.theta, window=params.window,
                    dead_letter=str(out) + ".dead", progress=False, batch_size=300)
    flow = build_flow(config)
    if workers == 1:
        run_main(flow)
    else:
        cluster_main(flow, [], 0, worker_count_per_proc=workers)
    return [orjson.loads(line) for line in out.read_bytes().splitlines()]


def _essence(events: list[Any]) -> list[tuple[Any, ...]]:
    return sorted((e["event_id"], e["tool"], e["failure_mode"], e["session_id"], e["count"],
                   e["first_ts"], e["fired_ts"], tuple(r["id"] for r in e["evidence"]))
                  for e in events)


@pytest.mark.parametrize("window", ["session", "global", "sliding:10m"])
def test_sweep_engine_fires_what_the_bytewax_flow_fires(tmp_path: Path, window: str) -> None:
    path = tmp_path / "sim.jsonl"
    write_simulation(SimParams(sessions=150, pairs=12, seed=5), path)
    loaded = load(str(path), DEFAULT_LIMITS)
    assert loaded.engine == resolve("auto")
    for theta, workers in ((2, 1), (4, 2)):
        # The same configuration as the flow's (event ids carry its digest).
        params = Config(theta=theta, window=WindowSpec.parse(window)).detection()
        ours = detect_events(loaded, params)
        theirs = _bytewax_events(path, tmp_path / f"events-{theta}.jsonl", params, workers)
        assert len(ours) > 3
        assert _essence(ours) == _essence(theirs)


def test_sweep_of_the_real_tau_telemetry(tau_telemetry: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tau"
    assert main(["sweep", "--input", str(tau_telemetry), "--out", str(out), "--no-plots"]) == 0
    rows = {(r["window"], r["theta"]): r for r in orjson.loads((out / "summary.json").read_bytes())}
    assert len(rows) == 12
    meta = orjson.loads((out / "meta.json").read_bytes())
    # By hand from the file: 73 failures over 10 keys; 7 keys fail in >= 2 sessions.
    assert (meta["records"], meta["keys"], meta["positives"]) == (1164, 10, 7)
    # Global θ=2 fires every key with >= 2 failures: 8 keys, of which one (book_reservation
    # NOTFOUND.payment_method: 3 failures, all in session 33) is in a single session.
    g2 = rows[("global", 2)]
    assert (g2["fired"], g2["tp"], g2["fp"], g2["recall"]) == (8, 7, 1, 1.0)
    # Global θ=5: keys with >= 5 failures are the 4 of 24, 15, 11 and 8 failures.
    assert rows[("global", 5)]["fired"] == 4
    assert "| θ | precision |" in (out / "summary.md").read_text()
    assert "window `session`" in capsys.readouterr().out


def test_cli_simulated_sweep_writes_every_output(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", "--simulate", "--sessions", "60", "--pairs", "6", "--seed", "3",
                 "--thetas", "2,3", "--windows", "session,sliding:5m", "--out", str(out)]) == 0
    rows = orjson.loads((out / "summary.json").read_bytes())
    assert [(r["window"], r["theta"]) for r in rows] == [
        ("session", 2), ("session", 3), ("sliding:5m", 2), ("sliding:5m", 3)]
    for row in rows:
        assert {"theta", "precision", "recall", "f1", "builds_per_session", "fired"} <= set(row)
        assert row["positives"] == 6
    for name in ("summary.md", "meta.json", "precision_recall.png", "builds_per_session.png",
                 "detection_delay.png", "telemetry.jsonl", "telemetry.jsonl.truth.json"):
        assert (out / name).stat().st_size > 0, name
    assert "Beside the paper" in (out / "summary.md").read_text()
    assert main(["sweep", "--simulate", "--out", str(out), "--theta", "3", "--window", "global",
                 "--sessions", "30", "--pairs", "3", "--no-plots"]) == 0
    rows = orjson.loads((out / "summary.json").read_bytes())
    assert [(r["window"], r["theta"]) for r in rows] == [("global", 3)]


def test_repeated_simulations_are_averaged_with_their_spread(tmp_path: Path) -> None:
    out = tmp_path / "rep"
    assert main(["sweep", "--simulate", "--sessions", "50", "--pairs", "5", "--repeats", "3",
                 "--thetas", "2,3", "--windows", "global", "--out", str(out), "--no-plots"]) == 0
    rows = orjson.loads((out / "summary.json").read_bytes())
    meta = orjson.loads((out / "meta.json").read_bytes())
    assert [r["repeats"] for r in rows] == [3, 3] and len(meta["runs"]) == 3
    assert len({run["records"] for run in meta["runs"]}) > 1  # three different seeds
    for row in rows:
        assert row["recall_sd"] is not None and row["recall_sd"] >= 0
    assert "Averaged over 3 seeds" in (out / "summary.md").read_text()
    assert not list(out.glob("telemetry-seed*"))  # later seeds are not kept


@pytest.mark.parametrize("engine", ["reference", "polars"])
def test_sweep_reads_input_as_detect_does(hand_file: Path, tmp_path: Path, engine: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """One reader for both commands: `--max-line-bytes` refuses a long line as it streams
    by, and a symbolic link in the directory is skipped unless `--follow-symlinks`."""
    folder = tmp_path / "in"
    folder.mkdir()
    long_line = orjson.dumps({"session_id": 9, "ts": 1_600_000_000_000, "tool": "a",
                              "failure_mode": "ARGS.x", "outcome": "failure",
                              "args": {"blob": "x" * 3000}})
    (folder / "a.jsonl").write_bytes(hand_file.read_bytes() + long_line + b"\n")
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"root:x:0:0:root:/root:/bin/bash\n" * 3)
    (folder / "passwd.jsonl").symlink_to(secret)

    def sweep(*flags: str) -> tuple[int, int]:
        out = tmp_path / f"sweep{len(flags)}"
        assert main(["sweep", "--input", str(folder), "--engine", engine, "--thetas", "2",
                     "--windows", "global", "--no-plots", "--out", str(out), *flags]) == 0
        meta = orjson.loads((out / "meta.json").read_bytes())
        return meta["records"], meta["invalid"]

    assert sweep() == (len(HAND_STREAM) + 1, 0)
    assert sweep("--max-line-bytes", "2000") == (len(HAND_STREAM), 1)
    assert sweep("--max-line-bytes", "2000", "--follow-symlinks") == (len(HAND_STREAM), 4)
    dead = tmp_path / "dead.jsonl"
    assert main(["detect", "--input", str(folder), "--engine", engine, "--out", os.devnull,
                 "--dead-letter", str(dead), "--max-line-bytes", "2000",
                 "--follow-symlinks"]) == 0
    assert f"valid {len(HAND_STREAM)} | invalid 4" in capsys.readouterr().err
