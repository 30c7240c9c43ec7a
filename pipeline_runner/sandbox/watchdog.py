"""Limits on a whole sandboxed process tree: total RSS and total CPU time.

cgroup v1 without delegation gives an unprivileged process no memory controller, so
one thread samples every watched tree (found from its root pid through
`/proc/<pid>/task/<tid>/children`; orphans are reparented to the pid namespace's init,
which is inside the tree) and kills the tree's pid namespace when the sum of its RSS
passes the memory limit or its CPU seconds (live processes plus reaped children) pass
the CPU limit. The verdict is kept on the :class:`Watched` handle.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

_PAGE: Final = os.sysconf("SC_PAGE_SIZE")
_TICK: Final = os.sysconf("SC_CLK_TCK")
INTERVAL_S: Final = 0.02


def tree(root: int) -> list[int]:
    """`root` and all its live descendants (children lists of every thread)."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as handle:
                    todo.extend(int(c) for c in handle.read().split())
            except OSError:
                pass
    return found


def usage(pids: list[int]) -> tuple[int, float]:
    """(total RSS in bytes, total CPU seconds incl. reaped children) of these pids."""
    rss, ticks = 0, 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as handle:
                rss += int(handle.read().split()[1]) * _PAGE
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            ticks += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        except (OSError, IndexError, ValueError):
            continue
    return rss, ticks / _TICK


@dataclass
class Watched:
    root: int
    memory_bytes: int
    cpu_s: float
    kill: Callable[[], None]
    verdict: str = ""
    peak_rss: int = 0
    done: threading.Event = field(default_factory=threading.Event)


class Watchdog:
    """One sampling thread for every sandboxed tree of this process."""

    _instance: Watchdog | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self._watched: dict[int, Watched] = {}
        self._wake = threading.Event()
        threading.Thread(target=self._loop, daemon=True, name="binloop-sandbox-watchdog").start()

    @classmethod
    def get(cls) -> Watchdog:
        with cls._lock:
            if cls._instance is None:
                cls._instance = Watchdog()
            return cls._instance

    def watch(self, root: int, memory_bytes: int, cpu_s: float,
              kill: Callable[[], None]) -> Watched:
        handle = Watched(root, memory_bytes, cpu_s, kill)
        with self._lock:
            self._watched[id(handle)] = handle
        self._wake.set()
        return handle

    def unwatch(self, handle: Watched) -> None:
        with self._lock:
            self._watched.pop(id(handle), None)
        handle.done.set()

    def _loop(self) -> None:
        while True:
            with self._lock:
                handles = list(self._watched.values())
            if not handles:
                self._wake.wait()
                self._wake.clear()
                continue
            for handle in handles:
                self._check(handle)
            threading.Event().wait(INTERVAL_S)

    def _check(self, handle: Watched) -> None:
        if handle.verdict:
            return
        rss, cpu = usage(tree(handle.root))
        handle.peak_rss = max(handle.peak_rss, rss)
        if rss > handle.memory_bytes:
            handle.verdict = (f"memory limit: the sandbox's processes used {rss >> 20} MiB RSS "
                              f"in total (limit {handle.memory_bytes >> 20} MiB)")
        elif cpu > handle.cpu_s:
            handle.verdict = (f"CPU limit: the sandbox's processes used {cpu:.1f} CPU seconds "
                              f"in total (limit {handle.cpu_s:g} s)")
        if handle.verdict:
            with contextlib.suppress(Exception):
                handle.kill()


def kill_tree(root: int) -> None:
    """SIGKILL a tree, children first found then all at once (a pid namespace's init
    among them takes the rest of its namespace with it)."""
    for pid in reversed(tree(root)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
