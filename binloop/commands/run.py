"""`binloop run`: the live job on NATS JetStream (flows.live)."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

from binloop.config import Config, add_arguments, load_config

NO_BUILD_YET = ("the BIN build runner is not part of this installation yet: run the "
                "detector alone with --no-build")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run", help="the live job: detect friction on a NATS JetStream telemetry stream",
        description="Consume telemetry from a JetStream stream (created and partitioned when "
                    "missing), fire BINEvents to the BIN_EVENTS stream (and --events-out), "
                    "until SIGINT/SIGTERM or --until-idle. With --recovery-dir a killed job "
                    "resumes exactly where it stopped.")
    add_arguments(parser, "run")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = load_config(args)
    if config.build:
        raise ValueError(NO_BUILD_YET)
    if not config.nats:
        raise ValueError("--nats URL is required (e.g. nats://127.0.0.1:4222)")
    summary = run_live(config)
    print(summary.render(), file=sys.stderr)
    return 0


def recovery_args(config: Config) -> list[str]:
    """`-r/-s/-b` for `python -m bytewax.run`, initialising the store when missing."""
    if not config.recovery_dir:
        return []
    init_recovery_store(Path(config.recovery_dir), config.workers * config.processes)
    return ["-r", config.recovery_dir, "-s", str(config.snapshot_interval / 1000),
            "-b", str(config.backup_interval / 1000)]


def init_recovery_store(path: Path, partitions: int) -> None:
    """`python -m bytewax.recovery DIR N`, unless DIR already holds a store."""
    from bytewax.recovery import init_db_dir

    if path.is_dir() and any(path.glob("part-*.sqlite3")):
        return
    path.mkdir(parents=True, exist_ok=True)
    init_db_dir(path, max(1, partitions))


def run_live(config: Config) -> Any:
    """Run flows.live in this process or as a local cluster; returns its RunSummary."""
    import orjson

    from binloop.summary import RunSummary
    from flows.live import configure_logging

    configure_logging()
    with tempfile.TemporaryDirectory(prefix="binloop-run-") as tmp:
        summary_path = Path(config.summary_out or Path(tmp) / "summary.json")
        config = config.replace(summary_out=str(summary_path))
        started = time.perf_counter()
        if config.processes == 1:
            _run_in_process(config)
        else:
            _run_cluster(config)
        summary = (RunSummary.from_json(orjson.loads(summary_path.read_bytes()))
                   if summary_path.exists() else RunSummary())
        summary.elapsed_s = time.perf_counter() - started
        return summary


def _run_in_process(config: Config) -> None:
    from datetime import timedelta

    from bytewax.recovery import RecoveryConfig
    from bytewax.run import cli_main

    from flows.live import build_flow, install_stop_handlers, restore_handlers

    recovery = None
    if config.recovery_dir:
        init_recovery_store(Path(config.recovery_dir), config.workers)
        recovery = RecoveryConfig(Path(config.recovery_dir),
                                  timedelta(milliseconds=config.backup_interval))
    flow = build_flow(config)
    previous = install_stop_handlers()
    try:
        cli_main(flow, workers_per_process=config.workers,
                 epoch_interval=timedelta(milliseconds=config.snapshot_interval),
                 recovery_config=recovery)
    finally:
        restore_handlers(previous)


def _run_cluster(config: Config) -> None:
    """One `python -m bytewax.run flows.live:flow` per process; a signal is passed on
    to all of them (each then stops its sources cleanly)."""
    import os

    from binloop.cluster import cluster_commands

    extra = recovery_args(config) or ["-s", str(config.snapshot_interval / 1000)]
    env = {**os.environ, **config.to_env()}
    procs = [subprocess.Popen(cmd, env=env) for cmd in
             cluster_commands("flows.live:flow", config.processes, config.workers, extra)]

    def forward(signum: int, frame: FrameType | None) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        failed = _wait_all(procs)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if failed:
        raise RuntimeError(f"a Bytewax process exited with code {failed}")


def _wait_all(procs: list[subprocess.Popen[bytes]]) -> int:
    """Wait for every process; when one fails, stop the others. Returns the first failure."""
    while True:
        codes = [p.poll() for p in procs]
        failed = next((c for c in codes if c not in (None, 0)), 0)
        if failed:
            for proc in procs:
                if proc.poll() is None:
                    proc.terminate()
            for proc in procs:
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
            return failed
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.05)
