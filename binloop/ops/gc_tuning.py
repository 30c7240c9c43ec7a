"""Garbage-collector settings for a process that runs a dataflow.

The dataflow's items are acyclic (bytes, tuples, small dataclasses): the cyclic
collector never frees one, but a chunk of 1 MiB makes tens of thousands of young tuples,
and collecting generation 0 every 700 allocations re-scans them many times over (about
a tenth of a replay's CPU on the anchor file, `benchmarks/engines.py`). So what start-up
made is frozen out of the collector's sight, and generation 0 is collected every 50,000
allocations instead; cycles are still collected, only less often.
"""

from __future__ import annotations

import gc
from typing import Final

GEN0_THRESHOLD: Final = 50_000


def tune_for_dataflow() -> None:
    """Freeze the objects made so far and collect young objects less often."""
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(GEN0_THRESHOLD, gc.get_threshold()[0]), gen1, gen2)
