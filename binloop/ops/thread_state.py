"""Bytewax's worker threads keep their Python thread state.

Bytewax (pyo3) enters Python from the worker threads it starts itself with
`PyGILState_Ensure` and leaves with `PyGILState_Release`. A thread that holds no thread
state of its own gets a new one on each entry and loses it on each exit: a thread state
and its 16 KiB frame stack (an `mmap`, an `munmap`, the page faults) for every call into
Python. In a multi-process run that is twice for every item sent to another process
(bytewax serialises it once for its length, once for its bytes). `strace -f -c` of
`binloop detect --processes 2` on the realistic 1M-record file counted 23,300 `mmap`
and 23,041 `munmap` calls of 16 KiB, 36,921 `gettid` and 29,062 `futex` calls, and 0.43 s
of system time; with the thread states kept, 790 `mmap`, 532 `munmap` and 0.2 s.

`keep_thread_state` takes one more reference to the calling thread's state, the first
time a worker thread runs binloop's code, and never gives it back: the state lives as
long as the thread (the interpreter frees it at exit). Whether this thread state is kept
already is marked in a `threading.local`, which lives in the thread state itself: a fresh
state carries no mark, whatever the thread's id (ids are handed out again once a thread
ends, as when one process runs several dataflows one after the other). The main thread's
state is permanent already.
"""

from __future__ import annotations

import ctypes
import threading

_MARK = threading.local()
_kept = [0]


def keep_thread_state() -> None:
    """Call from code that Bytewax runs in a worker thread (a partition's or a logic's
    builder); cheap to call again."""
    if getattr(_MARK, "kept", False) or threading.get_ident() == threading.main_thread().ident:
        return
    ctypes.pythonapi.PyGILState_Ensure()  # the interpreter lock is held: a counter += 1
    _MARK.kept = True
    _kept[0] += 1


def kept_threads() -> int:
    """How many thread states have been kept in this process (for tests)."""
    return _kept[0]
