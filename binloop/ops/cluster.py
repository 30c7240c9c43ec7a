"""Run a Bytewax flow as a local cluster of processes (`python -m bytewax.run`)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence


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
                _stop(procs)
                return failed[0] or 1
            if all(c == 0 for c in codes):
                return 0
            time.sleep(0.05)
    except KeyboardInterrupt:
        _stop(procs, signal.SIGINT)
        raise


def _stop(procs: Sequence[subprocess.Popen[bytes]], sig: int = signal.SIGTERM) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(sig)
    deadline = time.monotonic() + 10
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
