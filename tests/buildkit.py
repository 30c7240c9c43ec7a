"""Helpers for build-runner tests: real BINEvents, runners, library snapshots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from binloop.core.detection import DetectionParams, detect
from binloop.core.events import BINEvent
from binloop.core.schema import ToolInvocation, validate_record
from binloop.library.store import ToolLibrary
from pipeline_runner.designers import Designer
from pipeline_runner.designers.offline import OfflineDesigner
from pipeline_runner.pause_resume import AgentControl, TaskState
from pipeline_runner.runner import BuildRunner, StageTimeouts
from pipeline_runner.sandbox import Limits
from pipeline_runner.targets import Target, load_target

T0 = 1_700_000_000_000


def failing_calls(tool: str, mode: str, calls: list[tuple[dict[str, Any], str]],
                  session: int | str = 1, outcome: str = "failure",
                  duration_ms: int | None = None) -> list[ToolInvocation]:
    records = []
    for number, (args, error) in enumerate(calls):
        fields: dict[str, Any] = {"ts": T0 + number * 1000, "tool": tool, "failure_mode": mode,
                                  "session_id": session, "outcome": outcome, "args": args,
                                  "error": error}
        if duration_ms is not None:
            fields["duration_ms"] = duration_ms
        records.append(validate_record(fields))
    return records


def event_of(records: list[ToolInvocation]) -> BINEvent:
    """The BINEvent the detector fires for these records (θ = their number)."""
    events = detect(DetectionParams(theta=len(records)), records)
    assert len(events) == 1, events
    return events[0]


def use(tool: str, outcome: str, ts: int, **extra: Any) -> ToolInvocation:
    return validate_record({"ts": ts, "tool": tool, "failure_mode": None, "session_id": 9,
                            "outcome": outcome, "args": {}, **extra})


class RecordingControl:
    """An agent control that answers and records every request (a real in-process agent)."""

    def __init__(self, answer: TaskState | None = None) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.answer = answer if answer is not None else {"task": "book a flight", "step": 4}

    def pause(self, session_id: Any, reason: dict[str, Any]) -> TaskState | None:
        self.calls.append(("pause", session_id))
        return self.answer

    def registry_updated(self, manifest_version: int, tool: dict[str, Any] | None) -> None:
        self.calls.append(("registry.updated", manifest_version))

    def resume(self, session_id: Any, checkpoint: dict[str, Any]) -> None:
        self.calls.append(("resume", checkpoint))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.calls]


def quick_limits() -> Limits:
    return Limits(wall_s=60, cpu_s=60)


def python_target(test_wall_s: float = 60) -> Target:
    return load_target("python", check_limits=quick_limits(),
                       test_limits=Limits(wall_s=test_wall_s, cpu_s=int(test_wall_s) + 1))


def runner_for(library_dir: Path, designer: Designer | None = None, target: Target | None = None,
               control: AgentControl | None = None,
               timeouts: StageTimeouts | None = None) -> BuildRunner:
    return BuildRunner(ToolLibrary(library_dir), designer or OfflineDesigner(),
                       target or python_target(), control or RecordingControl(),
                       timeouts or StageTimeouts())
