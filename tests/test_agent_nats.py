"""The reference agent on a real nats-server: it answers pause with its task state, calls
no tool while paused, goes on from the resume checkpoint, hot-loads the tool a real
build runner gates (pause -> registry.updated -> resume over NATS) and publishes its
telemetry; a registry notice never makes it load what the manifest does not list."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from binloop.agent.agent import AgentReport, ReferenceAgent
from binloop.agent.control_listener import ControlChannel
from binloop.core.schema import validate_record
from binloop.nats.jetstream import connect, ensure_telemetry_stream, telemetry_stream_spec
from binloop.nats.link import NatsLink
from binloop.nats.server import NatsServer
from binloop.nats.subjects import subject_token
from pipeline_runner.nats_pause_resume import NatsControl
from tests.agentkit import (
    MODE,
    copy_library,
    make_agent,
    read_log,
)
from tests.buildkit import event_of, runner_for

pytestmark = pytest.mark.slow
SESSION = "trip 7.é"  # escaped into one subject token


@pytest.fixture
def bridge(nats_server: NatsServer) -> Iterator[NatsLink]:
    link = NatsLink(nats_server.url, "test-runner")
    yield link
    link.close()


class Running:
    """An agent with its control channel, its job running in a thread."""

    def __init__(self, agent: ReferenceAgent, url: str, start: bool = True) -> None:
        self.agent = agent
        self.channel = ControlChannel(url, SESSION, agent)
        self.report: AgentReport | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        if start:
            self.thread.start()

    def _run(self) -> None:
        self.report = self.agent.run()

    def join(self, timeout: float = 60) -> AgentReport:
        self.thread.join(timeout)
        assert self.report is not None, "the agent did not finish"
        return self.report

    def close(self) -> None:
        self.channel.close()
        self.agent.telemetry.close()
        self.agent.registry.close()


def wait_until(check: Callable[[], bool], timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


def control(bridge: NatsLink, action: str, payload: dict[str, Any]) -> Any:
    subject = f"bin.control.{subject_token(SESSION)}.{action}"
    if action == "pause":
        reply = bridge.run(bridge.nc.request(subject, orjson.dumps(payload), timeout=10))
        return orjson.loads(reply.data)
    bridge.run(bridge.nc.publish(subject, orjson.dumps(payload)))
    return None


def test_pause_holds_the_tool_calls_and_resume_goes_on_from_the_checkpoint(
        nats_server: NatsServer, bridge: NatsLink, gated: tuple[Path, str],
        tmp_path: Path) -> None:
    log = tmp_path / "t.jsonl"
    agent, _, _ = make_agent(copy_library(gated[0], tmp_path / "library"), log,
                             session=SESSION, latency_s=0.05)
    running = Running(agent, nats_server.url)
    try:
        assert wait_until(lambda: log.exists() and len(read_log(log)) >= 4)
        state = control(bridge, "pause", {"build_id": "b-1", "tool": "book_reservation",
                                          "failure_mode": MODE})
        assert state["task"] == "book-group-trips" and state["session_id"] == SESSION
        assert state["tools"] == [gated[1]]
        calls_when_paused = len(read_log(log))
        time.sleep(0.6)  # a dozen calls' worth of time: none may happen
        assert len(read_log(log)) == calls_when_paused and agent.gate.paused
        # the checkpoint says the remaining bookings were made elsewhere: nothing is left
        checkpoint = {**state, "next": 7, "current": None, "pending": [],
                      "done": [*state["done"], {"booking": 6, "retried": False,
                                                "reservation_id": "FROM-CHECKPOINT",
                                                "total": 0}]}
        control(bridge, "resume", {"build_id": "b-1", "session_id": SESSION,
                                   "state": checkpoint, "answered": True})
        report = running.join()
    finally:
        running.close()
    assert report.ok and len(read_log(log)) == calls_when_paused
    assert agent.state.done[-1]["reservation_id"] == "FROM-CHECKPOINT"
    assert report.pauses[0]["build_id"] == "b-1" and report.pauses[0]["restored"]


def test_a_real_build_pauses_reloads_and_resumes_the_agent(
        nats_server: NatsServer, bridge: NatsLink, tmp_path: Path) -> None:
    url = nats_server.url

    async def make_stream() -> None:
        nc = await connect(url, "test", 10)
        spec = telemetry_stream_spec("TELEMETRY", "telemetry", 2)
        await ensure_telemetry_stream(nc.jetstream(), spec)
        await nc.close()

    asyncio.run(make_stream())
    log, library = tmp_path / "t.jsonl", tmp_path / "library"
    agent, telemetry, _ = make_agent(library, log, nats_url=url, session=SESSION,
                                     latency_s=0.01, wait_for_tools_s=60)
    running = Running(agent, url)
    try:
        assert wait_until(lambda: len(agent.state.pending) >= 3)
        failures = [validate_record(r) for r in read_log(log) if r["outcome"] == "failure"]
        result = runner_for(library, control=NatsControl(bridge, 10.0)).build(
            event_of(failures[:3]))
        assert result.outcome == "gated", result.reason
        report = running.join()
        assert telemetry.flush(10)
    finally:
        running.close()
    name = result.tool["name"] if result.tool else ""
    pause = next(s for s in result.stages if s.stage == "pause")
    assert pause.detail["answered"]
    assert report.ok, report.reason
    assert [r["loaded"] for r in report.reloads] == [[name]]
    assert report.reloads[0]["why"] == "registry.updated"
    assert report.pauses[0]["build_id"] == result.build_id and report.pauses[0]["restored"]
    records = read_log(log)
    assert sum(r["tool"] == name and r["outcome"] == "success" for r in records) >= 2
    retried = [d["booking"] for d in agent.state.done if d["retried"]]
    assert len(retried) >= 3 and len(agent.state.done) == 7
    assert stream_messages(url) == len(records)


def stream_messages(url: str) -> int:
    async def count() -> int:
        nc = await connect(url, "test", 10)
        info = await nc.jetstream().stream_info("TELEMETRY")
        await nc.close()
        return int(info.state.messages)

    return asyncio.run(count())


def test_a_registry_notice_loads_only_what_the_manifest_lists(
        nats_server: NatsServer, bridge: NatsLink, gated: tuple[Path, str],
        tmp_path: Path) -> None:
    library, marker = tmp_path / "library", tmp_path / "imported"
    rogue = library / "tools" / "rogue_tool" / "v1"
    rogue.mkdir(parents=True)
    (rogue / "tool.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
                                   "NAME = 'rogue_tool'\ndef run(params, invoke=None):\n"
                                   "    return {}\n")
    agent, _, registry = make_agent(library, tmp_path / "t.jsonl", session=SESSION)
    running = Running(agent, nats_server.url, start=False)
    try:
        notice = {"version": 1, "tool": {"name": "rogue_tool", "version": 1,
                                         "path": "tools/rogue_tool/v1", "target": "python"}}
        bridge.run(bridge.nc.publish("bin.registry.updated", orjson.dumps(notice)))
        # then the real tool arrives: once it is loaded, the first notice was handled
        shutil.copytree(gated[0] / "tools", library / "tools", dirs_exist_ok=True)
        shutil.copy(gated[0] / "manifest.json", library / "manifest.json")
        version = orjson.loads((library / "manifest.json").read_bytes())["version"]
        bridge.run(bridge.nc.publish("bin.registry.updated", orjson.dumps(
            {"version": version, "tool": {"name": gated[1]}})))
        assert wait_until(lambda: gated[1] in registry.tools)
        loaded = set(registry.tools)
    finally:
        running.close()
    assert loaded == {gated[1]} and not marker.exists()
    assert all("rogue_tool" not in r["loaded"] for r in agent.report.reloads)
