"""Issue 13's clock-skew case, in every engine: one future-dated record of an unrelated tool
(inside the 1-day future-skew allowance) changes no other key's events; one beyond the
allowance is a dead letter."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from binloop.cli.commands.run import run_live
from binloop.core.window import WindowSpec
from binloop.nats.server import NatsServer
from tests.engine_runs import (
    engine_config,
    run_bytewax_on,
    run_polars_on,
    run_reference_on,
    same_as_reference,
)
from tests.nats_fixtures import live_config, publish
from tests.test_live_nats import assert_same_counters, assert_same_events, events_in, reference

HOUR = 3_600_000
# two hours ago: a record 23 h ahead of the stream is within the 1-day allowance
NOW = int(time.time() * 1000) - 2 * HOUR


def _lines(skew_ms: int | None, position: int) -> list[bytes]:
    """24 failures of 8 keys (3 each, a minute apart, in 8 sessions) that fire 8 events at
    θ=3, and one record of another tool dated `skew_ms` ahead, at `position`."""
    now = NOW
    lines = [orjson.dumps({"session_id": f"s{i % 8}", "ts": now + i * 60_000,
                           "tool": f"tool{i % 8}", "outcome": "failure",
                           "failure_mode": "NETWORK.reset", "args": {"i": i}})
             for i in range(24)]
    if skew_ms is not None:
        skewed = orjson.dumps({"session_id": "x", "ts": now + skew_ms, "tool": "clock_ahead",
                               "outcome": "failure", "failure_mode": "TIMEOUT", "args": {}})
        lines.insert(position, skewed)
    return lines


@pytest.mark.parametrize("window", ["session", "global", "sliding:1h"])
def test_a_record_a_day_ahead_changes_no_other_key_s_events(tmp_path: Path,
                                                             window: str) -> None:
    base = _lines(None, 0)
    (tmp_path / "base.jsonl").write_bytes(b"\n".join(base) + b"\n")
    expected = run_reference_on(engine_config(tmp_path / "base.jsonl", tmp_path / "base",
                                              theta=3, window=WindowSpec.parse(window)))
    assert len(expected.events) == 8
    for position in (0, 3, 12):
        path = tmp_path / f"skew{position}.jsonl"
        path.write_bytes(b"\n".join(_lines(23 * HOUR, position)) + b"\n")
        settings = {"theta": 3, "window": WindowSpec.parse(window)}
        reference = run_reference_on(engine_config(path, tmp_path / f"r{position}", **settings))
        assert reference.events == expected.events
        assert run_polars_on(engine_config(path, tmp_path / f"p{position}", **settings)) \
            == reference
        same_as_reference(run_bytewax_on(engine_config(path, tmp_path / f"b{position}",
                                                       **settings)), reference)


def test_a_record_beyond_the_allowance_is_a_dead_letter(tmp_path: Path) -> None:
    path = tmp_path / "far.jsonl"
    path.write_bytes(b"\n".join(_lines(2 * 24 * HOUR + 2 * HOUR, 5)) + b"\n")
    reference = run_reference_on(engine_config(path, tmp_path / "r", theta=3))
    assert len(reference.events) == 8 and len(reference.dead) == 1
    assert "in the future" in reference.dead[0]["reason"]
    assert run_polars_on(engine_config(path, tmp_path / "p", theta=3)) == reference


@pytest.mark.slow
def test_the_live_job_agrees_on_a_record_a_day_ahead(nats_server: NatsServer,
                                                     tmp_path: Path) -> None:
    """The same case through a real nats-server and `binloop run`: the reference's events
    and counters, the skewed record confined to its own key."""
    lines = _lines(23 * HOUR, 3)
    publish(nats_server.url, lines)
    config = live_config(nats_server.url, tmp_path, theta="3", window="session")
    summary = run_live(config)
    expected, ref_summary = reference(config, lines, tmp_path)
    assert len(expected) == 8
    assert_same_events(events_in(tmp_path / "events.jsonl"), expected)
    assert_same_counters(summary, ref_summary)
