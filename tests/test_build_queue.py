"""The durable build queue and the re-arm scheduler (no NATS needed)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import orjson

from binloop.core.events import BINEvent
from pipeline_runner.queue import BuildQueue
from pipeline_runner.rearm import RearmScheduler, backoff_s
from pipeline_runner.runner import BuildResult
from tests.test_offline_designer import scenario_event


class SlowBuilds:
    """A build function that blocks until released (to observe the queue's behaviour)."""

    def __init__(self, outcome: str = "gated") -> None:
        self.release = threading.Event()
        self.built: list[str] = []
        self.outcome = outcome

    def __call__(self, event: BINEvent) -> BuildResult:
        self.release.wait(30)
        self.built.append(event["event_id"])
        return BuildResult("b", event["event_id"], self.outcome)  # type: ignore[arg-type]


def events(n: int) -> list[BINEvent]:
    base = scenario_event("NETWORK")
    return [{**base, "event_id": f"{i:064x}", "arm_epoch": i} for i in range(n)]  # type: ignore[misc]


def test_submit_never_waits_for_a_build_and_is_idempotent(tmp_path: Path) -> None:
    builds, results = SlowBuilds(), []
    queue = BuildQueue(tmp_path / "q", builds, workers=1,
                       on_result=lambda e, r: results.append((e["event_id"], r.outcome))).start()
    first, second = events(2)
    assert queue.submit(first) == "queued" and queue.submit(second) == "queued"
    assert builds.built == []  # both submits returned while the first build is still blocked
    assert queue.submit(first) == "duplicate"
    builds.release.set()
    assert queue.wait_idle(30)
    assert builds.built == [first["event_id"], second["event_id"]]
    assert queue.submit(first) == "duplicate"  # done is remembered on disk
    assert sorted(results) == sorted([(first["event_id"], "gated"), (second["event_id"], "gated")])
    queue.stop()
    done = orjson.loads((tmp_path / "q/done" / f"{first['event_id']}.json").read_bytes())
    assert done["result"]["outcome"] == "gated" and done["event"]["tool"] == "fetch_url"


def test_pending_events_survive_a_restart(tmp_path: Path) -> None:
    stalled = SlowBuilds()
    queue = BuildQueue(tmp_path / "q", stalled, workers=1)  # never started: nothing runs
    for event in events(3):
        assert queue.submit(event) == "queued"
    builds = SlowBuilds()
    builds.release.set()
    restarted = BuildQueue(tmp_path / "q", builds, workers=2).start()
    assert restarted.wait_idle(30)
    restarted.stop()
    assert sorted(builds.built) == sorted(e["event_id"] for e in events(3))
    assert not list((tmp_path / "q/pending").iterdir())


def test_a_full_queue_defers_instead_of_dropping(tmp_path: Path) -> None:
    builds, results = SlowBuilds(), []
    queue = BuildQueue(tmp_path / "q", builds, workers=1, max_pending=2,
                       on_result=lambda e, r: results.append((e["event_id"], r.reason))).start()
    batch = events(3)
    assert [queue.submit(e) for e in batch] == ["queued", "queued", "deferred"]
    assert results == [(batch[2]["event_id"], "deferred: the build queue is full")]
    assert queue.submit({"event_id": "x"}) == "invalid"
    builds.release.set()
    assert queue.wait_idle(30)
    queue.stop()
    assert queue.stats.as_dict()["deferred"] == 1


def test_a_crashing_build_is_an_error_result(tmp_path: Path) -> None:
    def crash(event: BINEvent) -> BuildResult:
        raise RuntimeError("runner bug")

    results: list[Any] = []
    queue = BuildQueue(tmp_path / "q", crash, on_result=lambda e, r: results.append(r)).start()
    queue.submit(events(1)[0])
    assert queue.wait_idle(30)
    queue.stop()
    assert results[0].outcome == "error" and "runner bug" in results[0].reason


def test_failed_builds_rearm_after_a_growing_backoff(tmp_path: Path) -> None:
    published: list[dict[str, Any]] = []
    scheduler = RearmScheduler(tmp_path / "rearm", published.append, base_s=10, max_s=25)
    first, second, gated = events(3)
    assert scheduler.schedule(first, BuildResult("", "", "rolled_back", "no design")) == 10
    assert scheduler.schedule(second, BuildResult("", "", "error")) == 20
    assert scheduler.schedule(gated, BuildResult("", "", "gated")) is None
    assert backoff_s(7, 10, 25) == 25
    now = int(time.time() * 1000)
    assert 9 < scheduler.publish_due(now) <= 10  # nothing due yet
    assert published == []
    # a restart keeps the schedule; later, both are due
    again = RearmScheduler(tmp_path / "rearm", published.append, base_s=10, max_s=25)
    assert again.publish_due(now + 60_000) is None
    assert [(p["fired_epoch"], p["tool"]) for p in published] == [(0, "fetch_url"),
                                                                  (1, "fetch_url")]
    assert again.pending() == []


def test_the_scheduler_thread_publishes_when_due(tmp_path: Path) -> None:
    published: list[dict[str, Any]] = []
    scheduler = RearmScheduler(tmp_path / "rearm", published.append, base_s=0.2).start()
    scheduler.schedule(events(1)[0], BuildResult("", "", "rolled_back"))
    deadline = time.monotonic() + 20
    while not published and time.monotonic() < deadline:
        time.sleep(0.05)
    scheduler.stop()
    assert len(published) == 1


def test_the_service_builds_and_rearms_quarantined_keys(tmp_path: Path) -> None:
    from binloop.core.config import load_config
    from pipeline_runner.service import BuildService, LogResultSink
    from tests.buildkit import use

    config = load_config({"library": str(tmp_path / "lib"), "rearm_backoff": "1h"}, env={})
    results = LogResultSink(tmp_path / "results.jsonl")
    service = BuildService(config, results=results).start()
    try:
        event = scenario_event("NOTFOUND")
        assert service.submit(event) == "queued"
        assert service.queue.wait_idle(120)
        (built,) = [r for r in results.records if r["type"] == "result"]
        assert built["outcome"] == "gated" and built["tool"] == event["tool"]
        name = built["built"]["name"]
        assert service.answered_keys() == {(event["tool"], event["failure_mode"])}
        changes = service.observe([use(name, "failure", 1), use(name, "failure", 2)])
        assert [(c.name, c.new) for c in changes] == [(name, "quarantined")]
        assert service.answered_keys() == set()
        (pending,) = service.rearms.pending()
        assert (pending["tool"], pending["fired_epoch"]) == (event["tool"], 0)
        assert [r["type"] for r in results.records] == ["result", "status"]
    finally:
        service.stop()
    logged = [orjson.loads(line) for line in (tmp_path / "results.jsonl").read_bytes().split(b"\n")
              if line]
    assert [r["type"] for r in logged] == ["result", "status"]
