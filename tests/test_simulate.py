"""The seeded telemetry simulator: valid records, exact ids, ground truth, profiles."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import polars as pl
import pytest

from binloop.cli import main
from binloop.core.errors import EX_USAGE
from binloop.core.schema import parse_record, validate_record
from binloop.sim.simulate import SimParams, record_lines, simulate, truth_path, write_simulation

SMALL = SimParams(sessions=80, pairs=8, seed=7)


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    write_simulation(SMALL, tmp_path / "a.jsonl")
    write_simulation(SMALL, tmp_path / "b.jsonl")
    write_simulation(SimParams(sessions=80, pairs=8, seed=8), tmp_path / "c.jsonl")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert (tmp_path / "a.jsonl").read_bytes() != (tmp_path / "c.jsonl").read_bytes()


def test_every_record_is_valid_with_its_content_hash_as_id(tmp_path: Path) -> None:
    write_simulation(SMALL, tmp_path / "t.jsonl")
    lines = _lines(tmp_path / "t.jsonl")
    now_ms = time.time() * 1000
    ids = set()
    for line in lines:
        rec = parse_record(line)
        assert rec["ts"] < now_ms
        body = orjson.loads(line)
        given = body.pop("id")
        assert validate_record(body)["id"] == given  # the id is record_id's content hash
        ids.add(given)
    assert len(ids) == len(lines)


def test_timestamps_arrive_in_order_and_sessions_overlap(tmp_path: Path) -> None:
    frame = simulate(SMALL).frame
    assert frame["ts"].is_sorted()
    # a fleet: some session starts before the previous one has ended
    spans = frame.group_by("session_id").agg(first=pl.col("ts").min(), last=pl.col("ts").max())
    spans = spans.sort("session_id")
    assert (spans["first"].slice(1) < spans["last"].slice(0, spans.height - 1)).any()


def test_truth_lists_the_injected_pairs_with_their_counts(tmp_path: Path) -> None:
    truth = write_simulation(SMALL, tmp_path / "t.jsonl")
    assert truth == orjson.loads(truth_path(tmp_path / "t.jsonl").read_bytes())
    assert len(truth["pairs"]) == 8
    records = [parse_record(line) for line in _lines(tmp_path / "t.jsonl")]
    assert truth["records"] == len(records)
    for pair in truth["pairs"]:
        failures = [r for r in records if (r["tool"], r["failure_mode"]) ==
                    (pair["tool"], pair["failure_mode"])]
        assert len(failures) == pair["failures"]  # noise never uses an injected key
        assert len({r["session_id"] for r in failures}) == pair["sessions_hit"]
        assert all(r["session_id"] >= pair["onset_session"] for r in failures)
        assert all(r["outcome"] in ("failure", "timeout") for r in failures)
        assert SMALL.rate_min <= pair["rate"] <= SMALL.rate_max


def test_outcomes_errors_and_secrets_look_like_telemetry(tmp_path: Path) -> None:
    write_simulation(SimParams(sessions=200, pairs=10, seed=3), tmp_path / "t.jsonl")
    records = [parse_record(line) for line in _lines(tmp_path / "t.jsonl")]
    outcomes = {r["outcome"] for r in records}
    assert outcomes == {"success", "failure", "timeout", "cancelled"}
    for r in records:
        # a failure without a mode carries no text either: nothing to infer a mode from
        assert ("error" in r) == (r["outcome"] in ("failure", "timeout")
                                  and r["failure_mode"] is not None)
        if r["outcome"] == "timeout":
            assert r["failure_mode"] is not None and r["failure_mode"].startswith("TIMEOUT")
    assert any(r["outcome"] == "failure" and r["failure_mode"] is None for r in records)
    text = (tmp_path / "t.jsonl").read_text()
    for marker in ("Bearer sk-live-", "AKIA", "ghp_", "postgres://app:"):
        assert marker in text, marker
    assert sum("ghp_" in r.get("error", "") for r in records) > 0


def test_bulk_profile_spreads_failures_over_the_keys() -> None:
    frame = simulate(SimParams(profile="bulk", records=40_000, keys=200, seed=1)).frame
    assert frame.height == 40_000
    failures = frame.filter(pl.col("failure_mode").is_not_null())
    assert 0.04 < failures.height / frame.height < 0.06
    assert failures.select(pl.struct("tool", "failure_mode").n_unique()).item() == 200


def test_bulk_profile_gives_level_three_variants_past_tools_times_modes() -> None:
    frame = simulate(SimParams(profile="bulk", records=60_000, keys=1000, seed=1,
                               failure_rate=0.5)).frame
    failures = frame.filter(pl.col("failure_mode").is_not_null())
    assert failures.select(pl.struct("tool", "failure_mode").n_unique()).item() == 1000


def test_distinct_profile_gives_every_failure_a_new_key(tmp_path: Path) -> None:
    write_simulation(SimParams(profile="distinct", records=5000), tmp_path / "d.jsonl")
    records = [parse_record(line) for line in _lines(tmp_path / "d.jsonl")]
    keys = [(r["tool"], r["failure_mode"]) for r in records]
    assert len(records) == 5000 and len(set(keys)) == 5000
    assert all(r["outcome"] in ("failure", "timeout") for r in records)


def test_lines_are_plain_ascii_json() -> None:
    lines = record_lines(simulate(SimParams(sessions=30, pairs=3)).frame)
    for line in lines.to_list():
        assert line.isascii()
        assert orjson.dumps(orjson.loads(line), option=orjson.OPT_SORT_KEYS).decode() == line


@pytest.mark.parametrize("bad", [{"profile": "nope"}, {"rate_min": 0.0}, {"burst_min": 0.5},
                                 {"noise_retry": 1.0}, {"calls_max": 1, "calls_min": 5}])
def test_invalid_parameters_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SimParams(**bad)  # type: ignore[arg-type]


def test_cli_writes_file_and_truth(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sim.jsonl"
    assert main(["simulate", "--out", str(out), "--sessions", "40", "--pairs", "5",
                 "--seed", "2", "--call-gap-s", "2,5"]) == 0
    assert "injected pairs" in capsys.readouterr().err
    truth = orjson.loads(truth_path(out).read_bytes())
    assert truth["params"]["call_gap_s"] == [2, 5] and len(truth["pairs"]) == 5
    assert main(["simulate", "--out", str(out), "--noise-rate", "2"]) == EX_USAGE


def test_the_docs_document_every_simulator_parameter() -> None:
    import dataclasses

    section = (Path(__file__).resolve().parents[1] / "docs" / "simulator.md").read_text()
    for f in dataclasses.fields(SimParams):
        assert f"`{f.name}`" in section, f.name


def test_text_modes_write_error_texts_and_an_inferred_truth(tmp_path: Path) -> None:
    """`modes=text`: no failure_mode in the file, the texts kept; the truth lists the keys
    those texts infer to, and a sweep of the file finds them."""
    from binloop.core.classify import classify

    given = write_simulation(SimParams(sessions=200, pairs=10, seed=3), tmp_path / "g.jsonl")
    text = write_simulation(SimParams(sessions=200, pairs=10, seed=3, modes="text"),
                            tmp_path / "t.jsonl")
    records = [parse_record(line) for line in _lines(tmp_path / "t.jsonl")]
    assert all(r["failure_mode"] is None for r in records)
    failed = [r for r in records if "error" in r]
    assert len(failed) == sum(1 for r in map(parse_record, _lines(tmp_path / "g.jsonl"))
                              if "error" in r)
    assert {p["given_mode"] for p in text["pairs"]} == {p["failure_mode"] for p in given["pairs"]}
    inferred = {(r["tool"], classify(r["error"], r["outcome"]).failure_mode) for r in failed}
    assert {(p["tool"], p["failure_mode"]) for p in text["pairs"]} <= inferred
