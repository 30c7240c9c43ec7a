"""A shard's eviction clock follows the slowest input partition, not the fastest."""

from __future__ import annotations

from binloop.core.detection import DetectionParams
from flows.operators import DetectShard, ShardChunk
from tests.helpers import rec

HOUR = 3_600_000


def test_a_partition_far_ahead_does_not_evict_a_lagging_one() -> None:
    shard = DetectShard(DetectionParams(theta=3), shards=1, resume=None)
    lagging = [rec(i * 1000, tool="slow") for i in range(3)]
    ahead = [rec(10 * HOUR + i, tool="fast", mode="NETWORK.x") for i in range(2)]

    def chunk(partition: str, seq: int, records: list) -> ShardChunk:
        cands = [((r["tool"], r["failure_mode"]),
                  (r, r["tool"], r["failure_mode"], r["ts"], r["session_id"]))
                 for r in records]
        return ShardChunk(partition, seq, cands, 0, max(r["ts"] for r in records))

    out, _ = shard.on_batch([chunk("b", 0, lagging[:1]), chunk("a", 0, ahead),
                             chunk("b", 1, lagging[1:])])
    events = [o for o in out if isinstance(o, dict)]
    # a single clock at the newest ts (10 h) would have evicted "slow"'s window after
    # its first record; aligned with partition b it fires at its third failure.
    assert [(e["tool"], e["count"]) for e in events] == [("slow", 3)]
    assert shard.state.detector.stats.beyond_lateness == 0
