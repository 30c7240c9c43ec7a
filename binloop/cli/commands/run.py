"""`binloop run`: the live job on NATS JetStream (flows.live)."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from binloop.core.config import Config, add_arguments, load_config
from binloop.core.errors import ServiceUnavailable, UsageError

if TYPE_CHECKING:
    from binloop.ops.cluster import ForkedPeer

NEEDS_LIBRARY = ("--library DIR is required to build tools for the events (or run the "
                 "detector alone with --no-build)")


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
    if config.build and not config.library:
        raise ValueError(NEEDS_LIBRARY)
    if not config.nats:
        raise ValueError("--nats URL is required (e.g. nats://127.0.0.1:4222)")
    from binloop.replay.engine_outputs import check_outputs

    check_outputs(config, config.events_out)
    summary = run_live(config)
    report_summary(summary)
    return 0


def report_summary(summary: Any) -> None:
    """The run's counters on stderr (a JSON log line with --log-format json)."""
    import logging

    from binloop.core.logs import current_format

    log = logging.getLogger("binloop.run")
    if summary is None:
        log.info("this process does not hold the job's summary (another process of the "
                 "cluster does; see binloop status)")
    elif current_format() == "json":
        log.info("summary", extra={"summary": summary.to_json()})
    else:
        print(summary.render(), file=sys.stderr)


def init_recovery_store(config: Config, process_id: int = 0) -> Config:
    """Create the recovery store unless it exists (process 0), or wait for it; returns
    `config` with the shard count the store is written with (`--shards auto` takes it,
    another explicit count is an error: the state cannot be re-sharded)."""
    from binloop.core.config import ConfigError
    from binloop.ops.recovery_store import prepare_store, store_shards
    from binloop.ops.shutdown import stop_requested

    assert config.recovery_dir
    path = Path(config.recovery_dir)
    prepare_store(path, store_partitions(config), process_id, stop_requested,
                  shards=config.shard_count())
    stored = store_shards(path)
    if config.shards is not None and config.shards != stored:
        raise ConfigError(f"the recovery store {path} holds state in {stored} shards, not "
                          f"--shards {config.shards}: resume with --shards {stored} (or auto), "
                          "or start a new store")
    return config.replace(shards=stored)


def store_partitions(config: Config) -> int:
    return config.recovery_partitions or config.workers * config.processes


def run_live(config: Config) -> Any:
    """Run flows.live in this process, as a local cluster, or as one process of a
    cluster (`--addresses`); returns its RunSummary (None for a process of a
    cluster that does not hold the summary)."""
    import orjson

    from binloop.core.logs import configure_logging
    from binloop.core.summary import RunSummary
    from binloop.ops.cluster_spec import cluster_spec

    configure_logging(config)
    spec = cluster_spec(config)
    preflight(config)
    with tempfile.TemporaryDirectory(prefix="binloop-run-") as tmp:
        summary_path = Path(config.summary_out or Path(tmp) / "summary.json")
        config = config.replace(summary_out=str(summary_path))
        started = time.perf_counter()
        if spec is not None:
            _run_in_process(config.replace(processes=spec.processes), spec.process_id,
                            spec.addresses)
        elif config.processes == 1:
            _run_in_process(config)
        else:
            _run_cluster(config)
        if not summary_path.exists():
            return None if spec is not None else RunSummary()
        summary = RunSummary.from_json(orjson.loads(summary_path.read_bytes()))
        summary.elapsed_s = time.perf_counter() - started
        return summary


def preflight(config: Config) -> int:
    """Reach NATS and set the telemetry stream up before starting Bytewax, so that a
    wrong URL or a stream binloop cannot use is a one-line error; returns the
    stream's partitions."""
    from binloop.nats.jetstream import StreamSetupError, ensure_telemetry_stream
    from binloop.nats.link import NatsLink
    from flows.live import source_settings

    settings = source_settings(config)
    try:
        with NatsLink(settings.url, "binloop-preflight", settings.connect_timeout_s) as link:
            return link.run(ensure_telemetry_stream(link.js, settings.stream,
                                                    settings.manage_stream))
    except (ConnectionError, TimeoutError) as exc:
        raise ServiceUnavailable(str(exc)) from None
    except StreamSetupError as exc:
        raise UsageError(str(exc)) from None


