"""The build runner on NATS: agent control, the runner service, and the whole loop in
`binloop run` (detect -> build -> re-arm -> fire again; promotions from live uses)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from nats.js.errors import NotFoundError

from binloop.cli.build_service import LiveBuilds, consume_events
from binloop.core.config import Config, load_config
from binloop.core.events import dumps_event
from binloop.library.store import ToolLibrary
from binloop.nats.jetstream import StreamSpec, connect, ensure_stream
from binloop.nats.link import NatsLink
from binloop.nats.server import NatsServer
from binloop.nats.subjects import MSG_ID_HEADER, event_subject, subject_token
from pipeline_runner.nats_pause_resume import NatsControl
from tests.buildkit import event_of, failing_calls, runner_for
from tests.nats_fixtures import publish
from tests.test_runner import payment_event

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
SESSION = "sess 1.é"  # escaped into one subject token


class Agent:
    """A real agent on NATS: answers pause with its task state, records what it gets."""

    def __init__(self, url: str, answer: bool = True) -> None:
        self.bridge = NatsLink(url, "test-agent")
        self.got: list[tuple[str, Any]] = []
        token = subject_token(SESSION)

        async def on_pause(msg: Any) -> None:
            self.got.append(("pause", orjson.loads(msg.data)))
            if answer:
                await msg.respond(orjson.dumps({"task": "rebook", "step": 7}))

        async def record(msg: Any) -> None:
            self.got.append((msg.subject, orjson.loads(msg.data)))

        async def subscribe() -> None:
            await self.bridge.nc.subscribe(f"bin.control.{token}.pause", cb=on_pause)
            await self.bridge.nc.subscribe(f"bin.control.{token}.resume", cb=record)
            await self.bridge.nc.subscribe("bin.registry.updated", cb=record)
            await self.bridge.nc.flush()

        self.bridge.run(subscribe())

    def wait_for(self, count: int, timeout: float = 20) -> list[tuple[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(self.got) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.got


@pytest.fixture
def bridge(nats_server: NatsServer) -> Iterator[NatsLink]:
    link = NatsLink(nats_server.url, "test-runner")
    yield link
    link.close()


def session_event() -> Any:
    return payment_event(session=SESSION)  # type: ignore[arg-type]


def test_pause_reload_resume_on_nats(nats_server: NatsServer, bridge: NatsLink,
                                     tmp_path: Path) -> None:
    agent = Agent(nats_server.url)
    try:
        result = runner_for(tmp_path / "lib", control=NatsControl(bridge, 5.0)).build(
            session_event())
        assert result.outcome == "gated", result.reason
        got = agent.wait_for(3)
    finally:
        agent.bridge.close()
    kinds = [kind for kind, _ in got]
    token = subject_token(SESSION)
    assert kinds == ["pause", "bin.registry.updated", f"bin.control.{token}.resume"]
    assert got[0][1]["tool"] == "book_reservation"
    manifest = ToolLibrary(tmp_path / "lib").read()
    assert got[1][1]["version"] == manifest["version"]
    assert got[1][1]["tool"]["name"] == result.tool["name"]
    checkpoint = got[2][1]
    assert checkpoint["state"] == {"task": "rebook", "step": 7} and checkpoint["answered"]
    assert orjson.loads(Path(checkpoint["path"]).read_bytes())["state"] == checkpoint["state"]


@pytest.mark.parametrize("agent_listens", [False, True])
def test_an_agent_that_does_not_answer_does_not_hold_the_build(
        nats_server: NatsServer, bridge: NatsLink, tmp_path: Path,
        agent_listens: bool) -> None:
    agent = Agent(nats_server.url, answer=False) if agent_listens else None
    try:
        result = runner_for(tmp_path / "lib", control=NatsControl(bridge, 0.5)).build(
            session_event())
    finally:
        if agent is not None:
            agent.bridge.close()
    assert result.outcome == "gated", result.reason
    pause = next(s for s in result.stages if s.stage == "pause")
    assert pause.detail["answered"] is False


def runner_config(url: str, tmp_path: Path, **settings: Any) -> Config:
    values = {"nats": url, "library": str(tmp_path / "lib"), "until_idle": "1.5",
              "rearm_backoff": "200ms", "pause_timeout": "300ms", **settings}
    return load_config({k: str(v) for k, v in values.items()}, env={})


def put_events(url: str, events: list[Any]) -> None:
    async def send() -> None:
        nc = await connect(url, "test-events", 10)
        js = nc.jetstream()
        await ensure_stream(js, StreamSpec("BIN_EVENTS", ("bin.events.>",)))
        for event in events:
            await js.publish(event_subject("bin.events", event["tool"], event["failure_mode"]),
                             dumps_event(event), headers={MSG_ID_HEADER: event["event_id"]})
        await nc.close()

    asyncio.run(send())


def builds_messages(url: str) -> list[tuple[str, Any]]:
    """(subject, payload) of every message in BIN_BUILDS (none while it does not exist)."""
    async def read() -> list[tuple[str, Any]]:
        nc = await connect(url, "test-reader", 10)
        try:
            js = nc.jetstream()
            try:
                info = await js.stream_info("BIN_BUILDS")
            except NotFoundError:
                return []
            if not info.state.messages:
                return []
            out = []
            for seq in range(info.state.first_seq, info.state.last_seq + 1):
                msg = await js.get_msg("BIN_BUILDS", seq)
                out.append((msg.subject or "", orjson.loads(msg.data or b"{}")))
            return out
        finally:
            await nc.close()

    return asyncio.run(read())


def test_runner_service_consumes_bin_events_durably(nats_server: NatsServer,
                                                    tmp_path: Path) -> None:
    gap = event_of(failing_calls("convert_currency", "TOOL_GAP", [
        ({"amount": 3}, "no such tool"), ({"amount": 4}, "no such tool")]))
    put_events(nats_server.url, [payment_event(), gap, payment_event()])  # a duplicate too
    config = runner_config(nats_server.url, tmp_path)
    builds = LiveBuilds(config).start()
    try:
        assert consume_events(config, builds, threading.Event()) == 2
        assert builds.service.queue.wait_idle(120)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(
                ".rearm." in s for s, _ in builds_messages(nats_server.url)):
            time.sleep(0.1)
    finally:
        builds.stop()
    messages = builds_messages(nats_server.url)
    results = {m["tool"]: m["outcome"] for s, m in messages if ".result." in s}
    assert results == {"book_reservation": "gated", "convert_currency": "rolled_back"}
    rearms = [m for s, m in messages if ".rearm." in s]
    assert [(r["tool"], r["fired_epoch"]) for r in rearms] == [("convert_currency", 0)]
    # a restarted runner resumes its durable consumer: nothing is built twice
    again = LiveBuilds(config).start()
    try:
        assert consume_events(config, again, threading.Event()) == 0
    finally:
        again.stop()
    assert len(ToolLibrary(tmp_path / "lib").read()["tools"]) == 1


def telemetry_lines(tool: str, mode: str | None, outcome: str, session: int, start: int,
                    count: int, error: str = "", args: dict[str, Any] | None = None
                    ) -> list[bytes]:
    return [orjson.dumps({"session_id": session, "ts": start + i * 1000, "tool": tool,
                          "failure_mode": mode, "outcome": outcome, "error": error,
                          "args": args if args is not None else {"i": i, "s": session}})
            for i in range(count)]


def run_job(url: str, tmp_path: Path, name: str, **settings: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = ["--nats", url, "--library", str(tmp_path / "lib"), "--theta", "2",
            "--until-idle", settings.pop("until_idle", "6s"), "--partitions", "2",
            "--rearm-backoff", "300ms", "--pause-timeout", "200ms",
            "--events-out", str(tmp_path / f"{name}-events.jsonl"),
            "--dead-letter", str(tmp_path / f"{name}-dead.jsonl")]
    for key, value in settings.items():
        args += [f"--{key.replace('_', '-')}", value]
    return subprocess.Popen([sys.executable, "-m", "binloop.cli", "run", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def fired_in(events_file: Path) -> list[tuple[str, int]]:
    """(tool, arm epoch) of each event the job wrote so far (whole lines only)."""
    if not events_file.exists():
        return []
    return [(e["tool"], e["arm_epoch"]) for e in
            map(orjson.loads, events_file.read_bytes().split(b"\n")[:-1]) if e]


def job_output(job: subprocess.Popen[str]) -> str:
    if job.poll() is None:
        job.kill()
    return (job.communicate(timeout=30)[0] or "")[-4000:]


def wait_until(check: Any, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def test_the_whole_loop_in_binloop_run(nats_server: NatsServer, tmp_path: Path) -> None:
    url, t0 = nats_server.url, 1_700_000_000_000
    payment = payment_event()
    calls = [orjson.dumps({k: v for k, v in rec.items() if k != "id"})
             for rec in payment["evidence"]]
    gap = telemetry_lines("convert_currency", "TOOL_GAP", "failure", 5, t0, 2,
                          "no such tool")
    publish(url, [*calls, *gap], partitions=2)
    job = run_job(url, tmp_path, "first")
    library = ToolLibrary(tmp_path / "lib")
    try:
        # the payment key is built; the gap key rolls back and is re-armed
        assert wait_until(lambda: any(".rearm." in s for s, _ in builds_messages(url))), \
            job_output(job)
        assert wait_until(lambda: len(library.read()["tools"]) == 1)
        name = next(iter(library.read()["tools"]))
        # After the re-arm the gap key fires again (epoch 1). The re-arm is on NATS before
        # the job has applied it, and failures that reach a key still disarmed are dropped
        # (as they must be), so pairs are published until one fires.
        def refired() -> bool:
            return ("convert_currency", 1) in fired_in(tmp_path / "first-events.jsonl")

        for attempt in range(6):
            later = telemetry_lines("convert_currency", "TOOL_GAP", "failure", 6,
                                    t0 + 60_000 + attempt * 2_000, 2, "no such tool")
            publish(url, later, partitions=2)
            if wait_until(refired, timeout=20):
                break
        assert refired(), job_output(job)
        # two uses promote the tool
        publish(url, telemetry_lines(name, None, "success", 7, t0 + 80_000, 2), partitions=2)
        assert wait_until(lambda: library.read()["tools"][name]["status"] == "stable")
        output, _ = job.communicate(timeout=180)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, output[-3000:]
    assert sorted(fired_in(tmp_path / "first-events.jsonl")) == \
        [("book_reservation", 0), ("convert_currency", 0), ("convert_currency", 1)]
    outcomes = sorted((m["tool"], m["arm_epoch"], m["outcome"]) for s, m in builds_messages(url)
                      if ".result." in s)
    assert outcomes == [("book_reservation", 0, "gated"), ("convert_currency", 0, "rolled_back"),
                        ("convert_currency", 1, "rolled_back")]
    statuses = [m for s, m in builds_messages(url) if ".status." in s]
    assert [(m["name"], m["to"]) for m in statuses] == [(name, "stable")]

    # a fresh job on the same stream starts with the library's keys disarmed
    more = telemetry_lines("book_reservation", "ARGS.payment_total_mismatch", "failure", 8,
                           t0 + 90_000, 3, "Error: payment amount does not add up")
    publish(url, more, partitions=2)
    second = run_job(url, tmp_path, "second", until_idle="3s")
    output, _ = second.communicate(timeout=180)
    assert second.returncode == 0, output[-3000:]
    refired = [orjson.loads(x) for x in
               (tmp_path / "second-events.jsonl").read_bytes().split(b"\n") if x]
    assert [e for e in refired if e["tool"] == "book_reservation"] == []
