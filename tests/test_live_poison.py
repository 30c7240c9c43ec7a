"""Poison on the telemetry stream (dead-lettered once with a reason, never blocking),
and telemetry stored before binloop partitioned the stream."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from binloop.cli.commands.run import run_live
from binloop.nats.jetstream import connect
from binloop.nats.publish import messages
from binloop.nats.server import NatsServer
from binloop.nats.subjects import BATCH_HEADER, telemetry_subject
from tests.nats_fixtures import live_config, publish, stream_messages, telemetry
from tests.test_live_nats import assert_same_events, events_in, reference

pytestmark = pytest.mark.slow

TEN_MB = (b'{"session_id": 1, "ts": 1700000000000, "tool": "big", "outcome": "failure", '
          b'"args": {"blob": "' + b"x" * (10 << 20) + b'"}}')
STRAY = orjson.dumps({"session_id": 3, "ts": 1_700_000_000_500, "tool": "stray",
                      "outcome": "failure", "failure_mode": "RUNTIME"})
BOM = b"\xef\xbb\xbf"  # a Windows-written line, published as it is: still a record
WITH_BOM = [orjson.dumps({"session_id": 5, "ts": 1_700_000_000_700 + i, "tool": "windows",
                          "args": {"i": i}, "outcome": "failure", "failure_mode": "ARGS"})
            for i in range(3)]
GOOD_IN_ENVELOPE = [orjson.dumps({"session_id": 4, "ts": 1_700_000_000_600 + i,
                                  "tool": "enveloped", "args": {"i": i}, "outcome": "failure",
                                  "failure_mode": "ARGS"}) for i in range(3)]


async def _publish_poison(url: str) -> None:
    nc = await connect(url, "poison", 10)
    js = nc.jetstream(timeout=10)
    subject = telemetry_subject("telemetry", 1, "search")
    try:
        await js.publish(subject, b"not json at all")
        await js.publish(subject, b'{"tool": "search"}')
        await js.publish(subject, b"\xff\xfe{\x00")
        await js.publish(subject, TEN_MB)
        await js.publish(subject, b"a\nb\n", headers={BATCH_HEADER: "gzip"})
        await js.publish(subject, b"")  # was read as a blank line: vanished
        await js.publish(telemetry_subject("telemetry", 4, "enveloped"),
                         b"\n".join([GOOD_IN_ENVELOPE[0], b"{oops", *GOOD_IN_ENVELOPE[1:]]),
                         headers={BATCH_HEADER: "jsonl"})
        windows = telemetry_subject("telemetry", 5, "windows")
        await js.publish(windows, BOM + WITH_BOM[0])
        await js.publish(windows, BOM + WITH_BOM[1] + b"\r\n" + BOM + WITH_BOM[2] + b"\r\n",
                         headers={BATCH_HEADER: "jsonl"})
        # A subject of another shape (an unescaped dotted tool) is stored unpartitioned.
        await js.publish("telemetry.3.stray.tool", STRAY)
    finally:
        await nc.close()


def test_poison_messages_are_dead_lettered_once(nats_server: NatsServer,
                                                tmp_path: Path) -> None:
    lines = telemetry(3000, seed=3)
    publish(nats_server.url, lines[:1500])
    asyncio.run(_publish_poison(nats_server.url))
    publish(nats_server.url, lines[1500:])
    config = live_config(nats_server.url, tmp_path)
    summary = run_live(config)

    dead = [orjson.loads(line) for line in (tmp_path / "dead.jsonl").read_bytes().splitlines()]
    reasons = sorted(d["reason"].split(":")[0] for d in dead)
    assert len(dead) == 7
    assert reasons == sorted(["not JSON", "missing field session_id", "not JSON",
                              f"record of {len(TEN_MB)} bytes exceeds the 1048576-byte limit",
                              "unknown Binloop-Batch encoding 'gzip' (expected 'jsonl')",
                              "empty message", "not JSON"])
    assert all(len(d["raw"]) < 4096 for d in dead)
    valid = [*lines[:1500], *GOOD_IN_ENVELOPE, *WITH_BOM, STRAY, *lines[1500:]]
    expected, ref_summary = reference(config, valid, tmp_path)
    assert {e["tool"] for e in expected} >= {"enveloped", "windows"}
    assert_same_events(events_in(tmp_path / "events.jsonl"), expected)
    assert summary.valid == ref_summary.valid == len(valid)
    assert summary.invalid == 7
    assert summary.records_read == len(valid) + 7


async def _unpartitioned_stream(url: str, lines: list[bytes]) -> None:
    """An existing deployment's stream: no subject transform, records already stored."""
    nc = await connect(url, "legacy", 10)
    js = nc.jetstream(timeout=10)
    try:
        await js.add_stream(name="TELEMETRY", subjects=["telemetry.>"])
        for msg in messages(lines):
            await js.publish(msg.subject, msg.payload, headers=msg.headers)
        info = await js.stream_info("TELEMETRY")
        assert info.config.subject_transform is None
    finally:
        await nc.close()


def test_an_existing_unpartitioned_stream_is_read_whole_then_partitioned(
        nats_server: NatsServer, tmp_path: Path) -> None:
    """A deployment's stream without binloop's transform: the job adds it; what was
    stored before is read by partition 0, what comes after is partitioned."""
    lines = telemetry(3000, seed=21)
    asyncio.run(_unpartitioned_stream(nats_server.url, lines[:1000]))
    config = live_config(nats_server.url, tmp_path, recovery_dir=tmp_path / "recovery")
    first = run_live(config)
    publish(nats_server.url, lines[1000:])
    summary = run_live(config)
    expected, ref_summary = reference(config, lines, tmp_path)
    assert first.records_read == 1000
    assert_same_events(events_in(tmp_path / "events.jsonl"), expected)
    assert summary.records_read == ref_summary.records_read == len(lines)
    assert summary.counted == ref_summary.counted
    subjects = {subject.split(".")[0] for subject, _, _ in
                stream_messages(nats_server.url, "TELEMETRY")}
    assert subjects == {"telemetry", "telemetry_p"}