def _run_in_process(config: Config, process_id: int | None = None,
                    addresses: list[str] | None = None) -> None:
    """`cli_main` on flows.live with the configured epoch (= snapshot) interval and
    recovery store; the process of a cluster when `process_id` is given."""
    from datetime import timedelta

    from bytewax.recovery import RecoveryConfig
    from bytewax.run import cli_main

    from binloop.ops.operations import Operations
    from binloop.ops.shutdown import install_stop_handlers, restore_handlers
    from flows.live import build_flow

    operations = Operations(config, process_id or 0, len(addresses or ()) or 1)
    previous = install_stop_handlers()
    try:
        recovery = None
        if config.recovery_dir:
            store = Path(config.recovery_dir)
            config = init_recovery_store(config, process_id or 0)
            recovery = RecoveryConfig(store,
                                      timedelta(milliseconds=config.backup_interval))
        hooks: dict[str, Any] = {}
        if config.build:
            from binloop.cli.build_service import flow_hooks

            hooks = flow_hooks(config)
        flow = build_flow(config, on_summary=operations.note_summary, **hooks)
        cli_main(flow, workers_per_process=config.workers, process_id=process_id,
                 addresses=addresses,
                 epoch_interval=timedelta(milliseconds=config.snapshot_interval),
                 recovery_config=recovery)
    finally:
        restore_handlers(previous)
        if config.build:
            from binloop.cli.build_service import stop_process_builds

            stop_process_builds()
        operations.close()


def _run_cluster(config: Config) -> None:
    """A local cluster whose process 0 is this one: processes 1..N-1 are forked from
    this process once it has imported the job (they pay no interpreter start-up and no
    imports of their own) and each waits until the processes below it listen; this
    process runs its share in place. A signal stops this process's sources cleanly and
    is passed on to the others, which then do the same."""
    import os
    import threading

    import bytewax.run  # noqa: F401 - imported once, here, for the forked processes

    import binloop.ops.operations  # noqa: F401
    import flows.live  # noqa: F401
    from binloop.core.errors import EX_SOFTWARE
    from binloop.ops.cluster import free_ports, local_peers, stop_peers, wait_for_listeners
    from binloop.ops.shutdown import stop_requested

    if config.recovery_dir:  # once, before the processes race to create it
        config = init_recovery_store(config)
    addresses = [f"127.0.0.1:{port}" for port in free_ports(config.processes)]

    def run_peer(process_id: int) -> None:
        wait_for_listeners(addresses[:process_id])
        _run_in_process(_process_config(config, process_id), process_id, addresses)

    def spawn_peer(process_id: int) -> subprocess.Popen[bytes]:  # `python -m` of its own
        return subprocess.Popen(
            [sys.executable, "-m", "binloop.cli.commands.run", str(process_id),
             ";".join(addresses)],
            env={**os.environ, **_process_config(config, process_id).to_env()})

    peers = local_peers(config.processes, run_peer, spawn_peer)
    done = threading.Event()

    def watch() -> None:
        forwarded = False
        while not done.wait(0.05):
            if stop_requested.is_set() and not forwarded:
                forwarded = True
                for peer in peers:
                    if peer.poll() is None:
                        peer.send_signal(signal.SIGTERM)
            failed = [code for peer in peers if (code := peer.poll()) not in (None, 0)]
            if failed:
                # Process 0 would wait for the failed peer for ever: stop everything.
                print(f"binloop: error: a Bytewax process exited with code {failed[0]}",
                      file=sys.stderr)
                stop_peers(peers)
                os._exit(EX_SOFTWARE)

    threading.Thread(target=watch, name="binloop-peer-watch", daemon=True).start()
    try:
        _run_in_process(config, 0, addresses)
        done.set()
        failed = _wait_all(peers)
    finally:
        done.set()
        stop_peers(peers)
    if failed:
        raise RuntimeError(f"a Bytewax process exited with code {failed}")


def _process_config(config: Config, process_id: int) -> Config:
    """Process i of a local cluster serves its metrics on `--metrics-port` + i."""
    if not config.metrics_port:
        return config
    return config.replace(metrics_port=config.metrics_port + process_id)


def _wait_all(procs: Sequence[subprocess.Popen[bytes] | ForkedPeer]) -> int:
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


def _process_main(argv: list[str]) -> int:
    """A process of a local cluster: `PROCESS_ID ADDRESSES`, settings from BINLOOP_*."""
    from binloop.core.logs import configure_logging

    config = load_config()
    configure_logging(config)
    process_id, addresses = int(argv[0]), argv[1].split(";")
    _run_in_process(config, process_id, addresses)
    return 0


if __name__ == "__main__":
    sys.exit(_process_main(sys.argv[1:]))
