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
long as the thread (the interpreter frees it at exit). The main thread's state is
permanent already. A thread id that the system hands out again, after its thread ended,
is not taken twice: that thread merely pays as before.
"""

from __future__ import annotations

import ctypes
import threading

_KEPT: set[int] = set()


def keep_thread_state() -> None:
    """Call from code that Bytewax runs in a worker thread (a partition's or a logic's
    builder); cheap to call again."""
    ident = threading.get_ident()
    if ident in _KEPT or ident == threading.main_thread().ident:
        return
    _KEPT.add(ident)
    ctypes.pythonapi.PyGILState_Ensure()  # the interpreter lock is held: a counter += 1


def kept_threads() -> int:
    """How many threads' states are kept (for tests)."""
    return len(_KEPT)
