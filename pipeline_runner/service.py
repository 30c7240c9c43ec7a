"""The build service: BINEvents in, builds in the background, results and re-arms out.

It wires a :class:`~pipeline_runner.queue.BuildQueue` (durable, bounded, idempotent on
`event_id`, worker pool) to a :class:`~pipeline_runner.runner.BuildRunner`, and hands
every result to a :class:`ResultSink` (NATS in the live job, a JSONL log otherwise). A
build that gates no tool schedules a re-arm of its key after a back-off
(:mod:`pipeline_runner.rearm`); so does a tool quarantined by its uses, since its key
is no longer answered. Live telemetry goes through :meth:`BuildService.observe`, which
counts the uses of library tools (promotion, quarantine).

Used in-process by `binloop run` (through `sinks.build_runner`) and by the separate
`binloop runner` service.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import orjson

from binloop.core.config import Config
from binloop.core.events import BINEvent
from binloop.core.schema import ToolInvocation
from binloop.library import manifest as mf
from binloop.ops import metrics
from binloop.replay.jsonl import JsonlFileWriter
from pipeline_runner.factory import make_runner, policy_of
from pipeline_runner.lifecycle import StatusChange, apply_telemetry
from pipeline_runner.pause_resume import AgentControl
from pipeline_runner.queue import BuildQueue, Submitted
from pipeline_runner.rearm import RearmScheduler
from pipeline_runner.runner import BuildResult

log = logging.getLogger("binloop.builds")


class ResultSink(Protocol):
    def build_result(self, event: BINEvent, result: BuildResult) -> None: ...

    def rearm(self, record: dict[str, Any]) -> None: ...

    def status_change(self, change: StatusChange) -> None: ...


class LogResultSink:
    """Results, re-arms and status changes as JSON lines in a file (or just the log)."""

    def __init__(self, path: Path | None = None) -> None:
        self._writer = JsonlFileWriter(path) if path is not None else None
        self.records: list[dict[str, Any]] = []

    def _emit(self, record: dict[str, Any]) -> None:
        record = {"ts": int(time.time() * 1000), **record}
        self.records.append(record)
        if self._writer is not None:
            self._writer.write([orjson.dumps(record, default=str)])

    def build_result(self, event: BINEvent, result: BuildResult) -> None:
        self._emit(result_message(event, result))

    def rearm(self, record: dict[str, Any]) -> None:
        self._emit({"type": "rearm", **record})

    def status_change(self, change: StatusChange) -> None:
        self._emit({"type": "status", **status_message(change)})


def result_message(event: BINEvent, result: BuildResult) -> dict[str, Any]:
    """A build's result as published: the event's key and epoch, and the outcome."""
    summary = result.summary()
    return {"type": "result", "event_id": event["event_id"], "tool": event["tool"],
            "failure_mode": event["failure_mode"], "arm_epoch": event["arm_epoch"],
            "session_id": event["session_id"], "outcome": result.outcome,
            "reason": result.reason, "build_id": result.build_id, "built": result.tool,
            "manifest_version": result.manifest_version, "stages": summary["stages"]}


def status_message(change: StatusChange) -> dict[str, Any]:
    return {"name": change.name, "version": change.version, "from": change.old,
            "to": change.new, "tool": change.answers["tool"],
            "failure_mode": change.answers["failure_mode"], "arm_epoch": change.arm_epoch,
            "manifest_version": change.manifest_version}


class BuildService:
    def __init__(self, config: Config, control: AgentControl | None = None,
                 results: ResultSink | None = None) -> None:
        self.config = config
        self.runner = make_runner(config, control)
        self.library = self.runner.library
        state = Path(config.build_state_dir) if config.build_state_dir else self.library.state_dir
        self.results: ResultSink = results or LogResultSink()
        self.queue = BuildQueue(state / "queue", self.runner.build,
                                workers=config.build_workers, max_pending=config.build_queue_max,
                                on_result=self._on_result)
        self.rearms = RearmScheduler(state / "rearm", self.results.rearm,
                                     config.rearm_backoff / 1000, config.rearm_backoff_max / 1000)
        self.policy = policy_of(config)

    def start(self) -> BuildService:
        self.library.recover()
        self.rearms.start()
        self.queue.start()
        metrics.track_build_queue(self.queue.depth)
        return self

    def stop(self, timeout: float | None = None) -> None:
        self.queue.stop(timeout)
        self.rearms.stop()

    def submit(self, event: Any) -> Submitted:
        """Queue a BINEvent (returns at once; see BuildQueue.submit)."""
        return self.queue.submit(event)

    def answered_keys(self) -> set[tuple[str, str]]:
        """Keys the library already answers: the detector starts with them disarmed."""
        return mf.answered_keys(self.library.read())

    def observe(self, records: Iterable[ToolInvocation]) -> list[StatusChange]:
        """Count the uses of library tools among live records; publish status changes."""
        changes = apply_telemetry(self.library, records, self.policy)
        for change in changes:
            self.results.status_change(change)
            if change.new == "quarantined":
                self._rearm_quarantined(change)
        return changes

    def _on_result(self, event: BINEvent, result: BuildResult) -> None:
        metrics.record_build(result.outcome, sum(s.duration_ms for s in result.stages) / 1000
                             if result.stages else None)
        self.results.build_result(event, result)
        self.rearms.schedule(event, result)
        log.info("build %s of %s/%s: %s %s", result.build_id, event["tool"],
                 event["failure_mode"], result.outcome, result.reason.splitlines()[0]
                 if result.reason else "")

    def _rearm_quarantined(self, change: StatusChange) -> None:
        # A stable id of this quarantine, in the form every event id has (file names
        # derive from event ids).
        quarantine = f"quarantine-{change.name}-v{change.version}".encode()
        pseudo: Any = {"event_id": hashlib.sha256(quarantine).hexdigest(),
                       "tool": change.answers["tool"],
                       "failure_mode": change.answers["failure_mode"],
                       "arm_epoch": change.arm_epoch}
        self.rearms.schedule(pseudo, BuildResult("", pseudo["event_id"], "rolled_back",
                                                 f"tool {change.name} quarantined"))
