"""The demo's reading of the loop: milestones from what it sees on NATS, and a timeline
line for each.

Milestones, in order: failures of the agent (counted per (tool, failure_mode)), the
BINEvent, the pause request to the agent's session, the registry notice of the gated
tool, the resume with the agent's checkpoint, the build result (stage timings), uses
of the new tool in telemetry, and its promotion to `stable`. :attr:`Progress.problem`
is set when the loop cannot close (a rolled-back build, a quarantined tool).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from binloop.core.config import default
from binloop.demo.observer import Seen
from binloop.demo.timeline import Timeline, fmt_ms, stages_line


@dataclass
class Progress:
    timeline: Timeline
    theta: int
    promote_after: int = default("promote_after")
    verbose: bool = False
    calls: int = 0
    failures: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    arrivals: dict[str, float] = field(default_factory=dict)  # telemetry record id -> time
    event: dict[str, Any] | None = None
    event_at: float | None = None
    detection_ms: float | None = None
    pause_at: float | None = None
    registry: dict[str, Any] | None = None
    registry_at: float | None = None
    resume: dict[str, Any] | None = None
    resume_at: float | None = None
    result: dict[str, Any] | None = None
    result_at: float | None = None
    last_call_at: float | None = None
    uses_ok: list[float] = field(default_factory=list)
    uses_failed: int = 0
    stable_at: float | None = None
    problem: str | None = None

    @property
    def tool_name(self) -> str | None:
        tool = (self.registry or {}).get("tool") or (self.result or {}).get("built")
        return tool.get("name") if isinstance(tool, dict) else None

    @property
    def closed(self) -> bool:
        """Gated, used successfully `promote_after` times, and stable."""
        return (self.result is not None and self.result.get("outcome") == "gated"
                and len(self.uses_ok) >= self.promote_after and self.stable_at is not None)

    def waiting_for(self) -> str:
        """The next milestone (to say what a timeout was waiting for)."""
        counted = max((len(v) for v in self.failures.values()), default=0)
        if self.event is None:
            return (f"the BINEvent ({counted} of θ={self.theta} failures of one "
                    "(tool, failure_mode) seen)" if counted else "the agent's first failure")
        if self.pause_at is None:
            return "the build runner's pause request"
        if self.registry is None:
            return "the build (design, build, check, test, gate) and the registry notice"
        if self.resume is None:
            return "the resume of the agent"
        if len(self.uses_ok) < self.promote_after:
            return f"{self.promote_after} successful uses of the tool ({len(self.uses_ok)} seen)"
        if self.result is None:
            return "the build result on bin.builds.result"
        return "the promotion of the tool to stable"

    def feed(self, seen: Seen) -> None:
        payload = seen.payload if isinstance(seen.payload, dict) else {}
        subject = seen.subject
        if subject.startswith("telemetry."):
            self._telemetry(seen.at, payload)
        elif subject.startswith("bin.events."):
            self._event(seen.at, payload)
        elif subject.startswith("bin.control.") and subject.endswith(".pause"):
            self._pause(seen.at, payload)
        elif subject.startswith("bin.control.") and subject.endswith(".resume"):
            self._resume(seen.at, payload)
        elif subject == "bin.registry.updated":
            self._registry(seen.at, payload)
        elif subject.startswith("bin.builds.result."):
            self._result(seen.at, payload)
        elif subject.startswith("bin.builds.status."):
            self._status(seen.at, payload)
        elif subject.startswith("bin.builds.rearm."):
            self.timeline.add("builds", f"{payload.get('tool')} / {payload.get('failure_mode')} "
                                        "re-armed after a failed build", seen.at)

    # -- telemetry -------------------------------------------------------------------------
    def _telemetry(self, at: float, rec: dict[str, Any]) -> None:
        self.calls += 1
        self.last_call_at = at
        tool, outcome = str(rec.get("tool")), str(rec.get("outcome"))
        if isinstance(rec.get("id"), str):
            self.arrivals[rec["id"]] = at
        if tool == self.tool_name:
            self._use(at, rec, outcome)
            return
        if outcome in ("failure", "timeout") and rec.get("failure_mode"):
            key = (tool, str(rec["failure_mode"]))
            self.failures.setdefault(key, []).append(at)
            count = len(self.failures[key])
            where = (f"{count} of θ={self.theta}" if self.event is None or
                     (self.event["tool"], self.event["failure_mode"]) != key
                     else "after the event: the detector ignores a disarmed key")
            self.timeline.add("telemetry", f"{tool} FAILED {key[1]} ({where}): "
                                           f"{str(rec.get('error') or '')[:90]}", at)
        elif self.calls == 1:
            self.timeline.add("telemetry", f"{tool} {outcome} (the agent's first call on "
                                           f"telemetry.{rec.get('session_id')}.{tool})", at)
        elif self.verbose or (outcome == "success" and any(t == tool for t, _ in self.failures)):
            self.timeline.add("telemetry", f"{tool} {outcome}", at)

    def _use(self, at: float, rec: dict[str, Any], outcome: str) -> None:
        if outcome == "success":
            self.uses_ok.append(at)
            note = f"use {len(self.uses_ok)}"
            if len(self.uses_ok) <= self.promote_after:
                note += f" of the {self.promote_after} that promote it"
        else:
            self.uses_failed += outcome == "failure"
            note = f"{outcome}: {str(rec.get('error') or '')[:80]}"
        self.timeline.add("telemetry", f"{rec.get('tool')} {outcome} ({note}, "
                                       f"{rec.get('duration_ms')} ms)", at)

    # -- the build runner --------------------------------------------------------------------
    def _event(self, at: float, event: dict[str, Any]) -> None:
        if self.event is not None:
            self.timeline.add("detect", f"another BINEvent: {event.get('tool')} / "
                                        f"{event.get('failure_mode')}", at)
            return
        self.event, self.event_at = event, at
        evidence = event.get("evidence") or [{}]
        last = self.arrivals.get(str(evidence[-1].get("id")))
        self.detection_ms = None if last is None else (at - last) * 1000
        after = "" if last is None else f", {fmt_ms(self.detection_ms)} after the θ-th failure"
        self.timeline.add("detect", f"BINEvent fired for {event.get('tool')} / "
                                    f"{event.get('failure_mode')}: count {event.get('count')} = θ "
                                    f"in session {event.get('session_id')} (event "
                                    f"{str(event.get('event_id'))[:12]}{after})", at)

    def _session(self) -> str:
        return str((self.event or {}).get("session_id", "?"))

    def _pause(self, at: float, reason: dict[str, Any]) -> None:
        self.pause_at = self.pause_at or at
        self.timeline.add("control", f"pause request to session {self._session()} for build "
                                     f"{reason.get('build_id')}", at)

    def _registry(self, at: float, notice: dict[str, Any]) -> None:
        self.registry, self.registry_at = notice, at
        tool = notice.get("tool") or {}
        self.timeline.add("registry", f"bin.registry.updated: manifest v{notice.get('version')}, "
                                      f"{tool.get('name')} v{tool.get('version')} "
                                      f"{tool.get('status')} ({tool.get('target')}) -> the agent "
                                      "hot-loads it", at)

    def _resume(self, at: float, checkpoint: dict[str, Any]) -> None:
        from binloop.agent.task import TaskState

        self.resume, self.resume_at = checkpoint, at
        try:
            where = "paused " + TaskState.from_json(checkpoint.get("state")).summary()
        except ValueError:
            where = ("paused (the Hanzo bridge held its calls)" if checkpoint.get("answered")
                     else "the agent did not answer the pause")
        quiet = at - max(self.last_call_at or 0.0, self.pause_at or 0.0)
        self.timeline.add("control", f"resume session {self._session()} with its checkpoint "
                                     f"({where}); no tool call in the {fmt_ms(quiet * 1000)} "
                                     "before", at)

    def _result(self, at: float, result: dict[str, Any]) -> None:
        self.result, self.result_at = result, at
        stages = result.get("stages") or []
        total = sum(float(s.get("duration_ms") or 0) for s in stages)
        outcome = result.get("outcome")
        self.timeline.add("build", f"{outcome} in {fmt_ms(total)}: {stages_line(stages)}", at)
        if outcome != "gated":
            self.problem = f"the build was {outcome}: {result.get('reason')}"

    def _status(self, at: float, change: dict[str, Any]) -> None:
        self.timeline.add("library", f"{change.get('name')} v{change.get('version')}: "
                                     f"{change.get('from')} -> {change.get('to')}", at)
        if change.get("name") == self.tool_name and change.get("to") == "stable":
            self.stable_at = at
        elif change.get("to") == "quarantined":
            self.problem = f"tool {change.get('name')} was quarantined by failed uses"
