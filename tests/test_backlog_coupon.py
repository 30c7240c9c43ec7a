"""Backlog model (BIN vs deferral) and the coupon-collector check."""

from __future__ import annotations

import random
from fractions import Fraction
from pathlib import Path

import orjson
import pytest

from benchmarks.backlog import BacklogParams, _sessions_to_trigger, run_once, simulate, summarise
from benchmarks.coupon import expected_any
from benchmarks.coupon import simulate as simulate_coupon
from binloop.cli import main


def test_expected_any_small_cases_by_hand() -> None:
    assert expected_any(5, 1) == 1
    assert expected_any(2, 2) == Fraction(5, 2)  # 2 w.p. 1/2, else 3
    assert expected_any(3, 2) == Fraction(26, 9)  # 1 + 1 + 2/3 + 2/9
    assert expected_any(1, 4) == 4


@pytest.mark.parametrize(("k", "theta"), [(5, 3), (20, 3), (10, 4)])
def test_exact_and_simulated_agree_and_3k_is_the_given_mode_reading(k: int, theta: int) -> None:
    exact = float(expected_any(k, theta))
    assert simulate_coupon(k, theta, 3000, "any") == pytest.approx(exact, rel=0.05)
    assert simulate_coupon(k, theta, 1500, "given") == pytest.approx(theta * k, rel=0.08)
    assert exact < theta * k < simulate_coupon(k, theta, 200, "all")


def test_trigger_wait_is_theta_sessions_at_rate_one() -> None:
    rng = random.Random(1)
    assert _sessions_to_trigger(rng, 1.0, 3) == 3
    waits = [_sessions_to_trigger(rng, 0.25, 2) for _ in range(4000)]
    assert sum(waits) / len(waits) == pytest.approx(8, rel=0.06)  # θ / rate


def test_certain_builds_leave_no_bin_backlog() -> None:
    bin_curve, deferral = run_once(BacklogParams(build_success=1.0), seed=3)
    assert set(bin_curve) == {0}
    assert deferral == sorted(deferral) and deferral[-1] > 0  # nothing built in the horizon


def test_builds_that_always_fail_make_bin_a_deferral() -> None:
    bin_curve, deferral = run_once(BacklogParams(build_success=0.0), seed=4)
    assert bin_curve == deferral


def test_batch_deferral_empties_at_each_batch_when_fixes_succeed() -> None:
    params = BacklogParams(defer_period=20, build_success=1.0, sessions=60)
    _, deferral = run_once(params, seed=5)
    assert deferral[19] == 0 and deferral[39] == 0  # end of sessions 20 and 40
    assert max(deferral) > 0


def test_summary_reads_peak_and_final_level() -> None:
    result = summarise(simulate(BacklogParams(build_success=0.5), runs=30), 100)
    assert result["bin"]["peak_mean"] >= result["bin"]["at_mean"] > 0
    assert result["deferral"]["at_mean"] > result["bin"]["at_mean"]


def test_cli_benches_write_their_reports(tmp_path: Path) -> None:
    assert main(["bench", "backlog", "--out", str(tmp_path / "b"), "--runs", "20",
                 "--sessions", "60"]) == 0
    data = orjson.loads((tmp_path / "b" / "backlog.json").read_bytes())
    assert data["params"]["sessions"] == 60 and len(data["grid"]) == 24
    assert (tmp_path / "b" / "backlog.png").stat().st_size > 0
    assert "## Verdict" in (tmp_path / "b" / "backlog.md").read_text()
    assert main(["bench", "coupon", "--out", str(tmp_path / "c"), "--runs", "40"]) == 0
    rows = orjson.loads((tmp_path / "c" / "coupon.json").read_bytes())
    assert {(r["theta"], r["k"]) for r in rows} >= {(3, 10), (5, 100)}
