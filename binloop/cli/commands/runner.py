"""`binloop runner`: the build runner as its own service on NATS.

It consumes `BIN_EVENTS` durably, builds in the background (durable queue, worker
pool), publishes results and re-arms on `BIN_BUILDS`, pauses and resumes agents on
`bin.control.*`, announces `bin.registry.updated`, and promotes or quarantines tools
from their uses in the telemetry stream. Runs until SIGINT/SIGTERM or `--until-idle`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType
from typing import Any

from binloop.core.config import add_arguments, load_config


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "runner", help="build tools for the BINEvents on NATS (a service apart from detection)",
        description="Consume BIN_EVENTS durably and run the BIN build pipeline for each event; "
                    "results and re-arms go to BIN_BUILDS.")
    add_arguments(parser, "runner")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from binloop.cli.build_service import LiveBuilds, consume_events, dumps, result_summary
    from binloop.core.logs import configure_logging

    config = load_config(args)
    if not config.nats:
        raise ValueError("--nats URL is required")
    if config.library:
        from binloop.replay.jsonl import ensure_output_dir

        ensure_output_dir(config.library)
    configure_logging(config)
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    builds = LiveBuilds(config).start()
    try:
        queued = consume_events(config, builds, stop)
        builds.service.queue.wait_idle(0 if stop.is_set() else 3600)
        summary = result_summary(builds)
        summary["queued"] = queued
        print(dumps(summary), file=sys.stderr)
    finally:
        builds.stop()
        for sig, old in previous.items():
            signal.signal(sig, old)
    return 0
