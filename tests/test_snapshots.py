"""Recovery snapshots are versioned plain data (issue 10, point 4).

A shard's snapshot holds no class of binloop's, so moving a module never breaks a
recovery store; a store written in the earlier pickled format (1) is converted while its
classes can be imported and refused with one line when they cannot.
"""

from __future__ import annotations

import io
import pickle
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from binloop.core.detection import DetectionParams
from binloop.core.shard_snapshot import FORMAT, SnapshotError, load_shard
from binloop.core.window import WindowSpec
from flows.operators import DetectShard, ShardChunk, ShardState
from tests.helpers import rec

PLAIN = (dict, list, tuple, str, int, float, bool, bytes, type(None))
WINDOWS = ("session", "global", "sliding:5s")


def assert_plain(value: Any) -> None:
    assert isinstance(value, PLAIN), type(value)
    if isinstance(value, dict):
        for key, item in value.items():
            assert_plain(key)
            assert_plain(item)
    elif isinstance(value, list | tuple):
        for item in value:
            assert_plain(item)


def chunk(partition: str, seq: int, records: list[Any]) -> ShardChunk:
    cands = [((r["tool"], r["failure_mode"]),
              (r, r["tool"], r["failure_mode"], r["ts"], r["session_id"])) for r in records]
    return ShardChunk(partition, seq, cands, 0, max((r["ts"] for r in records), default=None))


def busy_shard(params: DetectionParams) -> tuple[DetectShard, list[ShardChunk]]:
    """A shard with windows of several keys and sessions, a fired (disarmed) key, a
    re-armed one, and a chunk waiting in the reorder buffer; and what comes next."""
    shard = DetectShard(params, shards=2, resume=None)
    first = [rec(1000 + i, tool=f"t{i % 3}", session=i % 2 or "s") for i in range(7)]
    shard.on_batch([chunk("a", 0, first), chunk("b", 1, [rec(1200, tool="t9")])])
    shard.state.detector.rearm(("t0", "ARGS.x"), 0)
    later = [chunk("b", 0, [rec(1300 + i, tool="t1", session=3) for i in range(4)]),
             chunk("a", 1, [rec(2000 + i, tool="t0") for i in range(3)])]
    return shard, later


def outputs(shard: DetectShard, chunks: list[ShardChunk]) -> list[Any]:
    out, _ = shard.on_batch(chunks)
    return [o for o in out if isinstance(o, dict)]


@pytest.mark.parametrize("window", WINDOWS)
def test_a_snapshot_is_plain_data_and_resumes_the_same_shard(window: str) -> None:
    params = DetectionParams(theta=3, window=WindowSpec.parse(window), evidence_max=2)
    shard, later = busy_shard(params)
    snapshot = shard.snapshot()
    assert_plain(snapshot)
    assert snapshot["format"] == FORMAT and snapshot["pending"]
    restored = DetectShard(params, shards=2, resume=pickle.loads(pickle.dumps(snapshot)))
    assert restored.snapshot() == snapshot
    assert outputs(restored, later) == outputs(shard, later)
    assert restored.snapshot() == shard.snapshot()


def test_a_store_of_the_earlier_pickled_format_is_converted() -> None:
    """Format 1: `ShardState` pickled whole, full records in the reorder buffer."""
    params = DetectionParams(theta=2, window=WindowSpec("global"))
    fresh = DetectShard(params, shards=1, resume=None)
    fresh.on_batch([chunk("p", 0, [rec(10, tool="x")])])
    waiting = [rec(30, tool="x"), rec(31, tool="y")]
    old = ShardState(fresh.state.detector, 1, dict(fresh.state.next_seq), {"p": 10},
                     {"p": {2: ShardChunk("p", 2, waiting, 0, 31)}})  # type: ignore[arg-type]
    resumed = DetectShard(params, shards=1, resume=pickle.dumps(old))
    events = outputs(resumed, [chunk("p", 1, [rec(20, tool="y")])])
    assert [(e["tool"], e["count"]) for e in events] == [("x", 2), ("y", 2)]


def test_an_unreadable_old_store_is_refused_with_one_line() -> None:
    params = DetectionParams()
    moved = _pickled_from_a_module_that_moved()
    for resume in (moved, b"not a pickle", {"format": "binloop.shard/9"}, {"x": 1}):
        with pytest.raises(SnapshotError) as raised:
            load_shard(resume, params, ShardState, ShardChunk)
        message = str(raised.value)
        assert "\n" not in message and "start a new recovery store" in message
    with pytest.raises(SnapshotError, match="damaged"):
        load_shard({"format": FORMAT, "params": {}}, params, ShardState, ShardChunk)


def _pickled_from_a_module_that_moved() -> bytes:
    """A format-1 snapshot whose class has since moved away."""
    import sys
    import types

    module = types.ModuleType("flows.gone_away")
    exec("class ShardState:\n    pass", module.__dict__)
    sys.modules["flows.gone_away"] = module
    try:
        return pickle.dumps(module.ShardState())
    finally:
        del sys.modules["flows.gone_away"]


def test_other_settings_are_refused() -> None:
    shard, _ = busy_shard(DetectionParams(theta=3))
    with pytest.raises(ValueError, match="other detection settings"):
        DetectShard(DetectionParams(theta=4), shards=2, resume=shard.snapshot())


