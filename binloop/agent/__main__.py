"""`python -m binloop.agent`: run the reference agent's scripted job against binloop.

Exit status: 0 when every booking is made; 3 when bookings still failed after waiting
`--wait-for-tools` for a tool; 1 on an internal error; 130/143 when interrupted. A
JSON report (`--report FILE`) tells what happened: calls, failures, pauses, reloads,
uses of generated tools, and the final task state.
"""

from __future__ import annotations

import argparse
import logging
import secrets
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import orjson

from binloop.core.config import default


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m binloop.agent",
        description="binloop's reference agent: books a group's flights against a mock "
                    "airline, records every tool call, answers pause/resume and hot-loads "
                    "tools from the library on bin.registry.updated.")
    parser.add_argument("--nats", required=True, metavar="URL", help="NATS server URL")
    parser.add_argument("--library", required=True, metavar="DIR", help="tool library")
    parser.add_argument("--target", choices=("python", "typescript"), default=default("target"),
                        help="which generated tools to load (default: %(default)s)")
    parser.add_argument("--session", default=None,
                        help="session id (default: trip-<random hex>)")
    parser.add_argument("--telemetry-log", default="agent-telemetry.jsonl", metavar="FILE",
                        help="local telemetry log (default: agent-telemetry.jsonl)")
    parser.add_argument("--report", default=None, metavar="FILE",
                        help="write the agent's JSON report here at the end")
    parser.add_argument("--latency", type=float, default=0.1, metavar="SECONDS",
                        help="how long each mock airline call takes (default: 0.1)")
    parser.add_argument("--wait-for-tools", type=float, default=300.0, metavar="SECONDS",
                        help="how long to wait for a tool when only failed bookings are "
                             "left (default: 300)")
    parser.add_argument("--resume-timeout", type=float, default=300.0, metavar="SECONDS",
                        help="go on by itself when paused longer than this (default: 300)")
    parser.add_argument("--subject-prefix", default=default("subject_prefix"),
                        help="telemetry subject prefix (default: %(default)s)")
    parser.add_argument("--control-subject-prefix", default=default("control_subject_prefix"),
                        help="control subjects: <prefix>.<session>.pause|resume")
    parser.add_argument("--sandbox", choices=("strict", "unsafe"), default=default("sandbox"),
                        help="gated tools run in sandboxed workers; strict refuses to run them "
                             "where the sandbox is incomplete")
    parser.add_argument("--registry-subject", default=default("registry_subject"))
    parser.add_argument("--work-dir", default=None, metavar="DIR",
                        help="where private copies of plugins go (default: a temp dir)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s.%(msecs)03d agent: %(message)s",
                        datefmt="%H:%M:%S")

    def interrupted(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    try:
        return run(args)
    except KeyboardInterrupt:
        logging.getLogger("binloop.agent").info("interrupted")
        return 130


def run(args: argparse.Namespace) -> int:
    from binloop.agent.agent import AgentSettings, ReferenceAgent
    from binloop.agent.airline import AirlineService
    from binloop.agent.control_listener import ControlChannel, PauseGate
    from binloop.agent.registry import ToolRegistry
    from binloop.nats.telemetry_client import TelemetryClient

    log = logging.getLogger("binloop.agent")
    session = args.session or f"trip-{secrets.token_hex(3)}"
    settings = AgentSettings(session, wait_for_tools_s=args.wait_for_tools)
    registry = ToolRegistry(args.library, args.target,
                            Path(args.work_dir) if args.work_dir else None,
                            sandbox_mode=args.sandbox)
    telemetry = TelemetryClient(args.telemetry_log, args.nats, subject_prefix=args.subject_prefix,
                                agent_id=settings.agent_id)
    agent = ReferenceAgent(settings, telemetry, registry, AirlineService(args.latency),
                           PauseGate(args.resume_timeout))
    try:
        channel: ControlChannel | None = ControlChannel(
            args.nats, session, agent, prefix=args.control_subject_prefix,
            registry_subject=args.registry_subject)
    except (ConnectionError, TimeoutError, OSError) as exc:
        log.warning("no control plane (%s): this agent cannot be paused or told of new "
                    "tools; it works on with the tools the library holds now", exc)
        channel = None
    started = time.time()
    log.info("session %s: %s (target %s, library %s)", session, agent.state.task, args.target,
             args.library)
    try:
        report = agent.run()
    finally:
        published = telemetry.flush(30)
        if channel is not None:
            channel.close()
        telemetry.close()
        registry.close()
    log.info("%s: %s; %d calls, %d failed; telemetry %s", "done" if report.ok else "gave up",
             agent.state.summary(), report.calls, report.failures,
             "published" if published else "NOT all published (kept in the log)")
    if args.report:
        write_report(Path(args.report), session, started, report, agent.state.to_json())
    if not report.ok:
        log.error(report.reason)
        return 3
    return 0


def write_report(path: Path, session: str, started: float, report: Any,
                 state: dict[str, Any]) -> None:
    from dataclasses import asdict

    body = {"session_id": session, "started_ms": int(started * 1000),
            "ended_ms": int(time.time() * 1000), **asdict(report), "state": state}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(body, option=orjson.OPT_INDENT_2))
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())
