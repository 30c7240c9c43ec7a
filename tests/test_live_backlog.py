"""Adopting a stream that already holds telemetry (issue 13): binloop adds its partition
transform, partition 0 reads what was stored before (the backlog) beside the
partitioned telemetry, and a key's backlog records are applied before its newer,
partitioned records — whichever partition is read first, and while agents publish."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest
from bytewax.inputs import StatefulSourcePartition
from bytewax.testing import cluster_main
from typing_extensions import override

from binloop.cli.commands.run import run_live
from binloop.core.config import Config
from binloop.core.summary import RunSummary
from binloop.nats.jetstream import connect, ensure_telemetry_stream, telemetry_stream_spec
from binloop.nats.publish import messages, publish_messages
from binloop.nats.server import NatsServer
from binloop.ops.shutdown import stop_requested
from flows.live import build_flow, source_settings
from flows.nats_source import NatsPosition, NatsTelemetrySource, SourceItem
from tests.nats_fixtures import live_config, stream_messages, telemetry
from tests.test_live_nats import assert_same_events, events_in, reference

# Tools whose records the server stores in partition 1 of 2 (checked by the test), and
# one of partition 0 (its backlog and its new records share partition 0's consumer).
PARTITION_1_TOOLS = ("search", "bash", "grep")
PARTITION_0_TOOL = "pytest"
T0 = 1_700_000_000_000


def failure(tool: str, session: int, ts: int, i: int) -> bytes:
    return orjson.dumps({"session_id": session, "ts": ts, "tool": tool, "args": {"i": i},
                         "outcome": "failure", "failure_mode": "RUNTIME.test_failure"})


async def _legacy_stream(url: str, lines: list[bytes]) -> None:
    """A deployment's stream without binloop's transform, records already stored."""
    nc = await connect(url, "legacy", 10)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="TELEMETRY", subjects=["telemetry.>"])
        for msg in messages(lines):
            await js.publish(msg.subject, msg.payload, headers=msg.headers)
    finally:
        await nc.close()


async def _partition_and_publish(url: str, lines: list[bytes], partitions: int) -> None:
    """What `binloop run` does first (add the transform), then agents go on publishing."""
    nc = await connect(url, "agents", 10)
    try:
        js = nc.jetstream(timeout=10)
        await ensure_telemetry_stream(js, telemetry_stream_spec("TELEMETRY", "telemetry",
                                                                partitions))
        await publish_messages(js, messages(lines))
    finally:
        await nc.close()


class _HeldBack(StatefulSourcePartition[SourceItem, NatsPosition]):
    """A partition that reads nothing until `gate` is set or `hold_s` has passed."""

    def __init__(self, inner: StatefulSourcePartition[SourceItem, NatsPosition],
                 gate: threading.Event, hold_s: float) -> None:
        self._inner, self._gate = inner, gate
        self._until = time.monotonic() + hold_s
        # Whether the gate opened it (the partitioned records were applied first).
        self.opened_by_gate: bool | None = None

    @override
    def next_batch(self) -> Iterable[SourceItem]:
        if stop_requested.is_set():
            raise StopIteration
        if self.opened_by_gate is None:
            if not self._gate.is_set() and time.monotonic() < self._until:
                return []
            self.opened_by_gate = self._gate.is_set()
        return self._inner.next_batch()

    @override
    def next_awake(self) -> datetime | None:
        if not self._gate.is_set() and time.monotonic() < self._until:
            return datetime.now(timezone.utc) + timedelta(milliseconds=10)
        return self._inner.next_awake()

    @override
    def snapshot(self) -> NatsPosition:
        return self._inner.snapshot()

    @override
    def close(self) -> None:
        self._inner.close()


class _BacklogReadLast(NatsTelemetrySource):
    """Partition 0 (the backlog) starts reading only once the job has applied
    `applied` counted records (the partitioned ones), or after `hold_s` when the
    job holds them back as it must."""

    def __init__(self, config: Config, applied: int, hold_s: float) -> None:
        super().__init__(source_settings(config))
        self.gate = threading.Event()
        self.applied = applied
        self.hold_s = hold_s
        self.held: list[_HeldBack] = []

    def on_summary(self, summary: RunSummary) -> None:
        if summary.counted >= self.applied:
            self.gate.set()

    @override
    def build_part(self, step_id: str, for_part: str,
                   resume_state: NatsPosition | None) -> Any:
        part = super().build_part(step_id, for_part, resume_state)
        if for_part.endswith("/0"):
            held = _HeldBack(part, self.gate, self.hold_s)
            self.held.append(held)
            return held
        return part


@pytest.mark.parametrize("workers", [1, 2])
def test_backlog_is_applied_before_newer_partitioned_records_read_first(
        nats_server: NatsServer, tmp_path: Path, workers: int) -> None:
    """The bad interleaving, forced: a backlog record and partitioned records of the
    same keys are stored before the job reads either, and the partitioned ones are
    read (and would be applied) first. The events are those of a replay of the stream
    in its order: each key fires at its first partitioned record, with the backlog
    record as the first evidence."""
    tools = (*PARTITION_1_TOOLS, PARTITION_0_TOOL)
    backlog = [failure(tool, 61, T0 + i, i) for i, tool in enumerate(tools)]
    newer = [failure(tool, 117, T0 + 1000 * (k + 1) + i, 10 * (k + 1) + i)
             for k in range(2) for i, tool in enumerate(tools)]
    asyncio.run(_legacy_stream(nats_server.url, backlog))
    asyncio.run(_partition_and_publish(nats_server.url, newer, partitions=2))
    stored = {orjson.loads(payload)["args"]["i"]: subject for subject, _, payload in
              stream_messages(nats_server.url, "TELEMETRY")}
    assert all(stored[10 + i].startswith("telemetry_p.1.") for i in range(3))
    assert stored[10 + 3].startswith("telemetry_p.0.")
    assert all(stored[i].startswith("telemetry.61.") for i in range(4))

    config = live_config(nats_server.url, tmp_path, partitions=2, theta=2, window="global",
                         workers=workers)
    # All six partitioned records of partition 1 counted => they went first.
    source = _BacklogReadLast(config, applied=2 * len(PARTITION_1_TOOLS), hold_s=3.0)
    flow = build_flow(config, source=source, on_summary=source.on_summary)
    stop_requested.clear()
    cluster_main(flow, [], 0, worker_count_per_proc=workers)

    expected, _ = reference(config, [*backlog, *newer], tmp_path)
    assert len(expected) == len(tools)
    for event in expected:
        assert event["evidence"][0]["session_id"] == 61
        assert event["session_id"] == 117 and event["count"] == 2
    assert_same_events(events_in(tmp_path / "events.jsonl"), expected)
    assert [held.opened_by_gate for held in source.held] == [False], \
        "partition 1's records were applied before the backlog"


def _run_job_while_publishing(url: str, config: Config, lines: list[bytes],
                              rate: float) -> RunSummary:
    """`binloop run` (one process, in a thread) starts while agents publish `lines`."""
    result: dict[str, Any] = {}
    job = threading.Thread(target=lambda: result.update(summary=run_live(config)))
    agents = threading.Thread(target=asyncio.run, args=(_publish_paced(url, lines, rate),))
    agents.start()
    time.sleep(0.3)  # the job adopts a stream that is being written
    job.start()
    agents.join(120)
    job.join(180)
    assert not job.is_alive() and not agents.is_alive()
    summary: RunSummary = result["summary"]
    return summary


async def _publish_paced(url: str, lines: list[bytes], rate: float) -> None:
    """Agents publishing onto the stream as binloop finds it (unpartitioned first)."""
    nc = await connect(url, "agents", 10)
    try:
        await publish_messages(nc.jetstream(timeout=10), messages(lines), rate, window=50)
    finally:
        await nc.close()


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(10))
def test_adopting_a_stream_while_agents_publish_fires_the_replays_events(
        nats_server: NatsServer, tmp_path: Path, attempt: int) -> None:
    """The issue's case, repeated: a `TELEMETRY` stream with a backlog, agents still
    publishing at 4,000 records/s, `binloop run --recovery-dir D` starts and adds
    its transform mid-stream; the events are a replay's of the stream's order."""
    lines = telemetry(12_000, seed=100 + attempt)
    asyncio.run(_legacy_stream(nats_server.url, lines[:3000]))
    config = live_config(nats_server.url, tmp_path, partitions=4, workers=2,
                         recovery_dir=tmp_path / "recovery", until_idle="2")
    summary = _run_job_while_publishing(nats_server.url, config, lines[3000:], 4000.0)
    order = [payload for _, _, payload in stream_messages(nats_server.url, "TELEMETRY")]
    subjects = {subject.split(".")[0] for subject, _, _ in
                stream_messages(nats_server.url, "TELEMETRY")}
    assert subjects == {"telemetry", "telemetry_p"}  # adopted while written
    expected, ref_summary = reference(config, order, tmp_path)
    assert len(expected) >= 20
    assert summary.records_read == len(lines)
    assert_same_events(events_in(tmp_path / "events.jsonl"), expected)
    assert summary.counted == ref_summary.counted
