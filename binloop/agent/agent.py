"""The reference agent: how an agent integrates with binloop (Python).

Three duties, each a few lines here:

1. **Telemetry** — every tool call, the generated tools' own calls included, goes
   through :class:`binloop.nats.telemetry_client.TelemetryClient` (local JSONL log first,
   then NATS), with its outcome, failure mode, error text, args and duration.
2. **Pause / resume** — tool calls run inside `PauseGate.step()`; a pause request is
   answered with the task state between two steps, and the agent goes on from the
   state in the resume checkpoint (:mod:`binloop.agent.control_listener`).
3. **Registry hot-load** — on `bin.registry.updated` the agent loads the gated tools
   of the library's manifest (:mod:`binloop.agent.registry`). Before calling a tool it
   asks the registry for tools that answer failures of that tool and uses them: a
   check tool gets the call's args (and what the agent knows that the tool's input
   schema asks for, e.g. `expected_total`) and hands back repaired args; any other
   tool makes the call itself through `invoke`. The generated tool's use is recorded
   under its own name: `success` when the guarded call then succeeded (or the tool's
   own call did), `failure` when the failure it answers happened anyway or the tool
   broke, `cancelled` when it stopped a call it could not repair (no verdict). These
   records are what promote the tool to `stable` (or quarantine it).

The scripted job (:mod:`binloop.agent.task`) runs against the in-process mock airline
(:mod:`binloop.agent.airline`).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from binloop.agent.airline import AirlineService, ToolError
from binloop.agent.control_listener import PauseGate
from binloop.agent.registry import LoadedTool, ToolRegistry
from binloop.agent.task import BOOKINGS, TaskState, reservation_args
from binloop.nats.telemetry_client import TelemetryClient

log = logging.getLogger("binloop.agent")


@dataclass(frozen=True)
class AgentSettings:
    session_id: str
    agent_id: str = "binloop-reference-agent"
    wait_for_tools_s: float = 300.0


@dataclass
class Call:
    """The outcome of one tool call as the agent sees it."""

    ok: bool
    result: Any = None
    failure_mode: str | None = None
    error: str | None = None
    guard: str | None = None  # `name@vN` of the generated tool the call went through


@dataclass
class AgentReport:
    ok: bool = False
    reason: str = ""
    calls: int = 0
    failures: int = 0
    pauses: list[dict[str, Any]] = field(default_factory=list)
    reloads: list[dict[str, Any]] = field(default_factory=list)
    tool_uses: dict[str, dict[str, int]] = field(default_factory=dict)

    def use(self, name: str, outcome: str) -> None:
        counts = self.tool_uses.setdefault(name, {"success": 0, "failure": 0, "cancelled": 0})
        counts[outcome] += 1


class ReferenceAgent:
    def __init__(self, settings: AgentSettings, telemetry: TelemetryClient,
                 registry: ToolRegistry, service: AirlineService | None = None,
                 gate: PauseGate | None = None) -> None:
        self.settings = settings
        self.telemetry = telemetry
        self.registry = registry
        self.service = service or AirlineService()
        self.gate = gate or PauseGate()
        self.state = TaskState()
        self.report = AgentReport()
        self._wake = threading.Event()
        self._registry_lock = threading.Lock()

    # -- the job ---------------------------------------------------------------------------
    def run(self) -> AgentReport:
        """Work through the job; returns when it is done or waited too long for a tool."""
        self._reload(0, "start")
        while not self.state.finished:
            with self.gate.step(), self._registry_lock:
                progressed = self._step()
            if not progressed and not self._wait_for_tools():
                waiting = ", ".join(f"booking {p['booking'] + 1} ({p['failure_mode']})"
                                    for p in self.state.pending)
                self.report.reason = (f"no tool for the failing calls after "
                                      f"{self.settings.wait_for_tools_s:.0f}s: {waiting}")
                return self.report
        self.report.ok = True
        return self.report

    def _step(self) -> bool:
        """One tool call's worth of work: the next stage of the current booking, which is
        a failed booking taken up again when a tool for its failure has arrived, or the
        next one. False: nothing can be done until a tool arrives."""
        self.registry.withdraw()
        if self.state.current is None:
            self.state.current = self._take_up_failed() or self._start_next()
        current = self.state.current
        if current is None:
            return False
        {"search": self._search, "quote": self._quote, "book": self._book}[current["stage"]](
            current)
        return True

    def _take_up_failed(self) -> dict[str, Any] | None:
        """A failed booking, back at the stage that failed, when a tool it has not been
        tried with answers its failure (each tool version gets one try per booking)."""
        for pending in self.state.pending:
            tool = self.registry.answers(pending["tool"], pending["failure_mode"])
            if tool is None or f"{tool.name}@v{tool.version}" in pending["tried"]:
                continue
            self.state.pending.remove(pending)
            log.info("retrying booking %d with %s for %s", pending["booking"] + 1, tool.name,
                     pending["failure_mode"])
            progress = {k: v for k, v in pending.items()
                        if k not in ("tool", "failure_mode", "error")}
            return {**progress, "retry": pending["failure_mode"]}
        return None

    def _start_next(self) -> dict[str, Any] | None:
        if self.state.next >= len(BOOKINGS):
            return None
        self.state.next += 1
        return {"booking": self.state.next - 1, "stage": "search", "tried": []}

    def _wait_for_tools(self) -> bool:
        """Wait for a registry change or a resume; False once waited too long."""
        log.info("waiting for a tool for %d failed booking(s)", len(self.state.pending))
        deadline = time.monotonic() + self.settings.wait_for_tools_s
        while time.monotonic() < deadline:
            if self._wake.wait(min(1.0, max(0.0, deadline - time.monotonic()))):
                self._wake.clear()
                return True
        return False

    def _search(self, current: dict[str, Any]) -> None:
        booking = BOOKINGS[current["booking"]]
        call = self.call_guarded("search_direct_flight", {
            "origin": booking.origin, "destination": booking.destination,
            "date": booking.date}, {}, current.get("retry"))
        if not call.ok:
            self._set_aside(current, "search_direct_flight", call)
            return
        current["flight"] = min(call.result, key=lambda f: f["prices"][booking.cabin])
        current["stage"] = "quote"

    def _quote(self, current: dict[str, Any]) -> None:
        args = reservation_args(BOOKINGS[current["booking"]], current["flight"])
        call = self.call_guarded("get_quote", args, {}, current.get("retry"))
        if not call.ok:
            self._set_aside(current, "get_quote", call)
            return
        current.update(stage="book", args=args, quote=call.result["total"])

    def _book(self, current: dict[str, Any]) -> None:
        call = self.call_guarded("book_reservation", current["args"],
                                 {"expected_total": current["quote"]}, current.get("retry"))
        if not call.ok:
            self._set_aside(current, "book_reservation", call)
            return
        self.state.done.append({"booking": current["booking"],
                                "retried": bool(current.get("retry")),
                                "reservation_id": call.result["reservation_id"],
                                "total": call.result["total"]})
        self.state.current = None

    def _set_aside(self, current: dict[str, Any], tool: str, call: Call) -> None:
        """The booking waits, with its progress, for a tool that answers its failure."""
        tried = current.get("tried", [])
        if call.guard is not None and call.guard not in tried:
            tried = [*tried, call.guard]
        self.state.pending.append({**current, "tool": tool, "failure_mode": call.failure_mode,
                                   "error": call.error, "tried": tried})
        self.state.current = None

    # -- tool calls --------------------------------------------------------------------
    def call(self, tool: str, args: dict[str, Any]) -> Call:
        """Call a service tool and record it."""
        started = time.perf_counter()
        try:
            result = self.service.call(tool, args)
        except ToolError as exc:
            self._record(tool, "failure", args, _ms_since(started), exc.failure_mode, exc.message)
            self.report.failures += 1
            log.info("%s failed: %s (%s)", tool, exc.message, exc.failure_mode)
            return Call(False, failure_mode=exc.failure_mode, error=exc.message)
        self._record(tool, "success", args, _ms_since(started))
        return Call(True, result)

    def invoke(self, tool: str, args: dict[str, Any]) -> Any:
        """A generated tool's way to call the tool it guards: the result, or an exception."""
        call = self.call(tool, args)
        if not call.ok:
            raise ToolError(call.failure_mode or "RUNTIME", call.error or "failed")
        return call.result

    def call_guarded(self, tool: str, args: dict[str, Any], context: dict[str, Any],
                     failure_mode: str | None = None) -> Call:
        """Call `tool` through the loaded tool that answers `failure_mode` of it (a retry),
        else through the first one that answers any failure of it, if any."""
        preferred = self.registry.answers(tool, failure_mode) if failure_mode else None
        guards = [preferred] if preferred else self.registry.guards_for(tool)
        if not guards:
            return self.call(tool, args)
        guard = guards[0]
        params = {"args": args, **{k: v for k, v in context.items()
                                   if k in (guard.input_schema.get("properties") or {})}}
        if guard.checks_args:
            call = self._checked_call(guard, tool, params)
        else:
            call = self._wrapped_call(guard, tool, params)
        call.guard = f"{guard.name}@v{guard.version}"
        return call

    def _checked_call(self, guard: LoadedTool, tool: str, params: dict[str, Any]) -> Call:
        started = time.perf_counter()
        try:
            output = guard.run(params, self.invoke)
        except Exception as exc:  # a broken tool: record it, make the call as before
            self._record_use(guard, "failure", params, _ms_since(started),
                             f"{type(exc).__name__}: {exc}")
            return self.call(tool, params["args"])
        if not output.get("ok") and not output.get("repaired"):
            issues = "; ".join(str(i.get("message")) for i in output.get("issues") or [])
            self._record_use(guard, "cancelled", params, _ms_since(started), issues[:1000])
            return Call(False, failure_mode=guard.answers["failure_mode"],
                        error=f"{guard.name}: {issues}")
        guard_ms = _ms_since(started)
        if output.get("changes"):
            log.info("%s repaired the call: %s", guard.name, output["changes"])
        call = self.call(tool, output["args"] if not output.get("ok") else params["args"])
        answered_failure = not call.ok and call.failure_mode == guard.answers["failure_mode"]
        self._record_use(guard, "failure" if answered_failure else "success", params,
                         guard_ms, call.error if answered_failure else None)
        return call

    def _wrapped_call(self, guard: LoadedTool, tool: str, params: dict[str, Any]) -> Call:
        started = time.perf_counter()
        try:
            output = guard.run(params, self.invoke)
        except Exception as exc:
            self._record_use(guard, "failure", params, _ms_since(started),
                             f"{type(exc).__name__}: {exc}")
            return self.call(tool, params["args"])
        if output.get("ok"):
            self._record_use(guard, "success", params, _ms_since(started))
            return Call(True, output.get("result"))
        error = str(output.get("error") or output)[:1000]
        self._record_use(guard, "failure", params, _ms_since(started), error)
        return Call(False, failure_mode=guard.answers["failure_mode"], error=error)

    def _record_use(self, guard: LoadedTool, outcome: str, params: dict[str, Any],
                    duration_ms: int, error: str | None = None) -> None:
        self.report.use(guard.name, outcome)
        log.info("used %s v%d: %s", guard.name, guard.version, outcome)
        self._record(guard.name, outcome, params, duration_ms,
                     "RUNTIME.generated_tool" if outcome == "failure" else None, error)

    def _record(self, tool: str, outcome: str, args: dict[str, Any], duration_ms: int,
                failure_mode: str | None = None, error: str | None = None) -> None:
        self.report.calls += 1
        self.telemetry.record(tool, outcome, session_id=self.settings.session_id,
                              failure_mode=failure_mode, args=args, error=error,
                              duration_ms=duration_ms, agent_id=self.settings.agent_id)

    # -- control (called by ControlChannel, on its worker thread) --------------------------
    def on_pause(self, reason: dict[str, Any]) -> dict[str, Any]:
        build_id = str(reason.get("build_id") or reason.get("event_id") or "unknown")
        asked = time.time()
        state = self.gate.pause(build_id, self.state.to_json)
        self.report.pauses.append({"build_id": build_id, "tool": reason.get("tool"),
                                   "failure_mode": reason.get("failure_mode"),
                                   "paused_ms": int(time.time() * 1000),
                                   "waited_ms": round((time.time() - asked) * 1000, 1)})
        log.info("paused for build %s (%s): %s", build_id, reason.get("failure_mode"),
                 self.state.summary())
        return {**state, "session_id": self.settings.session_id,
                "agent_id": self.settings.agent_id, "tools": sorted(self.registry.tools)}

    def on_resume(self, checkpoint: dict[str, Any]) -> None:
        build_id = checkpoint.get("build_id")
        restored = False
        # The state is taken back only while this build still holds the agent: after a
        # pause that timed out on either side, the agent's own state is newer.
        if checkpoint.get("answered") and self.gate.held_by(str(build_id)):
            try:
                self.state = TaskState.from_json(checkpoint.get("state"))
                restored = True
            except ValueError as exc:
                log.warning("resume checkpoint not usable (%s): going on from memory", exc)
        self._reload(0, "resume")
        running = self.gate.resume(str(build_id) if build_id is not None else None)
        for pause in self.report.pauses:
            if pause["build_id"] == build_id:
                pause.update(resumed_ms=int(time.time() * 1000), restored=restored)
        log.info("resumed by build %s from its checkpoint%s: %s", build_id,
                 "" if restored else " (no state in it)", self.state.summary())
        if running:
            self._wake.set()

    def on_registry_updated(self, notice: dict[str, Any]) -> None:
        version = notice.get("version")
        self._reload(version if isinstance(version, int) else 0, "registry.updated")

    def _reload(self, min_version: int, why: str) -> None:
        with self._registry_lock:
            change = self.registry.reload(min_version)
        if change.loaded or change.unloaded or change.refused:
            self.report.reloads.append({"why": why, "manifest_version": change.manifest_version,
                                        "loaded": change.loaded, "unloaded": change.unloaded,
                                        "refused": change.refused,
                                        "ms": int(time.time() * 1000)})
        for name in change.loaded:
            tool = self.registry.tools[name]
            log.info("loaded %s v%d (manifest v%d, %s): answers %s/%s", name, tool.version,
                     change.manifest_version, why, tool.answers["tool"],
                     tool.answers["failure_mode"])
        for name, reason in change.refused.items():
            log.warning("refused %s: %s", name, reason)
        if change.loaded:
            self._wake.set()


def _ms_since(started: float) -> int:
    return max(0, round((time.perf_counter() - started) * 1000))
