"""The BIN build pipeline (paper Alg. 2): one BINEvent in, a gated tool or a rollback out.

Stages: pause -> design -> build (implement + package, written to staging) -> check
(lint + type-check, sandboxed) -> test (acceptance tests, sandboxed) -> gate (commit to
the library: probationary) -> reload (registry-updated notice) -> resume.

Atomicity: until the gate, nothing is written to the library but the build's private
staging directory, which is removed whatever happens. The gate is the library's
atomic commit (files renamed into place, then one manifest rename). If reload fails
after the gate, the commit is reverted byte for byte. Resume always runs, with the
checkpoint written at pause. Every build leaves an audit record under `audit/`.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from binloop.core.config import default
from binloop.core.events import BINEvent
from binloop.core.fsutil import sha256_bytes, write_tree
from binloop.core.names import check_relpath
from binloop.core.redact import Redactor
from binloop.library import manifest as mf
from binloop.library.store import BUILD_ID, Commit, ToolLibrary
from pipeline_runner.audit import BuildAudit, BuildOutcome, StageRecord
from pipeline_runner.design import Design, InvalidDesign, check_design, design_from_json
from pipeline_runner.designers import Designer
from pipeline_runner.event_input import InvalidEvent, check_event, for_design
from pipeline_runner.pause_resume import AgentControl, LogControl, write_checkpoint
from pipeline_runner.reproduction import check_reproduction
from pipeline_runner.sandbox import SandboxMode, SandboxUnavailable, detect_isolation, require
from pipeline_runner.stages import StageError, StageFailed, run_stage
from pipeline_runner.targets import StageRun, Target

EXIT_CODES: Final = {"gated": 0, "rolled_back": 2, "error": 1}
UNSAFE_BUILDS: Final = "unsafe-builds.jsonl"  # under the library's .state/


@dataclass(frozen=True)
class StageTimeouts:
    """Seconds per in-process stage (sandboxed stages have their own wall limits)."""

    pause: float = default("pause_timeout") / 1000
    design: float = default("design_timeout") / 1000
    build: float = default("design_timeout") / 1000
    reload: float = default("pause_timeout") / 1000
    resume: float = default("pause_timeout") / 1000


@dataclass
class BuildResult:
    build_id: str
    event_id: str
    outcome: BuildOutcome
    reason: str = ""
    tool: dict[str, Any] | None = None
    manifest_version: int | None = None
    audit_path: Path | None = None
    stages: list[StageRecord] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]

    def summary(self) -> dict[str, Any]:
        return {"build_id": self.build_id, "event_id": self.event_id, "outcome": self.outcome,
                "reason": self.reason, "tool": self.tool,
                "manifest_version": self.manifest_version,
                "audit": str(self.audit_path) if self.audit_path else None,
                "stages": [{"stage": s.stage, "outcome": s.outcome, "duration_ms": s.duration_ms,
                            "reason": s.reason} for s in self.stages]}


def new_build_id(event_id: str) -> str:
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{event_id[:12]}-{secrets.token_hex(3)}"


def _stage_detail(run: StageRun) -> dict[str, Any]:
    return run.detail()


def _checked(run: StageRun) -> StageRun:
    if not run.ok:
        timed_out = any("timed out" in s.reason for s in run.steps if not s.ok)
        raise StageError(run.reason, run.detail(), timed_out)
    return run


class BuildRunner:
    """Runs builds against one library with one designer and one target."""

    def __init__(self, library: ToolLibrary, designer: Designer, target: Target,
                 control: AgentControl | None = None,
                 timeouts: StageTimeouts | None = None) -> None:
        self.library = library
        self.designer = designer
        self.target = target
        self.control: AgentControl = control or LogControl()
        self.timeouts = timeouts or StageTimeouts()
        # probe the sandbox now, off the build path (the first pause must not wait for it)
        threading.Thread(target=detect_isolation, daemon=True, name="binloop-probe").start()

    def build(self, event: BINEvent, build_id: str | None = None) -> BuildResult:
        """Run the whole pipeline for one event; never raises for a stage failure.

        Raises :class:`InvalidEvent` for an event that is not one (e.g. an `event_id`
        that is not 64 hex characters: file names derive from it)."""
        event = check_event(event)
        build_id = build_id or new_build_id(event["event_id"])
        if not BUILD_ID.fullmatch(build_id):
            raise InvalidEvent(f"build id {build_id!r:.80} must match {BUILD_ID.pattern}")
        with self.library.build_lock():
            # Checked under the lock: of N concurrent builds of one event, one builds.
            already = self._already_built(event)
            if already is not None:
                return already
            return self._build_unlocked(event, build_id)

    def _build_unlocked(self, event: BINEvent, build_id: str) -> BuildResult:
        redactor = Redactor()
        design_event = for_design(event, redactor)
        audit = BuildAudit(build_id, dict(design_event), self.designer.name, self.target.name)
        started = time.perf_counter()
        result = BuildResult(build_id, event["event_id"], "rolled_back", stages=audit.stages)
        checkpoint: dict[str, Any] = {}
        try:
            checkpoint = self._pause(event, build_id, audit.stages)
            self._build_and_gate(design_event, redactor, build_id, audit, result)
        except StageFailed as failed:
            result.reason = failed.record.reason
            result.outcome = "error" if failed.record.stage == "gate" else "rolled_back"
        finally:
            self._resume(event, checkpoint, audit.stages)
            audit.sandbox = self._sandbox_in_force()  # (after the pause: it may probe)
            audit.outcome, audit.reason = result.outcome, result.reason
            audit.tool, audit.manifest_version = result.tool, result.manifest_version
            audit.redactions = redactor.count
            audit.duration_ms = round((time.perf_counter() - started) * 1000, 2)
            result.audit_path = audit.write(self.library.audit_dir)
            if result.outcome == "gated" and audit.sandbox.get("mechanism") == "none":
                self._note_unsafe(result)
        return result

    def _sandbox_in_force(self) -> dict[str, Any]:
        mode: SandboxMode = "unsafe" if getattr(self.target, "sandbox_mode", "") == "unsafe" \
            else "strict"
        try:
            return require(mode).describe()
        except SandboxUnavailable as exc:  # the check stage fails closed with this reason
            refused = exc.isolation.describe() if exc.isolation else {}
            return {**refused, "refused": str(exc)}

    def _note_unsafe(self, result: BuildResult) -> None:
        """Tools built with `--sandbox unsafe` are listed where `binloop status` sees them."""
        if result.tool is None:
            return
        line = orjson.dumps({"tool": result.tool["name"], "version": result.tool["version"],
                             "build_id": result.build_id, "at": mf.iso_now()}) + b"\n"
        self.library.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.library.state_dir / UNSAFE_BUILDS, "ab") as handle:
            handle.write(line)

    # -- stages ------------------------------------------------------------------------
    def _pause(self, event: BINEvent, build_id: str, records: list[StageRecord]
               ) -> dict[str, Any]:
        reason = {"event_id": event["event_id"], "tool": event["tool"],
                  "failure_mode": event["failure_mode"], "build_id": build_id}

        def pause() -> dict[str, Any]:
            try:
                state = self.control.pause(event["session_id"], reason)
            except Exception as exc:  # an agent channel problem must not stop the build
                state = None
                reason["control_error"] = repr(exc)
            return write_checkpoint(self.library.checkpoint_dir, build_id,
                                    event["session_id"], state)

        return run_stage("pause", pause, self.timeouts.pause, records,
                         lambda cp: {"answered": cp["answered"], "checkpoint": cp["path"]})

    def _build_and_gate(self, event: BINEvent, redactor: Redactor, build_id: str,
                        audit: BuildAudit, result: BuildResult) -> None:
        records = audit.stages
        manifest = self.library.read()
        design = run_stage("design", lambda: self._design(event, manifest, redactor),
                           self.timeouts.design, records,
                           lambda d: {"name": d.name, "behaviour": d.behaviour,
                                      "cases": len(d.acceptance)})
        with self.library.staging(build_id) as staging:
            tool_dir = staging / "tool"
            files = run_stage("build", lambda: self._implement(design, redactor, tool_dir),
                              self.timeouts.build, records,
                              lambda f: {"files": {k: len(v) for k, v in f.items()}})
            run_stage("check", lambda: _checked(self.target.check(tool_dir)), None, records,
                      _stage_detail)
            run_stage("test", lambda: _checked(self.target.test(tool_dir)), None, records,
                      _stage_detail)
            commit = run_stage("gate", lambda: self._gate(design, files, tool_dir, event),
                               None, records,
                               lambda c: {"version": c.version, "path": str(c.version_dir)})
        result.tool = {"name": design.name, "version": commit.version, "status": "probationary",
                       "path": commit.version_dir.relative_to(self.library.root).as_posix(),
                       "target": self.target.name, "answers": dict(design.answers)}
        result.manifest_version = commit.manifest["version"]
        try:
            run_stage("reload", lambda: self.control.registry_updated(
                commit.manifest["version"], result.tool), self.timeouts.reload, records)
        except StageFailed:
            self.library.revert(commit)
            result.tool, result.manifest_version = None, None
            raise
        result.outcome, result.reason = "gated", ""

    def _design(self, event: BINEvent, manifest: mf.Manifest, redactor: Redactor) -> Design:
        design = self.designer.design(event, manifest)
        answers: mf.Answers = {"tool": event["tool"], "failure_mode": event["failure_mode"]}
        if dict(design.answers) != dict(answers):
            raise InvalidDesign(f"design answers {design.answers}, the event is {answers}")
        check_design(design)
        clean = redactor.document(design.to_json())
        checked = design_from_json(clean, answers, design.designer or self.designer.name)
        check_reproduction(checked, event)
        return checked

    def _implement(self, design: Design, redactor: Redactor, tool_dir: Path) -> dict[str, bytes]:
        sources = self.designer.implement(design, self.target.name)
        if not isinstance(sources, dict):
            raise InvalidDesign("implement() must return a dict of file path -> source text")
        clean = {path: redactor.code(text) if isinstance(text, str) else text
                 for path, text in sources.items()}
        files = self.target.package(design, clean)
        for rel in files:
            check_relpath(rel)
        write_tree(tool_dir, files)
        return files

    def _gate(self, design: Design, files: dict[str, bytes], tool_dir: Path,
              event: BINEvent) -> Commit:
        hashes = {rel: sha256_bytes(data) for rel, data in sorted(files.items())}

        def version_of(number: int) -> mf.ToolVersion:
            return {"version": number, "status": "probationary",
                    "status_reason": "gated: acceptance tests passed", "target": self.target.name,
                    "path": f"tools/{design.name}/v{number}", "entry": self.target.entry,
                    "files": hashes, "created": mf.iso_now(), "uses": {"ok": 0, "failed": 0},
                    "recent_use_ids": [], "event_id": event["event_id"],
                    "arm_epoch": event["arm_epoch"],
                    "designer": design.designer or self.designer.name,
                    "description": design.description}

        return self.library.commit(tool_dir, design.name, dict(design.answers),  # type: ignore[arg-type]
                                   version_of)

    def _resume(self, event: BINEvent, checkpoint: dict[str, Any],
                records: list[StageRecord]) -> None:
        # The failure is recorded; a build's outcome does not depend on the agent's answer.
        with contextlib.suppress(StageFailed):
            run_stage("resume", lambda: self.control.resume(event["session_id"], checkpoint),
                      self.timeouts.resume, records)

    def _already_built(self, event: BINEvent) -> BuildResult | None:
        """The library's answer when it already holds a tool built from this event, or an
        active (probationary or stable) tool that answers the event's key: an event id
        depends on the detection configuration (and an id of a library built before it
        did differs), but a key a gated tool answers is never built again."""
        key = {"tool": event["tool"], "failure_mode": event["failure_mode"]}
        for entry in self.library.read()["tools"].values():
            for version in mf.all_versions(entry):
                if version["event_id"] == event["event_id"]:
                    return self._known(event, entry, version, "already built from this event")
            if dict(entry["answers"]) == key and entry["status"] != "quarantined":
                return self._known(event, entry, entry, "a gated tool already answers this key")
        return None

    @staticmethod
    def _known(event: BINEvent, entry: mf.ToolEntry, version: mf.ToolVersion,
               reason: str) -> BuildResult:
        return BuildResult(
            "", event["event_id"], "gated", reason,
            {"name": entry["name"], "version": version["version"],
             "status": version["status"], "path": version["path"],
             "target": version["target"], "answers": dict(entry["answers"])})
