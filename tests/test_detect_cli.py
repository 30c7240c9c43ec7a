"""`binloop detect` end to end on small files: outputs, rejects, formats, engines."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import orjson
import polars as pl
import pytest

from binloop.cli import main

BASE_TS = 1_700_000_000_000


def record(i: int, tool: str = "book", outcome: str = "failure", session: int = 1) -> dict:
    return {"session_id": session, "ts": BASE_TS + i * 1000, "tool": tool, "args": {"i": i},
            "outcome": outcome, "failure_mode": "ARGS.total" if outcome != "success" else None}


def write_jsonl(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def sample_lines() -> list[bytes]:
    good = [orjson.dumps(record(i)) for i in range(5)]
    return [good[0], b"{broken", good[1], b"", b'{"tool": ""}', good[2], good[3], good[4]]


def events_of(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


@pytest.mark.parametrize("engine", ["reference", "bytewax"])
def test_events_dead_letters_and_summary(tmp_path: Path, engine: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", sample_lines())
    out, dead = tmp_path / "events.jsonl", tmp_path / "dead.jsonl"
    code = main(["detect", "--input", str(src), "--engine", engine, "--out", str(out),
                 "--dead-letter", str(dead), "--theta", "2"])
    assert code == 0
    (event,) = events_of(out)
    assert event["count"] == 2 and [r["args"]["i"] for r in event["evidence"]] == [0, 1]
    letters = events_of(dead)
    assert [(d["position"], d["reason"][:8]) for d in letters] == [("2", "not JSON"),
                                                                   ("5", "missing ")]
    assert letters[0]["raw"] == "{broken" and letters[0]["source"] == str(src)
    summary = capsys.readouterr().err
    assert "records read 7" in summary and "invalid 2" in summary and "events fired 1" in summary


def test_replaying_twice_appends_nothing(tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", sample_lines())
    out = tmp_path / "events.jsonl"
    args = ["detect", "--input", str(src), "--out", str(out), "--theta", "2",
            "--dead-letter", str(tmp_path / "dead.jsonl")]
    assert main(args) == 0
    first = out.read_bytes()
    assert main(args) == 0
    assert out.read_bytes() == first


def test_gz_parquet_and_directory_inputs_agree(tmp_path: Path) -> None:
    rows = [record(i, tool=f"t{i % 2}") for i in range(8)]
    lines = [orjson.dumps(r) for r in rows]
    plain = write_jsonl(tmp_path / "a.jsonl", lines)
    packed = tmp_path / "b.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    table = tmp_path / "c.parquet"
    pl.DataFrame([{**r, "args": orjson.dumps(r["args"]).decode()} for r in rows]).write_parquet(
        table)
    outs = []
    for src in (plain, packed, table):
        out = tmp_path / f"{src.name}.events"
        assert main(["detect", "--input", str(src), "--out", str(out), "--theta", "3"]) == 0
        outs.append(events_of(out))
    assert outs[0] == outs[1] == outs[2] and len(outs[0]) == 2
    folder = tmp_path / "dir"
    folder.mkdir()
    write_jsonl(folder / "1.jsonl", lines[:4])
    write_jsonl(folder / "2.jsonl", lines[4:])
    out = tmp_path / "dir.events"
    assert main(["detect", "--input", str(folder), "--out", str(out), "--theta", "3"]) == 0
    assert events_of(out) == outs[0]


def test_stdin_input(tmp_path: Path) -> None:
    data = b"".join(orjson.dumps(record(i)) + b"\n" for i in range(3))
    done = subprocess.run([sys.executable, "-m", "binloop.cli", "detect", "--input", "-",
                           "--engine", "reference"], input=data, capture_output=True, check=True)
    (event,) = [orjson.loads(x) for x in done.stdout.splitlines()]
    assert event["count"] == 3


def test_missing_input_is_a_clear_error(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["detect", "--input", str(tmp_path / "nope.jsonl")]) == 66  # EX_NOINPUT
    assert "does not exist" in capsys.readouterr().err


def test_tau_telemetry_reference_and_bytewax_agree(tau_telemetry: Path, tmp_path: Path) -> None:
    outs = []
    for engine in ("reference", "bytewax"):
        out = tmp_path / f"{engine}.jsonl"
        assert main(["detect", "--input", str(tau_telemetry), "--engine", engine,
                     "--out", str(out)]) == 0
        outs.append(events_of(out))
    # the contract is the order per key; across keys the output interleaves freely
    assert sorted(outs[0], key=lambda e: e["event_id"]) == sorted(outs[1],
                                                                  key=lambda e: e["event_id"])
    assert len(outs[0]) == 4
