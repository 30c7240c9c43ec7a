"""`binloop bench engines` on small files: anchors and engines run, agree, are measured,
and a wrong engine's run is void."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from benchmarks.bench_files import anchors_script
from benchmarks.engines import Run, check_rounds, halves_of
from binloop.cli import main


def _run(name: str, events: int, ids: str = "", invalid: int = 0, records: int = 100) -> Run:
    return Run(name, "f.jsonl", 1, 1.0, 1.0, 10.0, None, records, invalid, events, ids, 0)


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


def test_the_halves_ceiling_is_checked_on_its_records_not_its_events() -> None:
    """Two halves fire other events than the whole file, by design; but they must have
    read every record and rejected the same lines."""
    runs = [_run("plain", 7, invalid=2), _run("bytewax-halves", 9, invalid=2),
            _run("bytewax-halves", 7, invalid=2, records=60),
            _run("bytewax-halves", 7, invalid=1)]
    check_rounds(runs)
    assert [bool(r.void) for r in runs] == [False, False, True, True]
    assert "invalid/records (2, 60)" in runs[2].void


@pytest.mark.parametrize("lines", [[b"a"], [b"a", b"bb"], [b"x" * 10, b"y", b"z" * 7, b"w"]])
def test_halves_are_the_file_cut_at_a_line_end(tmp_path: Path, lines: list[bytes]) -> None:
    whole = tmp_path / "f.jsonl"
    whole.write_bytes(b"".join(line + b"\n" for line in lines))
    first, second = halves_of(whole, tmp_path)
    assert first.read_bytes() + second.read_bytes() == whole.read_bytes()
    assert first.read_bytes().endswith(b"\n") and first.stat().st_size >= whole.stat().st_size // 2
    whole.write_bytes(b"other\nlines\n")  # a new file of another size: cut again
    assert b"".join(h.read_bytes() for h in halves_of(whole, tmp_path)) == b"other\nlines\n"


@pytest.mark.slow
def test_engines_bench_runs_anchors_and_engines_on_every_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = main(["bench", "engines", "--records", "3000", "--rounds", "2", "--out", str(out),
                 "--workdir", str(tmp_path / "work"),
                 "--runs", "plain,msgspec,polars,reference,bytewax-1w,bytewax-2p,bytewax-halves",
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
        halves = rows[(kind, "bytewax-halves")]
        assert halves["void"] == 0 and halves["records"] == 3000
        assert halves["invalid"] == rows[(kind, "reference")]["invalid"]
    assert rows[("invalid", "reference")]["invalid"] > 200  # about 10% of 3000 lines
    assert rows[("anchor", "bytewax-2p")]["tree_rss_mb"] > rows[("anchor", "bytewax-2p")][
        "max_rss_mb"]  # two processes summed
    assert "| file | run |" in (out / "engines.md").read_text()
    assert "the ceiling (bytewax-1w / bytewax-halves)" in (out / "engines.md").read_text()
    assert [s["name"] for s in result["startup"]] == ["reference", "bytewax-1w", "bytewax-2p"]
    assert [s["records"] for s in result["state"]] == [800, 200]
    assert all(s["exit_code"] == 0 and s["max_rss_mb"] > 10 for s in result["state"])
    assert not list(Path.cwd().glob("*.jsonl"))  # generated files stay in the workdir
