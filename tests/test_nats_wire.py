"""binloop's wire client of NATS (`binloop.nats.wire`) and its ordered pull consumer
(`binloop.nats.wire_consumer`) against a real nats-server: frames, headers, requests,
status messages (heartbeats, request timeouts, max_bytes, a deleted consumer),
reconnects after a restart and after a frozen server, authentication, and the same
deliveries as the nats-py consumer."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from binloop.nats.consumer import Delivery, OrderedConsumer, PullSettings
from binloop.nats.jetstream import connect
from binloop.nats.server import NatsServer
from binloop.nats.subjects import BATCH_HEADER, MSG_ID_HEADER
from binloop.nats.wire import (
    Unsupported,
    WireConnection,
    acquire_wire,
    parse_headers,
    release_wire,
)
from binloop.nats.wire_consumer import WireOrderedConsumer

pytestmark = pytest.mark.slow

STREAM = "WIRE"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _publish(url: str, messages: list[tuple[str, bytes, dict[str, str] | None]],
                   create: bool = True) -> None:
    nc = await connect(url, "test-publisher", 10)
    try:
        js = nc.jetstream(timeout=10)
        if create:
            await js.add_stream(name=STREAM, subjects=["w.>"])
        for subject, payload, headers in messages:
            await js.publish(subject, payload, headers=headers)
    finally:
        await nc.close()


def publish(url: str, messages: list[tuple[str, bytes, dict[str, str] | None]],
            create: bool = True) -> None:
    run(_publish(url, messages, create))


def records(n: int, start: int = 0) -> list[tuple[str, bytes, dict[str, str] | None]]:
    return [(f"w.{i % 3}", orjson.dumps({"i": i}), {MSG_ID_HEADER: f"m{i}"})
            for i in range(start, start + n)]


def drain(consumer: WireOrderedConsumer, until: Callable[[Delivery], bool],
          timeout: float = 20.0) -> Delivery:
    """Poll until `until(everything so far)`; returns everything read."""
    got = Delivery()
    deadline = time.monotonic() + timeout
    while not until(got):
        if time.monotonic() > deadline:
            raise AssertionError(f"only {got.messages} messages after {timeout}s")
        part = consumer.poll(1000)
        got.items += part.items
        got.rejects += part.rejects
        got.messages += part.messages
        got.last_seq = part.last_seq or got.last_seq
        if not part.messages:
            time.sleep(0.005)
    return got


def numbers(items: list[bytes]) -> list[int]:
    return [orjson.loads(item)["i"] for item in items]


def test_subscribe_publish_request_and_headers(nats_server: NatsServer) -> None:
    conn = WireConnection(nats_server.url, "test")
    try:
        sub = conn.subscribe("echo")
        conn.publish("echo", b"hello", "some.reply")
        conn.publish("echo", b"")
        deadline = time.monotonic() + 5
        while len(sub.pending) < 2 and time.monotonic() < deadline:
            conn.pump()
        assert sub.take() == [(b"some.reply", b"", b"hello"), (b"", b"", b"")]
        info = orjson.loads(conn.request("$JS.API.INFO", b"", 2.0)[2])
        assert "memory" in info  # JetStream's account info
    finally:
        conn.close()


async def _headers_as_nats_py(url: str, blocks: list[dict[str, str]]) -> list[Any]:
    nc = await connect(url, "test-headers", 10)
    got: list[Any] = []
    try:
        sub = await nc.subscribe("hdr")
        for headers in blocks:
            await nc.publish("hdr", b"x", headers=headers)
        for _ in blocks:
            msg = await sub.next_msg(5)
            got.append(msg.headers)
    finally:
        await nc.close()
    return got


def test_headers_are_read_as_nats_py_reads_them(nats_server: NatsServer) -> None:
    blocks = [{BATCH_HEADER: "jsonl"}, {BATCH_HEADER: "  JSONL "}, {"a": "1", "b": "é"},
              {MSG_ID_HEADER: "Binloop-Batch", "k": "v:w"}]
    conn = WireConnection(nats_server.url, "test")
    try:
        sub = conn.subscribe("hdr")
        conn.flush()
        expected = run(_headers_as_nats_py(nats_server.url, blocks))
        deadline = time.monotonic() + 5
        while len(sub.pending) < len(blocks) and time.monotonic() < deadline:
            conn.pump()
        got = [parse_headers(headers)[2] for _, headers, _ in sub.take()]
    finally:
        conn.close()
    assert got == expected


def test_status_lines_are_parsed() -> None:
    block = (b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 12\r\n"
             b"Nats-Pending-Bytes: 0\r\n\r\n")
    assert parse_headers(block) == ("408", "Request Timeout",
                                    {"Nats-Pending-Messages": "12", "Nats-Pending-Bytes": "0"})
    assert parse_headers(b"NATS/1.0 100 Idle Heartbeat\r\n\r\n")[:2] == ("100",
                                                                        "Idle Heartbeat")
    assert parse_headers(b"NATS/1.0\r\nA: b\r\n\r\n") == (None, "", {"A": "b"})


async def _read_with_nats_py(url: str, expected_messages: int) -> Delivery:
    nc = await connect(url, "test-reader", 10)
    try:
        consumer = OrderedConsumer(nc, nc.jetstream(), STREAM, ["w.>"], 0, "py")
        got = Delivery()
        deadline = time.monotonic() + 20
        while got.messages < expected_messages and time.monotonic() < deadline:
            part = await consumer.poll(1000, 0.05)
            got.items += part.items
            got.rejects += part.rejects
            got.messages += part.messages
        await consumer.close()
        return got
    finally:
        await nc.close()


def test_same_deliveries_as_the_nats_py_consumer(nats_server: NatsServer) -> None:
    """Single records, envelopes (with CRLF and blank lines), an unknown envelope, an
    empty payload, a message without headers: the wire consumer hands out exactly
    what the nats-py consumer does."""
    messages = [*records(5),
                ("w.0", b'{"i": 100}\n{"i": 101}\n', {BATCH_HEADER: "jsonl"}),
                ("w.1", b'{"i": 102}\r\n\r\n{"i": 103}', {BATCH_HEADER: " JSONL "}),
                ("w.2", b"a\nb\n", {BATCH_HEADER: "gzip"}),
                ("w.0", b"", {MSG_ID_HEADER: "empty"}),
                ("w.1", b'{"i": 104}', None),
                *records(3, 200)]
    publish(nats_server.url, messages)
    expected = run(_read_with_nats_py(nats_server.url, len(messages)))
    conn = WireConnection(nats_server.url, "test")
    try:
        consumer = WireOrderedConsumer(conn, STREAM, ["w.>"], 0, "wire")
        got = drain(consumer, lambda d: d.messages >= len(messages))
        consumer.close()
    finally:
        conn.close()
    assert (got.items, got.rejects, got.messages) == \
        (expected.items, expected.rejects, expected.messages)
    # A blank line inside an envelope is a blank line; an empty message is a reject.
    assert got.items[5:11] == [b'{"i": 100}', b'{"i": 101}', b'{"i": 102}', b"", b'{"i": 103}',
                               b'{"i": 104}']
    assert [r.reason.split(" ")[:2] for r in got.rejects] == [["unknown", "Binloop-Batch"],
                                                              ["empty", "message:"]]
    # Read as runs of whole lines (how the live job's source reads): the same lines.
    conn = WireConnection(nats_server.url, "test")
    try:
        consumer = WireOrderedConsumer(conn, STREAM, ["w.>"], 0, "runs", PullSettings(runs=True))
        lines, seen, rejects = [], 0, []
        deadline = time.monotonic() + 20
        while seen < len(messages) and time.monotonic() < deadline:
            part = consumer.poll(1000)
            assert part.records == len(part.lines())
            lines += part.lines()
            rejects += part.rejects
            seen += part.messages
        consumer.close()
    finally:
        conn.close()
    assert (lines, rejects) == (expected.items, expected.rejects)


def test_heartbeats_and_expired_requests_keep_the_consumer(nats_server: NatsServer) -> None:
    """A quiet stream: requests expire (408) and heartbeats (100) arrive; the consumer
    is neither recreated nor stalled, and takes new messages when they come."""
    publish(nats_server.url, records(10))
    conn = WireConnection(nats_server.url, "test")
    try:
        consumer = WireOrderedConsumer(conn, STREAM, ["w.>"], 0, "wire",
                                       PullSettings(batch=4, expires_s=0.3, heartbeat_s=0.1))
        assert numbers(drain(consumer, lambda d: d.messages >= 10).items) == list(range(10))
        quiet_until = time.monotonic() + 1.5  # five expiries, many heartbeats
        while time.monotonic() < quiet_until:
            assert not consumer.poll(100).messages
            time.sleep(0.01)
        assert consumer.resets == 0
        publish(nats_server.url, records(5, 10), create=False)
        later = drain(consumer, lambda d: d.messages >= 5)
        assert numbers(later.items) == list(range(10, 15)) and consumer.resets == 0
        assert consumer.caught_up()
        consumer.close()
    finally:
        conn.close()


def test_a_message_over_max_bytes_is_fetched_alone(nats_server: NatsServer) -> None:
    big = orjson.dumps({"i": 1, "blob": "x" * 5000})
    publish(nats_server.url, [("w.0", b'{"i": 0}', None), ("w.0", big, None),
                              ("w.0", b'{"i": 2}', None)])
    conn = WireConnection(nats_server.url, "test")
    try:
        consumer = WireOrderedConsumer(conn, STREAM, ["w.>"], 0, "wire",
                                       PullSettings(batch=8, max_bytes=1000))
        got = drain(consumer, lambda d: d.messages >= 3)
        assert numbers(got.items) == [0, 1, 2] and consumer.resets == 0
        consumer.close()
    finally:
        conn.close()


async def _delete_consumers(url: str) -> int:
    nc = await connect(url, "test-admin", 10)
    try:
        js = nc.jetstream()
        names = [info.name for info in await js.consumers_info(STREAM)]
        for name in names:
            await js.delete_consumer(STREAM, name)
        return len(names)
    finally:
        await nc.close()


def test_a_deleted_consumer_is_recreated_after_the_position(nats_server: NatsServer) -> None:
    publish(nats_server.url, records(20))
    conn = WireConnection(nats_server.url, "test")
    try:
        consumer = WireOrderedConsumer(conn, STREAM, ["w.>"], 0, "wire",
                                       PullSettings(heartbeat_s=0.2))
        first = drain(consumer, lambda d: d.messages >= 20)
        assert run(_delete_consumers(nats_server.url)) == 1
        publish(nats_server.url, records(10, 20), create=False)
        rest = drain(consumer, lambda d: d.messages >= 10)
        assert numbers(first.items + rest.items) == list(range(30))
        assert consumer.resets == 1
        consumer.close()
    finally:
        conn.close()


def test_a_server_restart_reconnects_and_resumes_in_order(nats_server: NatsServer) -> None:
    publish(nats_server.url, records(50))
    conn = WireConnection(nats_server.url, "test")
    try:
        consumer = WireOrderedConsumer(conn, STREAM, ["w.>"], 0, "wire",
                                       PullSettings(batch=16))
        first = drain(consumer, lambda d: d.messages >= 30)
        nats_server.restart(down_for=0.5)
        publish(nats_server.url, records(20, 50), create=False)
        rest = drain(consumer, lambda d: len(first.items) + len(d.items) >= 70)
        assert numbers(first.items + rest.items) == list(range(70))
        assert conn.reconnects == 1 and consumer.resets >= 1
        consumer.close()
    finally:
        conn.close()


def test_a_frozen_server_is_noticed_by_pings(nats_server: NatsServer) -> None:
    """A server that stops answering (SIGSTOP) is dropped after unanswered pings, and
    reconnected to when it answers again."""
    conn = WireConnection(nats_server.url, "test", ping_interval_s=0.2, max_pings_out=2)
    try:
        assert nats_server.pid is not None
        os.kill(nats_server.pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 10
            while conn.connected and time.monotonic() < deadline:
                conn.pump()
                time.sleep(0.02)
            assert not conn.connected
        finally:
            os.kill(nats_server.pid, signal.SIGCONT)
        deadline = time.monotonic() + 20
        while not conn.connected and time.monotonic() < deadline:
            conn.pump()
            time.sleep(0.02)
        assert conn.connected and conn.reconnects == 1
    finally:
        conn.close()


def test_a_quiet_connection_answers_the_servers_pings(tmp_path: Path) -> None:
    with NatsServer(store_dir=tmp_path / "nats",
                    extra_config="ping_interval: \"200ms\"\nping_max: 1\n") as server:
        conn = WireConnection(server.url, "test", ping_interval_s=60)
        try:
            until = time.monotonic() + 1.5
            while time.monotonic() < until:
                conn.pump()
                time.sleep(0.05)
            assert conn.connected and conn.reconnects == 0
            conn.request("$JS.API.INFO", b"", 2.0)
        finally:
            conn.close()


@pytest.fixture
def auth_server(tmp_path: Path) -> Iterator[NatsServer]:
    config = 'authorization {\n  users: [{user: "agent", password: "s3cret"}]\n}\n'
    with NatsServer(store_dir=tmp_path / "nats", extra_config=config) as server:
        yield server


def test_user_and_password_from_the_url(auth_server: NatsServer) -> None:
    good = f"nats://agent:s3cret@{auth_server.host}:{auth_server.port}"
    conn = WireConnection(good, "test")
    conn.close()
    with pytest.raises(ConnectionError, match="Authorization"):
        WireConnection(f"nats://agent:wrong@{auth_server.host}:{auth_server.port}", "test",
                       connect_timeout_s=1)


def test_token_from_the_url(tmp_path: Path) -> None:
    with NatsServer(store_dir=tmp_path / "nats",
                    extra_config='authorization {\n  token: "t0ken"\n}\n') as server:
        WireConnection(f"nats://t0ken@{server.host}:{server.port}", "test").close()
        with pytest.raises(ConnectionError):
            WireConnection(server.url, "test", connect_timeout_s=1)


def test_tls_is_left_to_nats_py(tmp_path: Path) -> None:
    with pytest.raises(Unsupported):
        WireConnection("tls://127.0.0.1:4222", "test")
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a certificate for a TLS server")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    tls = f'tls {{\n  cert_file: "{cert}"\n  key_file: "{key}"\n}}\n'
    with NatsServer(store_dir=tmp_path / "nats", extra_config=tls) as server, \
            pytest.raises(Unsupported, match="TLS"):
        WireConnection(server.url, "test", connect_timeout_s=2)


def test_one_connection_per_thread_and_url(nats_server: NatsServer) -> None:
    first = acquire_wire(nats_server.url, "a")
    second = acquire_wire(nats_server.url, "b")
    assert first is second
    release_wire(first)
    assert not second.conn.closed
    release_wire(second)
    assert second.conn.closed
    third = acquire_wire(nats_server.url, "c")
    assert third is not first and not third.conn.closed
    release_wire(third)


async def _old_layout_stream(url: str) -> int:
    """A stream partitioned by an earlier binloop (the session kept in the subject)."""
    from nats.js.api import StreamConfig, SubjectTransform

    from binloop.nats.jetstream import ensure_telemetry_stream, telemetry_stream_spec
    from binloop.nats.publish import messages

    nc = await connect(url, "test-old", 10)
    try:
        js = nc.jetstream(timeout=10)
        dest = "telemetry_p.{{partition(2,2)}}.{{wildcard(1)}}.{{wildcard(2)}}"
        await js.add_stream(StreamConfig(name="TELEMETRY", subjects=["telemetry.>"],
                                         subject_transform=SubjectTransform("telemetry.*.*",
                                                                            dest)))
        for msg in messages([orjson.dumps({"i": i, "session_id": i % 3, "tool": f"t{i % 5}"})
                             for i in range(40)]):
            await js.publish(msg.subject, msg.payload, headers=msg.headers)
        return await ensure_telemetry_stream(js, telemetry_stream_spec("TELEMETRY",
                                                                       "telemetry", 8))
    finally:
        await nc.close()


def test_a_stream_of_the_earlier_layout_is_read_whole(nats_server: NatsServer) -> None:
    from binloop.nats.subjects import partition_filters

    assert run(_old_layout_stream(nats_server.url)) == 2  # the stream keeps its own count
    conn = WireConnection(nats_server.url, "test")
    try:
        read: list[int] = []
        for partition in range(2):
            consumer = WireOrderedConsumer(conn, "TELEMETRY",
                                           partition_filters("telemetry", partition), 0, "p")
            got = drain(consumer, lambda d, c=consumer: c.caught_up() and d.messages > 0)
            read += numbers(got.items)
            consumer.close()
    finally:
        conn.close()
    assert sorted(read) == list(range(40))
