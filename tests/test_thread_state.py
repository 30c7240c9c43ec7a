"""Bytewax worker threads keep their Python thread state (binloop.ops.thread_state)."""

from __future__ import annotations

import threading

import bytewax.operators as op
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSink, TestingSource, cluster_main

from binloop.ops.thread_state import keep_thread_state, kept_threads


def counts_by_thread() -> dict[int, list[int]]:
    """A real 2-worker Bytewax run; for each worker thread, what a `threading.local`
    counter read at each call."""
    local = threading.local()

    def count(item: int) -> tuple[int, int]:
        keep_thread_state()
        seen: int = getattr(local, "seen", 0)
        local.seen = seen + 1
        return threading.get_ident(), seen

    flow = Dataflow("thread_state")
    items = op.input("in", flow, TestingSource(list(range(200)), batch_size=1))
    counted = op.map("count", op.redistribute("spread", items), count)
    out: list[tuple[int, int]] = []
    op.output("out", counted, TestingSink(out))
    cluster_main(flow, [], 0, worker_count_per_proc=2)
    by_thread: dict[int, list[int]] = {}
    for thread, seen in out:
        by_thread.setdefault(thread, []).append(seen)
    return by_thread


def test_a_worker_threads_state_lives_across_calls() -> None:
    """Once `keep_thread_state` ran in a worker thread, what the thread keeps in its
    state (a `threading.local` is stored in the thread state's dict) is still there at
    the next call. Without it, pyo3 gives the thread a new state on each entry into
    Python and the counts start again from 0. Twice in one process: the second run's
    threads may get the first run's thread ids, and are kept all the same."""
    before = kept_threads()
    for _ in range(2):
        by_thread = counts_by_thread()
        assert len(by_thread) == 2 and threading.get_ident() not in by_thread
        for seen in by_thread.values():
            assert sorted(seen) == list(range(len(seen)))  # never started again from 0
    assert kept_threads() - before == 4


def test_the_main_thread_is_left_alone() -> None:
    before = kept_threads()
    keep_thread_state()
    keep_thread_state()
    assert kept_threads() == before
