"""Run a Bytewax flow as a local cluster of processes (`python -m bytewax.run`)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def cluster_commands(flow_ref: str, processes: int, workers: int,
                     extra_args: Sequence[str] = ()) -> list[list[str]]:
    """The `bytewax.run` command line of each process of a local cluster."""
    addresses = ";".join(f"127.0.0.1:{port}" for port in free_ports(processes))
    base = [sys.executable, "-m", "bytewax.run", flow_ref, "-w", str(workers), *extra_args]
    if processes == 1:
        return [base]
    return [[*base, "-i", str(i), "-a", addresses] for i in range(processes)]


def start_peers(flow_ref: str, processes: int, workers: int,
                env: Mapping[str, str]) -> tuple[list[str], list[subprocess.Popen[bytes]]]:
    """Processes 1..n-1 of a local cluster whose process 0 the caller runs itself (it
    then pays no second interpreter start): the cluster's addresses, and the peers."""
    commands = cluster_commands(flow_ref, processes, workers)
    addresses = commands[0][commands[0].index("-a") + 1].split(";")
    full_env = {**os.environ, **env}
    return addresses, [subprocess.Popen(cmd, env=full_env) for cmd in commands[1:]]


def watch_peers(peers: Sequence[subprocess.Popen[bytes]],
                on_failure: Callable[[int], None]) -> threading.Event:
    """Call `on_failure(code)` from a watcher thread if a peer exits non-zero (process 0,
    running in the caller, would otherwise wait for it for ever); set the returned event
    to stop watching."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.05):
            failed = [code for p in peers if (code := p.poll()) not in (None, 0)]
            if failed:
                on_failure(failed[0])
                return

    threading.Thread(target=watch, name="binloop-peer-watch", daemon=True).start()
    return done


def run_cluster(flow_ref: str, processes: int, workers: int, env: Mapping[str, str],
                extra_args: Sequence[str] = ()) -> int:
    """Start the processes, wait for all; if one fails, stop the others. Returns an exit code."""
    full_env = {**os.environ, **env}
    procs = [subprocess.Popen(cmd, env=full_env)
             for cmd in cluster_commands(flow_ref, processes, workers, extra_args)]
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [c for c in codes if c not in (None, 0)]
            if failed:
                stop_peers(procs)
                return failed[0] or 1
            if all(c == 0 for c in codes):
                return 0
            time.sleep(0.05)
    except KeyboardInterrupt:
        stop_peers(procs, signal.SIGINT)
        raise


def stop_peers(procs: Sequence[subprocess.Popen[bytes]], sig: int = signal.SIGTERM) -> None:
    """Stop the processes that still run (`sig`, then SIGKILL after 10 s)."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(sig)
    deadline = time.monotonic() + 10
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
