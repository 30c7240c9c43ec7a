"""The shard count of a live job follows its recovery store."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from binloop.cli.commands.run import init_recovery_store
from binloop.core.config import DEFAULT_SHARDS, Config, ConfigError, load_config
from binloop.ops.recovery_store import MARKER, prepare_store, store_shards


def config(**values: str) -> Config:
    return load_config({"nats": "nats://127.0.0.1:4222", **values}, env={})


def test_a_new_store_notes_the_count_it_is_written_with(tmp_path: Path) -> None:
    store = tmp_path / "recovery"
    assert init_recovery_store(config(recovery_dir=str(store))).shards == DEFAULT_SHARDS
    assert orjson.loads((store / MARKER).read_bytes())["shards"] == DEFAULT_SHARDS
    # later runs: auto takes the store's count, another count is refused
    assert init_recovery_store(config(recovery_dir=str(store))).shards == DEFAULT_SHARDS
    with pytest.raises(ConfigError, match="--shards 16"):
        init_recovery_store(config(recovery_dir=str(store), shards="8"))


def test_an_explicit_count_is_noted_and_every_process_reads_it(tmp_path: Path) -> None:
    store = tmp_path / "recovery"
    assert init_recovery_store(config(recovery_dir=str(store), shards="8")).shards == 8
    assert init_recovery_store(config(recovery_dir=str(store)), process_id=1).shards == 8


def test_stores_that_did_not_note_it_had_64_shards(tmp_path: Path) -> None:
    by_hand = tmp_path / "by-hand"
    from bytewax.recovery import init_db_dir

    by_hand.mkdir()
    init_db_dir(by_hand, 1)  # python -m bytewax.recovery DIR 1: no marker
    assert store_shards(by_hand) == 64
    assert init_recovery_store(config(recovery_dir=str(by_hand))).shards == 64
    earlier = tmp_path / "earlier"
    prepare_store(earlier, 1)
    marker = earlier / MARKER  # as binloop wrote it before noting the shards
    marker.write_bytes(orjson.dumps({"partitions": 1, "created": 0}))
    assert init_recovery_store(config(recovery_dir=str(earlier))).shards == 64


def test_without_a_store_the_setting_or_the_default() -> None:
    assert config().shard_count() == DEFAULT_SHARDS
    assert config(shards="3").shard_count() == 3
    assert load_config({"shards": "auto"}, env={}).shards is None
