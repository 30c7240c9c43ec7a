"""The dataflow process's memory settings: freed MiB buffers are reused, not faulted in
again (measured as page faults in a fresh interpreter, with and without the tuning)."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import pytest

from binloop.ops import memory_tuning
from binloop.ops.memory_tuning import start_up_without_collections

FAULTS_OF_CHURN = """
import ctypes, resource, sys
if sys.argv[1] == "tuned":
    from binloop.ops.memory_tuning import keep_freed_buffers
    assert keep_freed_buffers()
elif sys.argv[1] == "returning":
    # a fixed 128 KiB mmap threshold (glibc's default, without its dynamic raise): every MiB
    # buffer is its own mapping, unmapped when freed
    assert ctypes.CDLL(None).mallopt(-3, 128 << 10)
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
    returning, plain, tuned = _faults("returning"), _faults("plain"), _faults("tuned")
    # 300 MiB of churn, 3 MiB at a time, is 76800 pages. Buffers returned to the kernel fault every
    # page in again; tuned, the first chunk's pages are reused. Untuned glibc lies in between, and
    # where depends on the heap's layout (it was 19780 in one checkout, 5379 in another).
    assert returning > 70_000, returning
    assert tuned < returning / 20, (tuned, returning)
    assert tuned <= plain, (tuned, plain)


BLOCK_CHURN_AFTER_DETECT = """
import ctypes, resource, sys
from binloop.cli.commands.detect import detect
from binloop.core.config import Config
if sys.argv[1] == "returning":
    assert ctypes.CDLL(None).mallopt(-3, 128 << 10)  # as in FAULTS_OF_CHURN
detect(Config(input=sys.argv[2], engine=sys.argv[3], out=sys.argv[4], progress=False))
keep = [bytes(4096)]
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
blocks = []  # the polars engine's blocks (read.READ_BYTES) in flight, freed once detected
for i in range(20):
    blocks.append(b"x" * (8 << 20))
    keep.append(bytes(64))
    if len(blocks) > 3:
        del blocks[0]
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_polars_engine_replay_reuses_its_freed_blocks(tmp_path: Path) -> None:
    telemetry = tmp_path / "t.jsonl"
    telemetry.write_text('{"session_id": 1, "ts": 1700000000000, "tool": "t", '
                         '"outcome": "success"}\n')

    def faults(mode: str, engine: str) -> int:
        done = subprocess.run([sys.executable, "-c", BLOCK_CHURN_AFTER_DETECT, mode,
                               str(telemetry), engine, str(tmp_path / f"{mode}.jsonl")],
                              capture_output=True, text=True, check=True, timeout=120)
        return int(done.stdout)

    # 20 blocks of 8 MiB are 40960 pages, all faulted in when freed blocks go back to the
    # kernel; kept, only the first 3 in flight fault (6144 pages). Untuned glibc lies in
    # between (16342 after a reference replay in this checkout, 8186 after a polars one).
    returning, polars = faults("returning", "reference"), faults("plain", "polars")
    assert returning > 35_000, returning
    assert polars < 7_000, (polars, returning)


def test_dataflow_tuning_freezes_and_raises_gen0() -> None:
    before = gc.get_threshold()
    try:
        memory_tuning.tune_for_dataflow()
        assert gc.get_threshold()[0] >= memory_tuning.GEN0_THRESHOLD
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


START_UP_COLLECTIONS = """
import gc, sys
from binloop.ops.memory_tuning import start_up_without_collections
collections = []
gc.callbacks.append(lambda phase, info: collections.append(1) if phase == "start" else None)
if sys.argv[1] == "paused":
    with start_up_without_collections():
        import bytewax.operators, flows.detect
        during = len(collections)
else:
    import bytewax.operators, flows.detect
    during = len(collections)
print(during, gc.isenabled())
"""


def test_start_up_runs_no_collection_and_leaves_the_collector_as_it_was() -> None:
    def run(mode: str) -> list[str]:
        return subprocess.run([sys.executable, "-c", START_UP_COLLECTIONS, mode],
                              capture_output=True, text=True, check=True,
                              timeout=120).stdout.split()

    assert run("paused") == ["0", "True"]
    collections, enabled = run("default")
    assert int(collections) > 10 and enabled == "True"  # what the pause saves
    enabled_before = gc.isenabled()
    try:
        gc.disable()  # a caller that disabled the collector keeps it disabled
        with start_up_without_collections():
            assert not gc.isenabled()
        assert not gc.isenabled()
        gc.enable()
        with pytest.raises(RuntimeError), start_up_without_collections():
            raise RuntimeError("a failed import")
        assert gc.isenabled()
    finally:
        (gc.enable if enabled_before else gc.disable)()
