"""The dataflow process's memory settings: freed MiB buffers are reused, not faulted in
again (measured as page faults in a fresh interpreter, with and without the tuning)."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from binloop.ops import memory_tuning

FAULTS_OF_CHURN = """
import resource, sys
if sys.argv[1] == "tuned":
    from binloop.ops.memory_tuning import keep_freed_buffers
    assert keep_freed_buffers()
keep = [bytes(4096)]  # something below the buffers, so the heap's top can be trimmed
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(100):
    # a chunk's buffers (block, newline mask, offsets), zero-filled: every page touched
    buffers = [bytearray(1 << 20) for _ in range(3)]
    keep.append(bytes(64))
    del buffers
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", FAULTS_OF_CHURN, mode], capture_output=True,
                          text=True, check=True, timeout=60)
    return int(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_buffers_are_reused_rather_than_faulted_in_again() -> None:
    plain, tuned = _faults("plain"), _faults("tuned")
    # 300 MiB of churn, 3 MiB at a time: untuned, glibc returns each buffer to the kernel (tens of
    # thousands of faults); tuned, the first buffer's pages are reused.
    assert plain > 10_000, plain
    assert tuned < plain / 10, (tuned, plain)


def test_dataflow_tuning_freezes_and_raises_gen0() -> None:
    before = gc.get_threshold()
    try:
        memory_tuning.tune_for_dataflow()
        assert gc.get_threshold()[0] >= memory_tuning.GEN0_THRESHOLD
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
