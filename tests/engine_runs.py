"""Run each engine on one input file and read back what it wrote (agreement tests).

Every engine writes the same three files (events, dead letters, late records) and a
summary; :class:`Outcome` holds them. `reference` and `polars` must agree byte for byte
and line for line; a Bytewax run may order lines differently across keys, so compare it
with :func:`same_as_reference` (each key fires at most once in a replay: events by
`event_id`; rejects as sorted lists).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from binloop.cli.commands.detect import read_summary
from binloop.core.config import Config
from binloop.core.summary import RunSummary
from binloop.ops.cluster import run_cluster

COUNTERS = ("records_read", "valid", "invalid", "counted", "duplicates", "late", "disarmed",
            "events_fired", "beyond_lateness", "damaged_files", "ts_converted")


@dataclass
class Outcome:
    events: list[dict[str, Any]]
    dead: list[dict[str, Any]]
    late: list[dict[str, Any]]
    counters: dict[str, int]


def engine_config(path: Path, out_dir: Path, **settings: Any) -> Config:
    """A replay of `path` writing into `out_dir` (which must not exist yet)."""
    out_dir.mkdir(parents=True)
    defaults: dict[str, Any] = {"input": str(path), "out": str(out_dir / "events.jsonl"),
                                "dead_letter": str(out_dir / "dead.jsonl"),
                                "late_out": str(out_dir / "late.jsonl"), "progress": False}
    return Config(**{**defaults, **settings})


def read_jsonl(path: str | None) -> list[dict[str, Any]]:
    if path is None or not Path(path).exists():
        return []
    return [orjson.loads(line) for line in Path(path).read_bytes().splitlines() if line]


def outcome_of(config: Config, summary: RunSummary) -> Outcome:
    counters = {name: getattr(summary, name) for name in COUNTERS}
    return Outcome(read_jsonl(config.out), read_jsonl(config.dead_letter),
                   read_jsonl(config.late_out), counters)


def run_reference_on(config: Config) -> Outcome:
    from binloop.engines.reference import run_reference

    return outcome_of(config, run_reference(config))


def run_polars_on(config: Config) -> Outcome:
    from binloop.engines.polars.engine import run_polars

    return outcome_of(config, run_polars(config))


def run_bytewax_on(config: Config, workers: int = 1) -> Outcome:
    """The flow in this process: `run_main` (1 worker) or `cluster_main` worker threads."""
    from bytewax.testing import cluster_main, run_main

    from flows.detect import build_flow

    summary_path = Path(config.out or "events").with_name("summary.json")
    config = config.replace(summary_out=str(summary_path))
    flow = build_flow(config)
    if workers == 1:
        run_main(flow)
    else:
        cluster_main(flow, [], 0, worker_count_per_proc=workers)
    return outcome_of(config, read_summary(summary_path))


def run_processes_on(config: Config, processes: int, workers: int) -> Outcome:
    """`python -m bytewax.run flows.detect:flow -i/-a` processes (`binloop.ops.cluster`)."""
    summary_path = Path(config.out or "events").with_name("summary.json")
    config = config.replace(summary_out=str(summary_path))
    code = run_cluster("flows.detect:flow", processes, workers, config.to_env())
    assert code == 0, f"a Bytewax process exited with {code}"
    return outcome_of(config, read_summary(summary_path))


def by_event_id(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found = {event["event_id"]: event for event in events}
    assert len(found) == len(events), "an event_id was written twice"
    return found


def in_key_order(events: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Events per key, in the order they were written."""
    keys: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for event in events:
        keys.setdefault((event["tool"], event["failure_mode"]), []).append(event)
    return keys


def sorted_lines(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(row, sort_keys=True) for row in rows)


def same_as_reference(got: Outcome, expected: Outcome) -> None:
    """A Bytewax outcome against the reference: same content, per-key order kept."""
    assert in_key_order(got.events) == in_key_order(expected.events)
    assert by_event_id(got.events) == by_event_id(expected.events)
    assert sorted_lines(got.dead) == sorted_lines(expected.dead)
    assert sorted_lines(got.late) == sorted_lines(expected.late)
    assert got.counters == expected.counters


def content_id(body: dict[str, Any]) -> str:
    """The id `binloop.core.schema` computes for a record without one."""
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()
