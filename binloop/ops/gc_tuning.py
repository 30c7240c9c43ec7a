"""Garbage-collector settings for a process that runs a dataflow.

The dataflow's items are acyclic (bytes, tuples, small dataclasses): the cyclic
collector never frees one, but a chunk of 1 MiB makes tens of thousands of young tuples,
and collecting generation 0 every 700 allocations re-scans them many times over (about
a tenth of a replay's CPU on the anchor file, `benchmarks/engines.py`). So what start-up
made is frozen out of the collector's sight, and generation 0 is collected every 50,000
allocations instead; cycles are still collected, only less often.

The allocator too (glibc): a worker thread of a multi-process run allocates from a
thread arena, where each 1 MiB block read and each message received was an `mmap`, its
pages faulted in and `munmap`ed again when freed — a 2-process replay spent a quarter
of each worker's CPU in the kernel that way (0.6 s of 2.2 s on the realistic file,
against 0.2 s for one process). Blocks below `MMAP_BELOW` come from the heap, and the
heap keeps up to `TRIM_ABOVE` of freed memory instead of returning it at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
from typing import Final

GEN0_THRESHOLD: Final = 50_000
MMAP_BELOW: Final = 16 << 20
TRIM_ABOVE: Final = 64 << 20
_M_TRIM_THRESHOLD: Final = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD: Final = -3


def tune_for_dataflow() -> None:
    """Freeze the objects made so far and collect young objects less often; allocate
    blocks from the heap (call before the workers start)."""
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(GEN0_THRESHOLD, gc.get_threshold()[0]), gen1, gen2)
    _tune_malloc()


def _tune_malloc() -> None:
    with contextlib.suppress(OSError, AttributeError):  # not glibc: its defaults
        mallopt = ctypes.CDLL(None).mallopt
        mallopt(_M_MMAP_THRESHOLD, MMAP_BELOW)
        mallopt(_M_TRIM_THRESHOLD, TRIM_ABOVE)
