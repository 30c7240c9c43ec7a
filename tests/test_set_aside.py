"""Records of keys disarmed for good are set aside by the parse step, exactly.

In a dataflow without control commands no key is armed again, so the parse step sets
aside the counted records of keys a shard has already disarmed (`DisarmedForGood`) and
the shard only accounts for them (`Detector.ignores_all`). These tests hold that to the
detector taking each record one by one: same events, counters (disarmed, beyond
lateness) and per-key clocks, with chunks small enough that keys fire in early chunks
and their later records are set aside in later ones.
"""

from __future__ import annotations

import math
import pickle
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from binloop.core.block_parse import BlockParser
from binloop.core.detection import DetectionParams, Detector, DetectorStats
from binloop.core.schema import DEFAULT_LIMITS
from binloop.core.shard_snapshot import load_shard
from binloop.core.window import WindowSpec
from binloop.replay import readers
from flows.operators import DetectShard, DisarmedForGood, Rearm, ShardChunk, ShardState
from tests.engine_runs import engine_config, run_bytewax_on, run_reference_on, same_as_reference
from tests.helpers import rec
from tests.strategies import detection_settings, telemetry_lines

KEYS = [("t", "A"), ("t", "B"), ("u", "A")]


def detector_with(newest: list[int | None], armed: list[bool],
                  lateness: int) -> Detector:
    detector = Detector(DetectionParams(theta=1, allowed_lateness_ms=lateness),
                        external_clock=True)
    for key, ts, is_armed in zip(KEYS, newest, armed, strict=True):
        detector.disarm(key)
        state = detector.keys[key]
        state.armed = is_armed
        state.newest = -math.inf if ts is None else ts
    return detector


def clocks(detector: Detector) -> dict[tuple[str, str], float]:
    return {key: state.newest for key, state in detector.keys.items()}


@settings(max_examples=300, deadline=None)
@given(newest=st.lists(st.none() | st.integers(0, 100), min_size=3, max_size=3),
       armed=st.lists(st.booleans(), min_size=3, max_size=3),
       lateness=st.sampled_from((0, 5, 30)),
       pairs=st.lists(st.tuples(st.sampled_from(KEYS), st.integers(0, 120)), max_size=30))
def test_ignores_all_is_ignores_one_by_one(newest: list[int | None], armed: list[bool],
                                            lateness: int,
                                            pairs: list[tuple[tuple[str, str], int]]) -> None:
    """In order or not, beyond lateness or not; refused (and nothing changed) when a
    key is armed or unknown."""
    bulk = detector_with(newest, armed, lateness)
    single = detector_with(newest, armed, lateness)
    keys, stamps = [key for key, _ in pairs], [ts for _, ts in pairs]
    if any(single.keys[key].armed for key in keys):
        before = (clocks(bulk), DetectorStats())
        assert not bulk.ignores_all(keys, stamps)
        assert (clocks(bulk), bulk.stats) == before
        return
    assert bulk.ignores_all(keys, stamps)
    assert all(single.ignores(key, ts) for key, ts in pairs)
    assert bulk.stats == single.stats
    assert clocks(bulk) == clocks(single)


def test_ignores_all_refuses_a_key_it_does_not_know() -> None:
    detector = detector_with([1, 2, 3], [False, False, False], 0)
    assert not detector.ignores_all([("t", "A"), ("new", "X")], [5, 6])
    assert detector.stats == DetectorStats()


def block_of(records: list[Any]) -> tuple[bytes, Any]:
    import orjson

    block = b"\n".join(orjson.dumps(r) for r in records)
    return block, readers.newline_offsets(block)


