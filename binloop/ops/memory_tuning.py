"""Memory settings for a process that runs a dataflow: the garbage collector and malloc.

The dataflow's items are acyclic (bytes, tuples, small dataclasses): the cyclic
collector never frees one, but a chunk of 1 MiB makes tens of thousands of young tuples,
and collecting generation 0 every 700 allocations re-scans them many times over (about
a tenth of a replay's CPU on the anchor file, `benchmarks/engines.py`). So what start-up
made is frozen out of the collector's sight, and generation 0 is collected every 50,000
allocations instead; cycles are still collected, only less often.

Each chunk also allocates and frees buffers of about a MiB (the block read, numpy's
newline masks and offsets). glibc hands such sizes back to the kernel on free (by
`munmap`, or by trimming the heap's top), so the next chunk page-faults fresh zeroed
pages in: on the anchor file about 150,000 faults, a sixth of the replay's CPU time as
system time. Keeping up to `TRIM_BYTES` of freed heap for reuse, and serving buffers up to
`MMAP_THRESHOLD_BYTES` from the heap, brings that to ~10,000 faults with the same peak RSS.
A worker thread of a multi-process run, allocating from its own arena, was hit harder:
a quarter of its CPU in the kernel (0.6 of 2.2 CPU-s on the realistic file), 0.2-0.3 with
these settings. Call this before the workers start. The polars engine's replay
(`binloop detect --engine polars`) reads 8 MiB blocks, a few in flight: tuned, 76,000
faults on the realistic 1M file instead of 123,000 (about its peak RSS in pages).

Start-up itself (importing bytewax, numpy and the flow's modules, building the flow)
makes tens of thousands of long-lived objects and almost no garbage, yet the collector
ran about 75 times over them, 4 of them full collections of the whole heap (`binloop
detect` on a tiny file: 1.045 G instructions with them, 1.0 G without, cachegrind).
`start_up_without_collections` pauses it until `tune_for_dataflow` has frozen what start-up
made: the pattern `gc.freeze`'s documentation gives for a process that forks its peers
(a local cluster's processes 1..n-1 are forked once the flow is built). The few hundred
unreachable objects start-up leaves are frozen with the rest.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

GEN0_THRESHOLD: Final = 50_000
# glibc's mallopt parameters (malloc.h) and the values set (the largest mmap threshold
# glibc takes on 64-bit is 32 MiB).
M_TRIM_THRESHOLD: Final = -1
M_MMAP_THRESHOLD: Final = -3
TRIM_BYTES: Final = 64 << 20
MMAP_THRESHOLD_BYTES: Final = 32 << 20

log = logging.getLogger(__name__)


def tune_for_dataflow() -> None:
    """Freeze the objects made so far, collect young objects less often, and let malloc
    keep freed buffers for reuse."""
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(GEN0_THRESHOLD, gc.get_threshold()[0]), gen1, gen2)
    keep_freed_buffers()


@contextmanager
def start_up_without_collections() -> Iterator[None]:
    """No cyclic collection inside the block (imports, building the flow, then
    `tune_for_dataflow`); the collector is enabled again after it, if it was before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def keep_freed_buffers() -> bool:
    """Set glibc's trim and mmap thresholds (see the module's doc); False where the C
    library is not glibc (nothing is changed there)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the interpreter's own C library
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and \
        bool(mallopt(M_TRIM_THRESHOLD, TRIM_BYTES))
    if not done:
        log.debug("mallopt refused the thresholds: malloc left as it is")
    return done
