"""The shard count of a live job follows its recovery store."""

from __future__ import annotations

from pathlib import Path

import pytest

from binloop.commands.run import STORE_META, init_recovery_store, store_shards
from binloop.config import DEFAULT_SHARDS, Config, ConfigError, load_config


def config(**values: str) -> Config:
    return load_config({"nats": "nats://127.0.0.1:4222", **values}, env={})


def test_a_new_store_notes_the_count_it_is_written_with(tmp_path: Path) -> None:
    store = tmp_path / "recovery"
    assert store_shards(config(recovery_dir=str(store))) == DEFAULT_SHARDS
    assert (store / STORE_META).is_file()
    # later runs: auto takes the store's count, another count is refused
    assert store_shards(config(recovery_dir=str(store))) == DEFAULT_SHARDS
    with pytest.raises(ConfigError, match="--shards 16"):
        store_shards(config(recovery_dir=str(store), shards="8"))


def test_an_explicit_count_is_noted(tmp_path: Path) -> None:
    store = tmp_path / "recovery"
    assert store_shards(config(recovery_dir=str(store), shards="8")) == 8
    assert store_shards(config(recovery_dir=str(store))) == 8


def test_a_store_of_an_earlier_binloop_had_64_shards(tmp_path: Path) -> None:
    store = tmp_path / "recovery"
    init_recovery_store(store, 1)  # parts, no note
    assert store_shards(config(recovery_dir=str(store))) == 64
    assert store_shards(config(recovery_dir=str(store), shards="64")) == 64


def test_without_a_store_the_setting_or_the_default(tmp_path: Path) -> None:
    assert store_shards(config()) == DEFAULT_SHARDS
    assert store_shards(config(shards="3")) == 3
    assert load_config({"shards": "auto"}, env={}).shards is None
