"""`binloop bench nats` on a small stream: every measure runs and is reported."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from binloop.cli import main


@pytest.mark.slow
def test_nats_bench_runs_every_measure(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["bench", "nats", "--records", "3000", "--batch-records", "10000",
                 "--rounds", "1", "--seconds", "2", "--rate", "1000", "--partitions", "2",
                 "--out", str(out)]) == 0
    result = orjson.loads((out / "nats_bench.json").read_bytes())
    for name in ("a_ordered_callback", "a_pull_drain", "a_wire_drain", "b", "b_nats_py", "c"):
        assert result[name]["records_per_s"] > 0 and result[name]["records_per_cpu_s"] > 0
        assert result[name]["server_cpu_s_per_100k"] >= 0
        assert len(result["runs"][name]) == 1
    assert result["b_2_processes"]["processes"] == 2
    two = result["c_2_processes"]
    assert two["records"] == 10000 and two["cpu_s"] > 0 and two["server_cpu_s"] > 0
    assert two["records_per_cpu_s"] > 0 and two["whole_records_per_s"] > 0
    assert result["latency"]["events"] > 0 and result["latency"]["p99_ms"] > 0
    assert set(result["met"]) == {"b_over_a", "c_records_per_s", "latency_p99_ms"}
    assert "(b) / (a)" in (out / "nats_bench.md").read_text()