@pytest.mark.parametrize("bad_line", [False, True])
def test_parse_sets_aside_exactly_what_skip_names(bad_line: bool) -> None:
    """The fast path (one decoder call) and the line-by-line path (a block with a bad
    line) set aside the same records, in arrival order, and count them as valid."""
    records = [rec(1000 + i, tool=("t", "u")[i % 2], mode=("ARGS.x", "NETWORK.y")[i % 3 == 0],
                   outcome=("failure", "success", "timeout")[i % 3], args={"i": i})
               for i in range(40)]
    block, ends = block_of(records)
    if bad_line:
        block = block + b"\n{not json"
        ends = readers.newline_offsets(block)
    parser = BlockParser(frozenset({"failure", "timeout"}), DEFAULT_LIMITS)
    whole = parser.parse([], "s", 1, block, ends)
    skip = {("t", "ARGS.x"): "group-t", ("u", "NETWORK.y"): "group-u"}
    aside = parser.parse([], "s", 1, block, ends, skip)
    assert (parser.blocks_by_line > 0) == bad_line
    assert aside.valid == whole.valid and len(aside.dead) == len(whole.dead)
    assert aside.max_ts == whole.max_ts
    named = [c for c in whole.counted if (c[1], c[2]) in skip]
    assert named, "the records must include some that skip names"
    assert aside.counted == [c for c in whole.counted if (c[1], c[2]) not in skip]
    assert aside.skipped == [skip[(c[1], c[2])] for c in named]
    assert aside.skipped_ts == [c[3] for c in named]


def test_a_chunk_s_set_aside_records_survive_a_snapshot() -> None:
    """A chunk waiting in the reorder buffer keeps its set-aside records across a
    snapshot (plain data) and a resume."""
    params = DetectionParams(theta=1, window=WindowSpec.parse("global"))
    shard = DetectShard(params, shards=1, resume=None)
    shard.on_batch([ShardChunk("p", 0, [(("t", "ARGS"), (rec(5, "t", "ARGS"), "t", "ARGS", 5, 1))],
                               0, 5)])
    waiting = ShardChunk("p", 2, [], 0, 40, ignored=([("t", "ARGS"), ("t", "ARGS")], [40, 2]))
    shard.on_batch([waiting])  # chunk 1 has not come: 2 waits
    plain = pickle.loads(pickle.dumps(shard.snapshot()))
    state = load_shard(plain, params, ShardState, ShardChunk)
    assert state.pending["p"][2].ignored == ([("t", "ARGS"), ("t", "ARGS")], [40, 2])
    restored = DetectShard(params, shards=1, resume=plain)
    out, _ = restored.on_batch([ShardChunk("p", 1, [], 0, 6)])
    (stats,) = [x for x in out if isinstance(x, DetectorStats)]
    assert stats.disarmed == 2 and restored.state.detector.keys[("t", "ARGS")].newest == 40


def test_a_shard_notes_what_it_disarms_and_refuses_a_rearm() -> None:
    params = DetectionParams(theta=1, window=WindowSpec.parse("global"))
    disarmed = DisarmedForGood()
    shard = DetectShard(params, shards=1, resume=None, disarmed=disarmed)
    shard.on_batch([ShardChunk("p", 0, [(("t", "ARGS"), (rec(5, "t", "ARGS"), "t", "ARGS", 5, 1))],
                               0, 5)])
    assert disarmed.keys == {("t", "ARGS")}
    resumed = DetectShard(params, 1, shard.snapshot(), disarmed=DisarmedForGood())
    assert resumed._disarmed is not None and resumed._disarmed.keys == {("t", "ARGS")}
    with pytest.raises(RuntimeError, match="re-arm"):
        shard.on_batch([Rearm(("t", "ARGS"), 0)])


def test_records_set_aside_for_a_key_still_armed_stop_the_run() -> None:
    """Never by the parse step (it sets aside only keys a shard disarmed); a bug would
    lose records, so the shard refuses rather than guess."""
    shard = DetectShard(DetectionParams(theta=3), shards=1, resume=None)
    with pytest.raises(RuntimeError, match="not disarmed"):
        shard.on_batch([ShardChunk("p", 0, [], 0, 5, ignored=([("t", "A")], [5]))])


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(lines=telemetry_lines(max_lag=3000, max_size=80), knobs=detection_settings(),
       shards=st.sampled_from((1, 3)), block_bytes=st.sampled_from((200, 700, 3000)))
