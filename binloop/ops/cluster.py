"""Run a Bytewax flow as a local cluster of processes (`python -m bytewax.run`, or
processes forked from the caller once it has imported and built the flow)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial

from binloop.ops.listening import listening_ports


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


def local_peers(processes: int, run_peer: Callable[[int], None],
                spawn: Callable[[int], subprocess.Popen[bytes]],
                describe: Callable[[BaseException], str] = str,
                ) -> list[ForkedPeer | subprocess.Popen[bytes]]:
    """Processes 1..processes-1 of a local cluster whose process 0 the caller runs
    itself: forked from it, each running `run_peer(i)`, where `can_fork`; otherwise
    (another thread runs: an embedding program) each `spawn(i)`, a process of its own."""
    if can_fork():
        return [fork_peer(partial(run_peer, i), describe) for i in range(1, processes)]
    return [spawn(i) for i in range(1, processes)]


def bytewax_peer(flow_ref: str, addresses: Sequence[str], process_id: int, workers: int,
                 env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """Process `process_id` of the local cluster at `addresses`, a `python -m
    bytewax.run` of its own."""
    return subprocess.Popen([sys.executable, "-m", "bytewax.run", flow_ref, "-w", str(workers),
                             "-i", str(process_id), "-a", ";".join(addresses)],
                            env={**os.environ, **env})


def can_fork() -> bool:
    """Whether this process can fork its cluster's peers: POSIX, and no other thread
    runs (a thread's locks would be copied held into the child)."""
    return hasattr(os, "fork") and threading.active_count() == 1


def wait_for_listeners(addresses: Sequence[str], timeout_s: float = 5.0) -> bool:
    """Wait until every `host:port` of this machine's `addresses` is listening (asked of
    the kernel, never by connecting: a Bytewax process takes any connection to its port
    as a peer's); False after `timeout_s` or where the kernel does not say.

    A Bytewax process connects to the processes below it and, when one is not yet
    listening, retries only after a second: a peer forked a few milliseconds before
    process 0 binds its port would otherwise lose that second.
    """
    wanted = {int(address.rpartition(":")[2]) for address in addresses}
    deadline = time.monotonic() + timeout_s
    while wanted:
        try:
            wanted -= listening_ports()
        except OSError:
            return False
        if not wanted:
            break
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)
    return True


class ForkedPeer:
    """A process forked from this one (`fork_peer`), seen through the part of
    `subprocess.Popen` that `watch_peers` and `stop_peers` use."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._lock = threading.Lock()  # the watcher thread and the caller both reap

    def poll(self) -> int | None:
        with self._lock:
            if self.returncode is None:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.0005  # a peer that ends with process 0 exits within milliseconds
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"process {self.pid}", timeout or 0.0)
            time.sleep(pause)
            pause = min(2 * pause, 0.01)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def fork_peer(run: Callable[[], None], describe: Callable[[BaseException], str] = str,
              ) -> ForkedPeer:
    """`run()` in a child forked from this process, which exits with its outcome: 0, the
    code of a `SystemExit`, 130 on Ctrl-C, 1 (with a one-line error) on any other error.

    The child starts with everything this process imported and built (a Bytewax
    process's start-up is mostly imports: 0.3-0.5 CPU-s here), so fork only from the
    main thread, before starting threads or opening connections. It never unwinds the
    caller's stack (no `finally`, no `atexit` of the parent runs in it).
    """
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid:
        return ForkedPeer(pid)
    code = 1
    try:
        run()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        code = 130
    except BaseException as exc:
        print(f"binloop: error: {describe(exc)}", file=sys.stderr)
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing to add
                stream.flush()
        os._exit(code)


def watch_peers(peers: Sequence[subprocess.Popen[bytes] | ForkedPeer],
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


def stop_peers(procs: Sequence[subprocess.Popen[bytes] | ForkedPeer],
               sig: int = signal.SIGTERM) -> None:
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
