"""`ShardRouter.split`: a chunk's counted records by state shard, each with the key the
detector counts it under. With one shard and the full failure mode as the key it skips
the lookup; it must give exactly what routing each record does."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from binloop.core.block_parse import Candidate
from binloop.core.detection import DetectionParams, Key
from binloop.core.window import WindowSpec
from flows.operators import ShardRouter, shard_of
from flows.placement import placed_shard_names

GLOBAL = WindowSpec("global")

TOOLS = st.sampled_from(["search", "fetch", "shell", "tool_7"])
MODES = st.sampled_from(["ARGS.bad", "ARGS.bad.shape", "AUTH", "NET.timeout.dns"])
CANDIDATES = st.lists(st.tuples(st.binary(max_size=8), TOOLS, MODES,
                                st.integers(0, 10**13), st.integers(0, 9) | st.text(max_size=3)),
                      max_size=40)


def routed_one_by_one(counted: list[Candidate], params: DetectionParams,
                      shards: int) -> dict[str, list[tuple[Key, Candidate]]]:
    by_shard: dict[str, list[tuple[Key, Candidate]]] = {str(s): [] for s in range(shards)}
    for cand in counted:
        key = params.key_of({"tool": cand[1], "failure_mode": cand[2]})
        by_shard[shard_of(key, shards)].append((key, cand))
    return by_shard


@given(CANDIDATES, st.sampled_from([None, 1, 2]), st.sampled_from([1, 2, 5]))
def test_split_is_routing_each_record(counted: list[Candidate], mode_level: int | None,
                                      shards: int) -> None:
    params = DetectionParams(theta=3, mode_level=mode_level)
    split = ShardRouter(params, shards).split(counted)
    assert split == routed_one_by_one(counted, params, shards)


@given(CANDIDATES, st.sampled_from([None, 1]), st.sampled_from([1, 2, 3]))
def test_placed_names_split_as_the_numbers_do(counted: list[Candidate],
                                              mode_level: int | None, shards: int) -> None:
    """With placed names (`binloop detect`), shard `i`'s records are under name `i`."""
    params = DetectionParams(theta=3, mode_level=mode_level)
    names = placed_shard_names(shards)
    split = ShardRouter(params, shards, names=names).split(counted)
    numbered = routed_one_by_one(counted, params, shards)
    assert split == {name: numbered[str(i)] for i, name in enumerate(names)}


@pytest.mark.parametrize("workers", [1, 2])
def test_a_cli_replay_with_one_shard_per_worker_agrees_with_the_reference(
        tmp_path: Path, workers: int) -> None:
    """`binloop detect --workers N` (one shard per worker: `run_bytewax` picks it for
    auto; with one shard no record is routed) fires the reference engine's events with
    its counters."""
    from binloop.cli.commands.detect import run_bytewax
    from tests.engine_runs import engine_config, outcome_of, run_reference_on, same_as_reference

    lines = [orjson.dumps({"session_id": i % 7, "ts": 1_700_000_000_000 + 10 * i,
                           "tool": f"tool_{i % 5}", "outcome": "failure" if i % 3 else "success",
                           "failure_mode": ("ARGS.bad", "AUTH")[i % 2] if i % 3 else None})
             for i in range(3000)]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    config = engine_config(path, tmp_path / "bw", window=GLOBAL, theta=3).replace(
        workers=workers)
    assert config.shards is None  # auto
    got = outcome_of(config, run_bytewax(config))
    assert got.events
    same_as_reference(got, run_reference_on(engine_config(path, tmp_path / "ref",
                                                          window=GLOBAL, theta=3)))
