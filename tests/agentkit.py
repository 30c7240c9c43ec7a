"""Helpers for the reference agent's tests: its real failures, libraries built from them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson

from binloop.agent.agent import AgentSettings, ReferenceAgent
from binloop.agent.airline import AirlineService
from binloop.agent.control_listener import PauseGate
from binloop.agent.registry import ToolRegistry
from binloop.core.events import BINEvent
from binloop.core.schema import validate_record
from binloop.nats.telemetry_client import TelemetryClient
from pipeline_runner.pause_resume import AgentControl
from pipeline_runner.targets import Target
from tests.buildkit import event_of, runner_for

MODE = "ARGS.payment_total_mismatch"


def read_log(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def make_agent(library: Path, log: Path, *, nats_url: str | None = None,
               target: str = "python", session: str = "trip-test", latency_s: float = 0.0,
               wait_for_tools_s: float = 0.05, work_dir: Path | None = None
               ) -> tuple[ReferenceAgent, TelemetryClient, ToolRegistry]:
    telemetry = TelemetryClient(log, nats_url)
    registry = ToolRegistry(library, target, work_dir)
    agent = ReferenceAgent(AgentSettings(session, wait_for_tools_s=wait_for_tools_s),
                           telemetry, registry, AirlineService(latency_s), PauseGate(30))
    return agent, telemetry, registry


def agent_failure_event(tmp: Path) -> BINEvent:
    """The BINEvent for the agent's own failing bookings (no tool: it gives up waiting)."""
    agent, telemetry, registry = make_agent(tmp / "empty-library", tmp / "failures.jsonl")
    try:
        report = agent.run()
    finally:
        telemetry.close()
        registry.close()
    assert not report.ok and len(agent.state.pending) == 4, report
    failures = [validate_record(r) for r in read_log(tmp / "failures.jsonl")
                if r["outcome"] == "failure"]
    return event_of(failures[:3])


def build_library(library: Path, event: BINEvent, target: Target | None = None,
                  control: AgentControl | None = None) -> dict[str, Any]:
    """Gate the tool for `event` into `library`; returns the gated tool."""
    result = runner_for(library, target=target, control=control).build(event)
    assert result.outcome == "gated", result.reason
    assert result.tool is not None
    return result.tool


def copy_library(template: Path, dest: Path) -> Path:
    shutil.copytree(template, dest, ignore=shutil.ignore_patterns(".state"))
    return dest
