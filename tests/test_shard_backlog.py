"""A shard applies a partition's chunks that wait for another partition's backlog only
after the chunk that releases it, in their order, also across a snapshot."""

from __future__ import annotations

import pickle
from collections.abc import Iterable
from typing import Any

from binloop.core.detection import DetectionParams
from binloop.core.schema import ToolInvocation
from binloop.core.window import WindowSpec
from flows.operators import DetectShard, ShardChunk
from tests.helpers import rec

PARAMS = DetectionParams(theta=2, window=WindowSpec("global"))


def chunk(partition: str, seq: int, records: list[ToolInvocation],
          waits_for: str | None = None, releases: bool = False) -> ShardChunk:
    max_ts = max((r["ts"] for r in records), default=None)
    # As the parse step hands them over: each counted record with its key.
    cands = [((r["tool"], r["failure_mode"]),
              (r, r["tool"], r["failure_mode"], r["ts"], r["session_id"])) for r in records]
    return ShardChunk(partition, seq, cands, 0, max_ts, waits_for, releases)


def events(out: Iterable[Any]) -> list[Any]:
    return [o for o in out if isinstance(o, dict)]


def test_newer_records_wait_for_the_backlog_release() -> None:
    backlog, first, second = rec(1000, session=61), rec(2000, session=117), \
        rec(3000, session=117)
    shard = DetectShard(PARAMS, shards=1, resume=None)
    out, _ = shard.on_batch([chunk("T/1", 0, [first], "T/0"),
                             chunk("T/1", 1, [second], "T/0")])
    assert events(out) == [] and shard.state.detector.stats.counted == 0
    # A snapshot taken meanwhile keeps the held chunks.
    shard = DetectShard(PARAMS, shards=1, resume=shard.snapshot())
    out, _ = shard.on_batch([chunk("T/0", 0, [backlog], releases=True)])
    [event] = events(out)
    assert [r["ts"] for r in event["evidence"]] == [1000, 2000]
    assert shard.state.held == {} and shard.state.released == {"T/0"}


def test_a_release_without_backlog_lets_everything_through_in_order() -> None:
    shard = DetectShard(PARAMS, shards=1, resume=None)
    out, _ = shard.on_batch([chunk("T/1", 1, [rec(3000)], "T/0"),
                             chunk("T/0", 0, [], releases=True),
                             chunk("T/1", 0, [rec(2000)], "T/0")])
    [event] = events(out)
    assert [r["ts"] for r in event["evidence"]] == [2000, 3000]
    # Once released, chunks that name the partition are applied at once.
    out, _ = shard.on_batch([chunk("T/2", 0, [rec(4000, tool="u")], "T/0")])
    assert shard.state.detector.stats.counted == 1


def test_a_store_written_before_the_backlog_order_resumes() -> None:
    shard = DetectShard(PARAMS, shards=1, resume=None)
    state = shard.state
    del state.__dict__["released"], state.__dict__["held"]
    resumed = DetectShard(PARAMS, shards=1, resume=pickle.dumps(state))
    assert resumed.state.released == set() and resumed.state.held == {}
