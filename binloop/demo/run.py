"""`binloop demo`: start everything, watch the loop close, report, clean up.

Processes (all children of the demo, stopped by it whatever happens, Ctrl-C included):
the embedded nats-server (`binloop.nats.server`), the live job
(`python -m binloop.cli run ...` with the build runner, offline designer) and the
reference agent (`python -m binloop.agent ...`). Everything they write stays in the
work directory: `library/` (manifest, tools, audit records), `telemetry.jsonl` (the
agent's telemetry log), `events.jsonl`, `dead-letter.jsonl`, `logs/`, `nats/`,
`agent-report.json`, `timeline.txt` and `summary.json`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import orjson

from binloop.core.config import default
from binloop.core.errors import OutputError
from binloop.demo.children import Child, child_env
from binloop.demo.observer import NatsObserver
from binloop.demo.progress import Progress
from binloop.demo.timeline import Timeline, fmt_ms, stages_line

STREAMS = (default("stream"), default("events_stream"), default("builds_stream"))
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class DemoFailed(Exception):
    """The loop did not close; the message says why and where to look."""


@dataclass(frozen=True)
class DemoOptions:
    workdir: Path | None = None
    target: str = "python"
    timeout_s: float = 300.0
    theta: int = default("theta")
    latency_s: float = 0.1
    verbose: bool = False
    agent: str = "python"  # or "hanzo": the agent runs in a Hanzo bot's plugin runtime


def new_workdir(base: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for suffix in ["", *(f"-{n}" for n in range(2, 100))]:
        path = base / f"binloop-demo-{stamp}{suffix}"
        if not path.exists():
            return path
    raise DemoFailed(f"no free work directory name under {base}")


def prepare_workdir(given: Path | None) -> Path:
    """A new, empty work directory (the demo needs a library without the tool)."""
    workdir = (given or new_workdir(Path.cwd())).resolve()
    if workdir.exists() and any(workdir.iterdir()):
        raise OutputError(f"work directory {workdir} is not empty: the demo needs a fresh "
                         "library (give a new --workdir)")
    (workdir / "logs").mkdir(parents=True, exist_ok=True)
    return workdir


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM ends the demo like Ctrl-C (so that it stops its children)."""
    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def interrupts_ignored() -> Iterator[None]:
    """A second Ctrl-C must not cut the shutdown of the children short."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT,
                                                                    signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_demo(options: DemoOptions) -> int:
    started = time.monotonic()
    workdir = prepare_workdir(options.workdir)
    timeline = Timeline(started, workdir / "timeline.txt")
    demo = Demo(options, workdir, timeline)
    try:
        with sigterm_interrupts():
            try:
                demo.run()
            finally:
                with interrupts_ignored():
                    demo.processes.close()
        demo.report()
        return EXIT_OK
    except KeyboardInterrupt:
        timeline.write(f"binloop demo: interrupted; its processes are stopped. Work directory: "
                       f"{workdir}")
        return EXIT_INTERRUPTED
    except DemoFailed as failed:
        timeline.write(f"binloop demo FAILED: {failed}")
        timeline.write(f"Work directory (logs, library, telemetry): {workdir}")
        return EXIT_FAILED
    finally:
        timeline.close()


class Demo:
    def __init__(self, options: DemoOptions, workdir: Path, timeline: Timeline) -> None:
        self.options = options
        self.workdir = workdir
        self.timeline = timeline
        self.library = workdir / "library"
        self.processes = contextlib.ExitStack()
        self.progress = Progress(timeline, options.theta, verbose=options.verbose)
        self.env = child_env(os.environ)
        self.deadline = time.monotonic() + options.timeout_s
        self.job: Child | None = None
        self.agent: Child | None = None
        self.job_exit: int | None = None

    # -- starting ----------------------------------------------------------------------------
    def run(self) -> None:
        self.timeline.add("demo", f"work directory {self.workdir} (target {self.options.target}, "
                                  f"agent {self.options.agent})")
        if self.options.target == "typescript":
            self._toolchain()
        url = self._nats()
        observer = NatsObserver(url)
        self.processes.callback(observer.close)
        self._start_job(url, observer)
        self._start_agent(url)
        self._watch(observer)
        self._stop_job()

    def _toolchain(self) -> None:
        from binloop.core.config import load_config
        from pipeline_runner.factory import target_of
        from pipeline_runner.toolchain import ToolchainUnavailable

        config = load_config({"target": "typescript"}, env=self.env)
        try:
            toolchain, _ = target_of(config).toolchain()  # type: ignore[attr-defined]
        except ToolchainUnavailable as exc:
            raise DemoFailed(f"the typescript target needs node and tsc ({exc}); the first "
                             "use installs typescript from npm, or use --target python"
                             ) from None
        self.timeline.add("demo", f"TypeScript toolchain: {toolchain.node} and "
                                  f"{toolchain.tsc_js.parent.parent}")

    def _nats(self) -> str:
        from binloop.nats.server import NatsServer, NatsServerError

        try:
            server = NatsServer(0, self.workdir / "nats")
            server.new_session = True
            server.start()
        except NatsServerError as exc:
            raise DemoFailed(f"nats-server did not start (see nats/nats-server.log): {exc}"
                             ) from None
        self.processes.callback(server.stop)
        self.timeline.add("nats", f"nats-server ready on {server.url} (pid {server.pid}, "
                                  "JetStream store nats/)")
        return server.url

    def _start_job(self, url: str, observer: NatsObserver) -> None:
        args = ["run", "--nats", url, "--library", str(self.library),
                "--target", self.options.target, "--designer", "offline",
                "--theta", str(self.options.theta), "--window", "session",
                "--partitions", "2", "--pause-timeout", "10s",
                "--events-out", str(self.workdir / "events.jsonl"),
                "--dead-letter", str(self.workdir / "dead-letter.jsonl"),
                # a safety net: a job orphaned by a killed demo ends by itself
                "--until-idle", f"{self.options.timeout_s + 120:.0f}s"]
        self.job = Child("job", "binloop.cli", args, self.workdir / "logs" / "run.log", self.env)
        self.processes.callback(self._stop_job)
        while not observer.streams_exist(*STREAMS):
            self._check_job()
            self._check_deadline("the live job to set up its streams")
            time.sleep(0.1)
        self.timeline.add("job", f"binloop run up (pid {self.job.pid}): detection θ="
                                 f"{self.options.theta}, session window; build runner with the "
                                 f"offline designer, {self.options.target} target; streams "
                                 f"{', '.join(STREAMS)}")

    def _start_agent(self, url: str) -> None:
        session = f"trip-{os.urandom(3).hex()}"
        if self.options.agent == "hanzo":
            from binloop.demo.hanzo_run import HanzoAgentUnavailable, start_hanzo_agent

            try:
                self.agent = start_hanzo_agent(self, url, session)
            except HanzoAgentUnavailable as exc:
                raise DemoFailed(str(exc)) from None
            self.processes.callback(self._stop_agent)
            return
        left = f"{max(30.0, self.deadline - time.monotonic()):.0f}"
        args = ["--nats", url, "--library", str(self.library), "--target", self.options.target,
                "--session", session, "--telemetry-log", str(self.workdir / "telemetry.jsonl"),
                "--report", str(self.workdir / "agent-report.json"),
                "--latency", str(self.options.latency_s), "--wait-for-tools", left,
                "--resume-timeout", left, "--work-dir", str(self.workdir / "agent-plugins")]
        self.agent = Child("agent", "binloop.agent", args, self.workdir / "logs" / "agent.log",
                           self.env)
        self.processes.callback(self._stop_agent)
        self.timeline.add("agent", f"reference agent started (pid {self.agent.pid}), session "
                                   f"{session}: books 7 flights against the mock airline")

    # -- watching ----------------------------------------------------------------------------
    def _watch(self, observer: NatsObserver) -> None:
        agent_exit: int | None = None
        while True:
            seen = observer.next(0.1)
            while seen is not None:
                self.progress.feed(seen)
                seen = observer.next(0)
            if self.progress.problem:
                raise DemoFailed(f"{self.progress.problem} (see library/audit/ and "
                                 "logs/run.log)")
            if agent_exit is None and self.agent is not None and \
                    (agent_exit := self.agent.poll()) is not None:
                self._agent_ended(agent_exit)
            if agent_exit == 0 and self.progress.closed:
                return
            self._check_job()
            self._check_deadline(self.progress.waiting_for())

    def _agent_ended(self, code: int) -> None:
        report = self._agent_report()
        if code != 0:
            tail = self.agent.log_tail() if self.agent else ""
            raise DemoFailed(f"the agent exited with {code}: {report.get('reason') or 'see log'}"
                             f" (see logs/agent.log)\n{tail}")
        state = report.get("state") or {  # the Hanzo agent reports its bookings at the top
            "done": report.get("done", []),
            "total": len(report.get("done", [])) + len(report.get("pending", []))}
        retried = sum(1 for d in state.get("done", []) if d.get("retried"))
        self.timeline.add("agent", f"finished (exit 0): {len(state.get('done', []))} of "
                                   f"{state.get('total')} booked, {retried} of them retried "
                                   f"with the new tool; {report.get('calls')} tool calls")

    def _agent_report(self) -> dict[str, Any]:
        try:
            report = orjson.loads((self.workdir / "agent-report.json").read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return {}
        return report if isinstance(report, dict) else {}

    def _check_job(self) -> None:
        if self.job is not None and (code := self.job.poll()) is not None:
            raise DemoFailed(f"the live job exited with code {code} before the loop closed "
                             f"(see logs/run.log)\n{self.job.log_tail()}")

    def _check_deadline(self, waiting_for: str) -> None:
        if time.monotonic() > self.deadline:
            raise DemoFailed(f"timed out after {self.options.timeout_s:.0f}s waiting for "
                             f"{waiting_for} (see logs/run.log and logs/agent.log)")

    # -- stopping ----------------------------------------------------------------------------
    def _stop_agent(self) -> None:
        if self.agent is not None and self.agent.poll() is None:
            self.agent.stop(15)

    def _stop_job(self) -> None:
        if self.job is None or self.job_exit is not None:
            return
        running = self.job.poll() is None
        self.job_exit = self.job.stop(60)
        if running:
            self.timeline.add("job", f"stopped (SIGTERM): exit {self.job_exit}")

    # -- the report ----------------------------------------------------------------------------
    def report(self) -> None:
        progress, timeline = self.progress, self.timeline
        manifest = orjson.loads((self.library / "manifest.json").read_bytes())
        name = progress.tool_name or ""
        entry = manifest["tools"].get(name, {})
        audit = self._audit()
        stages = audit.get("stages") or (progress.result or {}).get("stages") or []
        first_use = progress.uses_ok[0] if progress.uses_ok else None
        theta_at = progress.failures.get((str((progress.event or {}).get("tool")),
                                          str((progress.event or {}).get("failure_mode"))),
                                         [None])[-1]
        figures = {
            "target": self.options.target, "total_s": round(timeline.offset(), 3),
            "theta": self.options.theta,
            "detection_ms": _round(progress.detection_ms),
            "event_to_pause_ms": _ms(progress.event_at, progress.pause_at),
            "build_ms": audit.get("duration_ms"),
            "stages_ms": {s["stage"]: s.get("duration_ms") for s in stages},
            "gate_to_first_use_ms": _ms(progress.registry_at, first_use),
            "first_use_to_stable_ms": _ms(first_use, progress.stable_at),
            "theta_failure_to_stable_ms": _ms(theta_at, progress.stable_at),
            "tool": name, "status": entry.get("status"), "uses": entry.get("uses"),
            "job_exit": self.job_exit}
        (self.workdir / "summary.json").write_bytes(
            orjson.dumps(figures, option=orjson.OPT_INDENT_2))
        if self.job_exit not in (0, None):
            timeline.write(f"note: the live job exited with {self.job_exit} on SIGTERM "
                           "(see logs/run.log)")
        self._print_summary(figures, stages, audit)

    def _audit(self) -> dict[str, Any]:
        build_id = str((self.progress.result or {}).get("build_id") or "")
        for path in sorted((self.library / "audit").glob(f"*{build_id}*.json")):
            record = orjson.loads(path.read_bytes())
            record["_path"] = path.relative_to(self.workdir).as_posix()
            return record if isinstance(record, dict) else {}
        return {}

    def _print_summary(self, figures: dict[str, Any], stages: list[dict[str, Any]],
                       audit: dict[str, Any]) -> None:
        write = self.timeline.write
        uses = figures["uses"] or {}
        write()
        write(f"binloop demo: OK, the loop closed in {figures['total_s']:.1f} s "
              f"({self.options.target} target)")
        rows = [
            ("θ-th failure -> BINEvent", fmt_ms(figures["detection_ms"])),
            ("BINEvent -> pause request", fmt_ms(figures["event_to_pause_ms"])),
            ("build, pause to resume", f"{fmt_ms(figures['build_ms'])}: {stages_line(stages)}"),
            ("tool announced -> first use", fmt_ms(figures["gate_to_first_use_ms"])),
            ("first use -> stable", fmt_ms(figures["first_use_to_stable_ms"])),
            ("θ-th failure -> stable tool", fmt_ms(figures["theta_failure_to_stable_ms"])),
            ("tool", f"{figures['tool']}: {figures['status']}, uses ok {uses.get('ok')}, "
                     f"failed {uses.get('failed')}"),
        ]
        for label, value in rows:
            write(f"  {label:<29} {value}")
        write(f"Left in {self.workdir}:")
        for label, value in [
            ("library/", f"manifest.json, {audit.get('tool', {}).get('path', 'tools/')}, "
                         f"{audit.get('_path', 'audit/')}".replace("library/", "")),
            ("telemetry.jsonl", "the agent's telemetry log"),
            ("events.jsonl", "BINEvents (dead-letter.jsonl: rejected records)"),
            ("logs/", "run.log (live job), agent.log (reference agent); nats/nats-server.log"),
            ("timeline.txt", "this timeline; summary.json: its figures; agent-report.json"),
        ]:
            write(f"  {label:<16} {value}")


def _ms(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round((end - start) * 1000, 1)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
