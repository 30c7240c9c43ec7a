"""`binloop detect`: replay telemetry through an engine and print a summary."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from binloop.core.config import Config, add_arguments, load_config
from binloop.core.errors import EX_DATAERR, EX_SOFTWARE

if TYPE_CHECKING:
    import subprocess

    from binloop.core.summary import RunSummary
    from binloop.ops.cluster import ForkedPeer


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "detect", help="replay telemetry files and fire BINEvents",
        description="Replay telemetry (JSONL, JSONL.gz, Parquet, a directory, or - for stdin) "
                    "and write the BINEvents it fires.")
    add_arguments(parser, "detect")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = load_config(args)
    if not config.input:
        raise ValueError("--input is required (a file, a directory, or - for stdin)")
    summary = detect(config)
    print(summary.render(), file=sys.stderr)
    return EX_DATAERR if summary.damaged_files else 0


def detect(config: Config) -> Any:
    """Run the configured engine on `config.input`; returns its RunSummary."""
    from binloop.replay.engine_outputs import check_outputs
    from binloop.replay.readers import list_input_files

    list_input_files(config.input or "", config.follow_symlinks)  # fail early and clearly
    check_outputs(config)
    if config.engine == "reference":
        from binloop.engines.reference import run_reference

        return run_reference(config)
    if config.engine == "polars":
        from binloop.engines.polars.engine import run_polars
        from binloop.ops.memory_tuning import keep_freed_buffers

        # Each block the engine reads (8 MiB) is freed once detected: kept for the next
        # one rather than faulted in again (see binloop.ops.memory_tuning).
        keep_freed_buffers()
        return run_polars(config)
    return run_bytewax(config)


def run_bytewax(config: Config) -> Any:
    """Run flows.detect in this process (1 process) or as a local cluster."""
    started = time.perf_counter()
    if config.shards is None:
        # `binloop detect` keeps no recovery store that would fix the shards' count and
        # names: one shard per worker spares each chunk the hand-offs of empty shards
        # (and with one worker its records the routing), and names that Bytewax places
        # one per worker spread the detection evenly (flows.placement).
        config = config.replace(shards=config.workers * config.processes,
                                placed_shards=True)
    summary = _in_one_process(config) if config.processes == 1 else _as_cluster(config)
    summary.elapsed_s = time.perf_counter() - started
    return summary


def _in_one_process(config: Config) -> RunSummary:
    """The flow here; its summary sink hands the counters over in memory."""
    from binloop.core.summary import RunSummary
    from sinks.jsonl_file import DEFERRED_ERRORS

    # An input with no lines at all never reaches the sink: all zeros.
    totals = [RunSummary()]

    def keep(summary: RunSummary) -> None:
        totals[0] = summary

    DEFERRED_ERRORS.clear()
    _run_here(config.replace(summary_out=None), on_summary=keep)
    if DEFERRED_ERRORS:
        raise DEFERRED_ERRORS[0]
    return RunSummary.from_json(totals[0].to_json())  # a copy, as a summary file holds it


def _as_cluster(config: Config) -> RunSummary:
    """A local cluster; the process that sums the counters (any of them) writes them
    to a file, read here once all have finished."""
    import tempfile

    from binloop.ops.cluster import free_ports

    with tempfile.TemporaryDirectory(prefix="binloop-") as tmp:
        summary_path = Path(tmp) / "summary.json"
        _run_here(config.replace(summary_out=str(summary_path)),
                  [f"127.0.0.1:{port}" for port in free_ports(config.processes)])
        return read_summary(summary_path)


def _run_here(config: Config, addresses: list[str] | None = None,
              on_summary: Callable[[RunSummary], None] | None = None) -> None:
    """The dataflow in this process: all of it (no `addresses`), or, of a local cluster
    at `addresses`, process 0 here and processes 1..n-1 forked from this one once the
    flow is built (they pay no interpreter start-up and no imports of their own)."""
    from binloop.ops.memory_tuning import start_up_without_collections, tune_for_dataflow

    with start_up_without_collections():
        from bytewax.run import cli_main

        from binloop.ops.cluster import bytewax_peer, local_peers, wait_for_listeners
        from flows.detect import build_flow

        flow = build_flow(config, on_summary=on_summary)
        tune_for_dataflow()

    def run(process_id: int | None) -> None:
        if addresses is not None and process_id:
            wait_for_listeners(addresses[:process_id])
        try:
            cli_main(flow, workers_per_process=config.workers, process_id=process_id,
                     addresses=addresses)
        except Exception as exc:
            raise unwrap_flow_error(exc) from None

    if addresses is None:
        run(None)
        return
    peers = local_peers(len(addresses), run, partial(
        bytewax_peer, "flows.detect:flow", addresses, workers=config.workers,
        env=config.to_env()), lambda exc: str(unwrap_flow_error(exc)))
    _run_as_process_0(peers, partial(run, 0))


def _run_as_process_0(peers: Sequence[ForkedPeer | subprocess.Popen[bytes]],
                      run_process_0: Callable[[], None]) -> None:
    """Run process 0 of a local cluster here while watching its `peers`: a failed peer
    ends the command (process 0 would wait for it for ever)."""
    from binloop.ops.cluster import stop_peers, watch_peers

    def peer_failed(code: int) -> None:
        # Process 0 cannot be stopped from another thread while it waits for its peer.
        print(f"binloop: error: a Bytewax process exited with code {code}", file=sys.stderr)
        stop_peers(peers)
        os._exit(EX_SOFTWARE)

    watching = watch_peers(peers, peer_failed)
    try:
        run_process_0()
        watching.set()
        codes = [peer.wait() for peer in peers]
        if any(codes):
            raise RuntimeError(f"a Bytewax process exited with code {max(codes)}")
    finally:
        watching.set()
        stop_peers(peers)


def unwrap_flow_error(exc: BaseException) -> BaseException:
    """The error of ours that a Bytewax run failed with (Bytewax wraps it, with a Rust
    and a Python traceback in its message), else `exc` itself."""
    from binloop.core.errors import CommandError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, CommandError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return exc


def read_summary(path: Path) -> RunSummary:
    """The counters a finished flow wrote. The summary sink is built when the first
    counters reach it, so an input with no lines at all leaves no file: all zeros."""
    import orjson

    from binloop.core.summary import RunSummary

    if not path.exists():
        return RunSummary()
    return RunSummary.from_json(orjson.loads(path.read_bytes()))
