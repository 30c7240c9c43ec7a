"""`flows.placement` predicts where a real Bytewax cluster runs each state key, so that
`binloop detect` can give each worker exactly one shard."""

from __future__ import annotations

import threading

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSink, TestingSource, cluster_main

from flows.placement import placed_shard_names, worker_of

KEYS = [str(n) for n in range(24)] + ["shard", "ARGS.x\x1ftool", "é", "a" * 17]


def _threads_by_key(keys: list[str], workers: int) -> dict[str, int]:
    """The worker thread each key's state ran on, in a real cluster of `workers`."""
    flow = Dataflow("placement")
    keyed = op.input("in", flow, TestingSource([(key, None) for key in keys]))
    ran = op.stateful_map("where", keyed, lambda state, _: (state, threading.get_ident()))
    seen: list[tuple[str, int]] = []
    op.output("out", ran, TestingSink(seen))
    cluster_main(flow, [], 0, worker_count_per_proc=workers)
    return dict(seen)


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_keys_run_on_the_worker_the_hash_predicts(workers: int) -> None:
    threads = _threads_by_key(KEYS, workers)
    assert set(threads) == set(KEYS)
    by_worker: dict[int, set[int]] = {}
    for key in KEYS:
        by_worker.setdefault(worker_of(key, workers), set()).add(threads[key])
    # Keys predicted on one worker share a thread; keys predicted apart do not.
    assert all(len(found) == 1 for found in by_worker.values())
    assert len({next(iter(found)) for found in by_worker.values()}) == len(by_worker)


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 7])
def test_placed_shards_run_one_per_worker(workers: int) -> None:
    names = placed_shard_names(workers)
    assert len(set(names)) == workers
    assert [worker_of(name, workers) for name in names] == list(range(workers))
    if workers <= 4:
        assert len(set(_threads_by_key(list(names), workers).values())) == workers
