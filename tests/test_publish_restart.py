"""`binloop publish` across a real nats-server restart: every record is stored exactly
once; a server that stays down ends the command after --publish-deadline with exit 75
and one line naming the first record not stored, and every record before it is
stored."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from nats.js.errors import NotFoundError

from binloop.nats.jetstream import connect
from binloop.nats.server import NatsServer
from binloop.nats.subjects import MSG_ID_HEADER
from tests.nats_fixtures import stream_messages, telemetry, write_lines

pytestmark = pytest.mark.slow


def start_publish(url: str, source: Path, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINLOOP_")}
    return subprocess.Popen(
        [sys.executable, "-m", "binloop.cli", "publish", str(source), "--nats", url,
         "--partitions", "4", *extra],
        env=env, stdout=subprocess.DEVNULL, stderr=log.open("wb"))


def stored_count(url: str) -> int:
    async def count() -> int:
        nc = await connect(url, "test-count", 5)
        try:
            return int((await nc.jetstream().stream_info("TELEMETRY")).state.messages)
        finally:
            await nc.close()

    try:
        return asyncio.run(count())
    except NotFoundError:  # not created yet
        return 0


def wait_stored(url: str, at_least: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stored_count(url) >= at_least:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {at_least} records stored after {timeout}s")


def stored_ids(url: str) -> list[str]:
    return [headers[MSG_ID_HEADER] for _, headers, _ in stream_messages(url, "TELEMETRY")]


def ids_of(lines: list[bytes]) -> list[str]:
    from binloop.nats.publish import record_message

    return [record_message(line).headers[MSG_ID_HEADER] for line in lines]


@pytest.mark.parametrize(("how", "down_for"), [("stop", 0.5), ("kill", 3.0)])
def test_publish_across_a_server_restart_stores_every_record_once(
        nats_server: NatsServer, tmp_path: Path, how: str, down_for: float) -> None:
    """A graceful restart, and a crash (SIGKILL) with the server down for 3 s."""
    lines = telemetry(8000, seed=13)
    source = write_lines(tmp_path / "telemetry.jsonl", lines)
    log = tmp_path / "publish.log"
    publisher = start_publish(nats_server.url, source, log, "--rate", "2000")
    try:
        wait_stored(nats_server.url, 1500)
        nats_server.stop() if how == "stop" else nats_server.kill()
        time.sleep(down_for)
        nats_server.start()
        assert publisher.wait(120) == 0, log.read_text()
    finally:
        if publisher.poll() is None:
            publisher.kill()
    stored = stored_ids(nats_server.url)
    assert sorted(stored) == sorted(ids_of(lines))  # each once, none missing
    stderr = log.read_text()
    assert "Traceback" not in stderr and f"published {len(lines):,} records" in stderr
    assert "sent again" in stderr


def test_publish_gives_up_after_the_deadline_naming_the_first_record_not_stored(
        nats_server: NatsServer, tmp_path: Path) -> None:
    lines = telemetry(12_000, seed=14)
    source = write_lines(tmp_path / "telemetry.jsonl", lines)
    log = tmp_path / "publish.log"
    publisher = start_publish(nats_server.url, source, log, "--rate", "2000",
                              "--publish-deadline", "3s")
    try:
        wait_stored(nats_server.url, 1500)
        nats_server.stop()
        started = time.monotonic()
        assert publisher.wait(60) == 75
        assert time.monotonic() - started < 30
    finally:
        if publisher.poll() is None:
            publisher.kill()
    stderr = log.read_text()
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("binloop publish:")]
    assert len(errors) == 1, stderr
    line = errors[0]
    assert line.startswith("binloop publish: error: record ") and "not stored" in line
    first_missing = int(line.split("record ")[1].split(" ")[0].replace(",", ""))
    nats_server.start()
    stored = set(stored_ids(nats_server.url))
    ids = ids_of(lines)
    assert 1500 < first_missing <= len(lines)
    assert set(ids[:first_missing - 1]) <= stored  # nothing before it is lost
    assert ids[first_missing - 1] not in stored
    assert orjson.loads(lines[first_missing - 1])["ts"] > 0


def test_a_message_the_server_cannot_take_is_not_retried(nats_server: NatsServer,
                                                         tmp_path: Path) -> None:
    """Over the server's max_payload (16 MiB here): refused at once, exit 75, named."""
    lines = telemetry(10, seed=15)
    huge = orjson.dumps({"session_id": 1, "ts": 1_700_000_000_000, "tool": "big",
                         "outcome": "failure", "args": {"blob": "x" * (17 << 20)}})
    source = write_lines(tmp_path / "telemetry.jsonl", [*lines, huge, *lines[:2]])
    log = tmp_path / "publish.log"
    started = time.monotonic()
    publisher = start_publish(nats_server.url, source, log)
    assert publisher.wait(60) == 75
    assert time.monotonic() - started < 20  # not retried until the deadline
    errors = [line for line in log.read_text().splitlines()
              if line.startswith("binloop publish:")]
    assert len(errors) == 1 and errors[0].startswith("binloop publish: error: record 11 "), \
        errors
    assert "larger than the server's max_payload" in errors[0]
    assert sorted(stored_ids(nats_server.url)) == sorted(ids_of(lines))


def test_publish_follows_a_pipe(nats_server: NatsServer, tmp_path: Path) -> None:
    """`tail -F FILE | binloop publish -`: what came through the pipe is stored while the
    pipe is still open (the reader waits beside the event loop, not in it), and a line
    is published only once its end has come."""
    lines = telemetry(5, seed=9)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINLOOP_")}
    proc = subprocess.Popen([sys.executable, "-m", "binloop.cli", "publish", "-", "--nats",
                             nats_server.url], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stderr is not None
    try:
        proc.stdin.write(lines[0] + b"\n" + lines[1] + b"\n" + lines[2][:15])
        proc.stdin.flush()
        wait_stored(nats_server.url, 2)
        time.sleep(0.3)
        assert stored_count(nats_server.url) == 2  # the half line waits for its end
        proc.stdin.write(lines[2][15:] + b"\n" + b"\n".join(lines[3:]) + b"\n")
    finally:
        proc.stdin.close()
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    assert stored_ids(nats_server.url) == ids_of(lines)
