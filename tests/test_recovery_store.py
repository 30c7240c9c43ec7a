"""The recovery store: created once by process 0, waited for by the others."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from bytewax.recovery import init_db_dir

from binloop.ops.recovery_store import MARKER, partitions_in, prepare_store, store_ready


def test_process_0_creates_the_store_with_a_marker(tmp_path: Path) -> None:
    store = tmp_path / "recovery"
    prepare_store(store, 3, process_id=0)
    assert [p.name for p in partitions_in(store)] == [f"part-{i}.sqlite3" for i in range(3)]
    assert (store / MARKER).is_file()
    assert [p.name for p in store.iterdir() if p.name.startswith(".")] == []
    before = {p: p.stat().st_mtime_ns for p in partitions_in(store)}
    prepare_store(store, 8, process_id=0)  # an existing store keeps its partitions
    assert {p: p.stat().st_mtime_ns for p in partitions_in(store)} == before


def test_other_processes_wait_for_process_0(tmp_path: Path) -> None:
    store = tmp_path / "recovery"
    ready = threading.Event()

    def process_1() -> None:
        prepare_store(store, 2, process_id=1)
        ready.set()

    waiter = threading.Thread(target=process_1)
    waiter.start()
    time.sleep(0.5)
    assert not ready.is_set() and not store.exists()
    prepare_store(store, 2, process_id=0)
    waiter.join(10)
    assert ready.is_set() and store_ready(store)


def test_a_store_made_by_hand_is_used_as_it_is(tmp_path: Path) -> None:
    init_db_dir(tmp_path, 2)  # python -m bytewax.recovery DIR 2
    assert store_ready(tmp_path)
    prepare_store(tmp_path, 4, process_id=0)
    assert len(partitions_in(tmp_path)) == 2 and not (tmp_path / MARKER).exists()


def test_an_interrupted_creation_is_redone(tmp_path: Path) -> None:
    (tmp_path / ".init-crashed").mkdir()
    init_db_dir(tmp_path, 1)  # one partition moved in before the crash, no marker
    assert not store_ready(tmp_path)
    prepare_store(tmp_path, 3, process_id=0)
    assert len(partitions_in(tmp_path)) == 3 and (tmp_path / MARKER).is_file()
    assert not (tmp_path / ".init-crashed").exists()


def test_waiting_ends_when_the_job_is_stopped(tmp_path: Path) -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(RuntimeError, match="stopped while waiting"):
        prepare_store(tmp_path / "never", 2, process_id=1, stop=stop)
