"""`python -m benchmarks.otlp_bench` on a few requests: every case runs in every round,
every span is stored, and each case is reported as the median of its rounds."""

from __future__ import annotations

import statistics
from pathlib import Path

import orjson
import pytest

from benchmarks.otlp_bench import SPANS_PER_BODY, main


@pytest.mark.slow
def test_otlp_bench_reports_medians_of_alternating_rounds(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["--requests", "3", "--connections", "2", "--rounds", "2",
                 "--out", str(out)]) == 0
    result = orjson.loads((out / "otlp_receiver.json").read_bytes())
    cases = {(c["sink"], c["gzip"]) for c in result["cases"]}
    assert cases == {(s, z) for s in ("jsonl", "jsonl --no-fsync", "nats") for z in (False, True)}
    assert [r["round"] for r in result["runs"]] == [0] * 6 + [1] * 6
    for run in result["runs"]:
        assert run["spans"] == 3 * SPANS_PER_BODY and run["failed"] == 0
        assert run["receiver"]["records_stored"] == 3 * SPANS_PER_BODY
    for case in result["cases"]:
        rates = [r["spans_per_s"] for r in result["runs"]
                 if (r["sink"], r["gzip"]) == (case["sink"], case["gzip"])]
        assert case["spans_per_s"] == statistics.median(rates)
        assert case["spans_per_s_low"] == min(rates) and case["spans_per_s_high"] == max(rates)
    assert "2 rounds, 2 connections" in (out / "otlp_receiver.md").read_text()
