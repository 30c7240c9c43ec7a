"""Shard chunks cross between processes packed as columns (binloop.core.shard_wire):
unpickled, they hold the same (key, candidate) pairs in the same order, and a shard
that skips the ignored ones sees exactly the others."""

from __future__ import annotations

import pickle
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from binloop.core.shard_wire import PackedRecords
from flows.operators import ShardChunk

TOOLS = st.sampled_from(["a", "b", "ünï", ""])
MODES = st.sampled_from(["ARGS.x", "TIMEOUT", "ARGS.y.z"])
SESSIONS = st.one_of(st.integers(-(2**63), 2**64 - 1), st.text(max_size=5),
                     st.integers(2**64, 2**70))  # the last ones do not fit msgpack
ITEMS = st.one_of(st.binary(max_size=30), st.just({"tool": "a", "args": [1, (2, 3)]}))


@st.composite
def pairs(draw: Any) -> tuple[Any, ...]:
    tool, mode = draw(TOOLS), draw(MODES)
    key = (tool, mode.split(".")[0] if draw(st.booleans()) else mode)
    return key, (draw(ITEMS), tool, mode, draw(st.integers(0, 2**63 - 1)), draw(SESSIONS))


@settings(max_examples=300, deadline=None)
@given(records=st.lists(pairs(), max_size=30), cut=st.integers(0, 2**63 - 1))
def test_a_pickled_shard_chunk_holds_the_same_pairs(records: list[Any], cut: int) -> None:
    # One key, one key function: a key is a function of (tool, mode) as in the flow.
    key_of = {(cand[1], cand[2]): key for key, cand in records}
    records = [(key_of[(cand[1], cand[2])], cand) for _, cand in records]
    chunk = ShardChunk("file:x", 7, records, 2, 99, "other", True)
    sent = pickle.dumps(chunk)
    assert pickle.dumps(chunk) == sent  # Bytewax pickles twice (length, bytes): packed once
    back = pickle.loads(sent)
    assert back == chunk
    assert (back.partition, back.seq, back.start_seq, back.max_ts, back.waits_for,
            back.releases) == ("file:x", 7, 2, 99, "other", True)
    assert list(back.records) == records
    packed = all(isinstance(cand[0], bytes)
                 and (isinstance(cand[4], str) or -(2**63) <= cand[4] < 2**64)
                 for _, cand in records)
    assert isinstance(back.records, PackedRecords) == packed
    if packed:
        def ignores(key: tuple[str, str], ts: int) -> bool:
            return key[0] == "a" or ts < cut
        assert list(back.records.unignored(ignores)) == [
            (key, cand) for key, cand in records if not ignores(key, cand[3])]
        again = pickle.loads(pickle.dumps(back))  # sent on: packed as it came
        assert list(again.records) == records