def test_flow_with_records_set_aside_agrees_with_reference(
        tmp_path_factory: pytest.TempPathFactory, lines: list[bytes], knobs: dict[str, Any],
        shards: int, block_bytes: int) -> None:
    """Small blocks, so that keys fire in early chunks and later chunks set their records
    aside; events, dead letters, lates and counters as the reference gives them."""
    base = tmp_path_factory.mktemp("aside")
    path = base / "in.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    extra = {"shards": shards}
    reference = run_reference_on(engine_config(path, base / "ref", **knobs, **extra))
    with mock.patch.object(readers, "READ_BYTES", block_bytes):
        one = run_bytewax_on(engine_config(path, base / "bw1", **knobs, **extra))
        three = run_bytewax_on(engine_config(path, base / "bw3", **knobs, **extra), workers=3)
    same_as_reference(one, reference)
    same_as_reference(three, reference)


def test_flow_sets_records_aside_and_agrees(tmp_path: Path) -> None:
    """A replay in many chunks where keys fire early: most failures are set aside (the
    shards account for them in bulk) and the outcome is the reference's."""
    import orjson

    lines = [orjson.dumps({"ts": 1_700_000_000_000 + i * 10 - (i % 7) * 3000,
                           "session_id": i // 50, "tool": f"tool{i % 5}",
                           "outcome": "failure" if i % 3 else "success",
                           "failure_mode": "ARGS.x" if i % 3 else None, "args": {"i": i}})
             for i in range(3000)]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    settings_ = {"theta": 3, "window": WindowSpec.parse("global"), "allowed_lateness": 10_000}
    reference = run_reference_on(engine_config(path, tmp_path / "ref", **settings_))
    calls: list[int] = []
    original = Detector.ignores_all

    def counting(self: Detector, keys: list[Any], stamps: list[int]) -> bool:
        calls.append(len(stamps))
        return original(self, keys, stamps)

    with mock.patch.object(readers, "READ_BYTES", 4096), \
            mock.patch.object(Detector, "ignores_all", counting):
        got = run_bytewax_on(engine_config(path, tmp_path / "bw", **settings_))
    same_as_reference(got, reference)
    assert sum(calls) > 1500, "most failures should have been set aside"
    assert reference.counters["beyond_lateness"] > 0  # the bulk accounting's slow path too


def test_a_new_mode_of_a_key_set_aside_is_parsed_again_in_order(tmp_path: Path) -> None:
    """With mode_level 1, ARGS.x and ARGS.y are one key: once it has fired on ARGS.x, a
    chunk where ARGS.y first appears holds records of the key both set aside (ARGS.x, a
    pair known) and kept (ARGS.y, not known yet); it is parsed again without setting
    aside, so the key's records are accounted in their order."""
    import orjson

    lines = [orjson.dumps({"ts": 1_700_000_000_000 + i * 1000 - (i % 4) * 2500,
                           "session_id": 1, "tool": "t", "outcome": "failure",
                           "failure_mode": "ARGS.x" if i < 300 or i % 2 else "ARGS.y",
                           "args": {"i": i}})
             for i in range(600)]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    settings_ = {"theta": 3, "window": WindowSpec.parse("global"), "mode_level": 1,
                 "allowed_lateness": 2000}
    reference = run_reference_on(engine_config(path, tmp_path / "ref", **settings_))
    parsed_again: list[int] = []
    import flows.operators as operators

    original = operators._split_chunk

    def noting(chunk: Any, parser: Any, router: Any, disarmed: Any = None) -> list[Any]:
        if disarmed is None:
            parsed_again.append(chunk.seq)
        return original(chunk, parser, router, disarmed)

    with mock.patch.object(readers, "READ_BYTES", 4096), \
            mock.patch.object(operators, "_split_chunk", noting):
        got = run_bytewax_on(engine_config(path, tmp_path / "bw", **settings_))
    same_as_reference(got, reference)
    assert parsed_again, "the chunk where ARGS.y first appears is parsed again"
    assert reference.counters["beyond_lateness"] > 0