class _NoClasses(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise AssertionError(f"the store holds a class: {module}.{name}")


def test_a_recovery_store_of_a_replay_holds_only_plain_data(tmp_path: Path) -> None:
    """A real Bytewax run with recovery: every snapshot in its store unpickles without
    a single class lookup (plain data only), and a resumed run reads nothing again."""
    from bytewax.recovery import RecoveryConfig, init_db_dir
    from bytewax.testing import run_main

    from binloop.core.config import Config
    from flows.detect import build_flow

    store = tmp_path / "store"
    store.mkdir()
    init_db_dir(store, 1)
    lines = [rec(1000 + i, tool=f"t{i % 4}", session=i % 3).copy() for i in range(40)]
    import orjson

    (tmp_path / "in.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in lines))
    config = Config(input=str(tmp_path / "in.jsonl"), out=str(tmp_path / "ev.jsonl"),
                    dead_letter=str(tmp_path / "dead.jsonl"), progress=False, batch_size=1,
                    summary_out=str(tmp_path / "summary.json"))
    run_main(build_flow(config), epoch_interval=None,
             recovery_config=RecoveryConfig(str(store)))
    rows = []
    for part in store.glob("*.sqlite3"):
        with sqlite3.connect(part) as db:
            rows += db.execute("SELECT step_id, ser_change FROM snaps").fetchall()
    shard_rows = [blob for step, blob in rows if "shards" in step and blob is not None]
    assert shard_rows and any("telemetry" in step for step, _ in rows)
    for _, blob in rows:
        if blob is not None:
            assert_plain(_NoClasses(io.BytesIO(blob)).load())
    events = (tmp_path / "ev.jsonl").read_bytes()
    assert events
    run_main(build_flow(config), epoch_interval=None,
             recovery_config=RecoveryConfig(str(store)))
    assert (tmp_path / "ev.jsonl").read_bytes() == events  # resumed at the end: nothing new


def test_read_positions_are_plain_and_old_ones_still_read() -> None:
    from binloop.replay.readers import ReadPosition
    from flows.file_source import position_from_plain, position_to_plain
    from flows.nats_source import NatsPosition

    position = ReadPosition(3, 1, 400, 12)
    assert_plain(position_to_plain(position))
    assert position_from_plain(pickle.loads(pickle.dumps(position_to_plain(position)))) == \
        position
    assert position_from_plain(position) == position  # format 1
    two = {"format": "binloop.read/2", "seq": 3, "file_index": 1, "offset": 400, "line": 12}
    assert position_from_plain(two) == position  # one reader: format 2 means the same
    with pytest.raises(ValueError, match="start a new recovery store"):
        position_from_plain(two, strided=True)  # strided readers numbered chunks otherwise
    strided = ReadPosition(9, 1, 400, 12, base=5)
    assert position_from_plain(position_to_plain(strided), strided=True) == strided
    nats = NatsPosition(42, 7)
    assert_plain(nats.to_plain())
    assert NatsPosition.from_snapshot(nats.to_plain()) == nats == NatsPosition.from_snapshot(nats)
    for bad in ({"format": "x"}, 5):
        with pytest.raises(ValueError, match="start a new recovery store"):
            position_from_plain(bad)
        with pytest.raises(ValueError, match="start a new recovery store"):
            NatsPosition.from_snapshot(bad)


def test_the_backlog_order_is_in_the_snapshot_and_resumes() -> None:
    """A chunk held for a backlog not yet released, and a released partition, survive a
    snapshot (format 3) and a resume: the held chunk applies when the backlog ends."""
    params = DetectionParams(theta=3, window=WindowSpec.parse("global"), evidence_max=2)
    shard = DetectShard(params, shards=2, resume=None)

    def ordered(partition: str, seq: int, records: list[Any], waits_for: str | None,
                releases: bool) -> ShardChunk:
        plain = chunk(partition, seq, records)
        return ShardChunk(plain.partition, plain.seq, plain.records, 0, plain.max_ts,
                          waits_for, releases)

    waiting = ordered("b", 0, [rec(1100 + i, tool="t1") for i in range(3)], "a", False)
    assert outputs(shard, [waiting]) == []  # held: partition a has not released
    snapshot = shard.snapshot()
    assert_plain(snapshot)
    assert snapshot["format"] == FORMAT and snapshot["held"]["b"] and not snapshot["released"]
    restored = DetectShard(params, shards=2, resume=pickle.loads(pickle.dumps(snapshot)))
    assert restored.snapshot() == snapshot
    release = ordered("a", 0, [rec(1000, tool="t2")], None, True)
    fired = outputs(restored, [release])
    assert fired and fired == outputs(shard, [release])
    after = restored.snapshot()
    assert after["released"] == ["a"] and after["held"] == {}
    # Format 2 (before the backlog order): nothing held, nothing released, chunks in order.
    old = {**after, "format": "binloop.shard/2"}
    del old["held"], old["released"]
    old["pending"] = [entry[:5] for entry in old["pending"]]
    converted = DetectShard(params, shards=2, resume=old).snapshot()
    assert converted["format"] == FORMAT
    assert converted["released"] == [] and converted["held"] == {}
