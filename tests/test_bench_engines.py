"""`binloop bench engines` on small files: anchors and engines run, agree, are measured,
and a wrong engine's run is void."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from benchmarks.bench_files import anchors_script
from benchmarks.engines import Run, check_rounds
from binloop.cli import main


def _run(name: str, events: int, ids: str = "", invalid: int = 0) -> Run:
    return Run(name, "f.jsonl", 1, 1.0, 1.0, 10.0, None, 100, invalid, events, ids, 0)


def test_a_run_whose_events_differ_from_the_anchors_is_void() -> None:
    runs = [_run("plain", 7), _run("msgspec", 7), _run("reference", 7, "a"),
            _run("bytewax-1w", 6, "b"), _run("bytewax-2p", 7, "c"), _run("polars-engine", 7, "a"),
            _run("bytewax-1w", 7, "a", invalid=3)]
    check_rounds(runs)
    assert [bool(r.void) for r in runs] == [False, False, False, True, True, False, True]
    assert "differ from the anchors'" in runs[3].void and "event ids" in runs[4].void


def test_without_anchors_the_reference_engine_decides() -> None:
    runs = [_run("reference", 7, "a"), _run("bytewax-1w", 8, "a")]
    check_rounds(runs)
    assert "reference engine's" in runs[1].void


@pytest.mark.slow
def test_engines_bench_runs_anchors_and_engines_on_every_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = main(["bench", "engines", "--records", "3000", "--rounds", "2", "--out", str(out),
                 "--workdir", str(tmp_path / "work"),
                 "--runs", "plain,msgspec,polars,reference,bytewax-1w,bytewax-2p",
                 "--state-records", "800,200"])
    assert code == 0
    result = orjson.loads((out / "engines.json").read_bytes())
    rows = {(r["file"].split("-")[0], r["name"]): r for r in result["rows"]}
    have_anchors = anchors_script(None) is not None
    for kind in ("anchor", "realistic", "invalid"):
        for name in ("reference", "bytewax-1w", "bytewax-2p"):
            row = rows[(kind, name)]
            assert row["void"] == 0 and row["rounds"] == 2 and row["records"] == 3000
            assert row["events"] > 0 and row["cpu_s"] > 0 and row["max_rss_mb"] > 10
            if have_anchors:
                assert row["vs_plain"] > 0
        assert ((kind, "polars") in rows) == (have_anchors and kind != "invalid")
    assert rows[("invalid", "reference")]["invalid"] > 200  # about 10% of 3000 lines
    assert rows[("anchor", "bytewax-2p")]["tree_rss_mb"] > rows[("anchor", "bytewax-2p")][
        "max_rss_mb"]  # two processes summed
    assert "| file | run |" in (out / "engines.md").read_text()
    assert [s["name"] for s in result["startup"]] == ["reference", "bytewax-1w", "bytewax-2p"]
    assert [s["records"] for s in result["state"]] == [800, 200]
    assert all(s["exit_code"] == 0 and s["max_rss_mb"] > 10 for s in result["state"])
    assert not list(Path.cwd().glob("*.jsonl"))  # generated files stay in the workdir
