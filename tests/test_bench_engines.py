"""`binloop bench engines` on a small file: every engine runs, agrees, and is measured."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from binloop.cli import main


@pytest.mark.slow
def test_engines_bench_runs_every_engine_and_checks_agreement(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["bench", "engines", "--records", "20000", "--state-records", "4000,400",
                 "--out", str(out), "--workdir", str(tmp_path / "work"), "--rounds", "2"]) == 0
    result = orjson.loads((out / "engines.json").read_bytes())
    names = [r["name"] for r in result["engines"]]
    assert names[0] == "reference" and {"bytewax-1w", "bytewax-2p"} <= set(names)
    assert result["same_events"] is True and result["bytewax_2p_over_1w"] > 0
    assert result["rounds"] == 2
    assert all(len(speeds) == 2 for speeds in result["all_rounds"].values())
    for row in result["engines"]:
        assert row["exit_code"] == 0 and row["records"] == 20000 and row["events"] > 0
        assert row["records_per_s"] > 0 and row["peak_rss_max_process_mb"] > 10
        assert row["summary_line"].startswith("records read 20,000")
    two = next(r for r in result["engines"] if r["name"] == "bytewax-2p")
    assert two["peak_rss_tree_mb"] > two["peak_rss_max_process_mb"]  # two processes summed
    assert [r["records"] for r in result["state"]] == [4000, 400]
    assert "| engine |" in (out / "engines.md").read_text()
