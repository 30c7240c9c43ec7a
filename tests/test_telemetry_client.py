"""The agents' telemetry client: never blocks, buffers in its log, catches up in order."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from binloop.nats.server import NatsServer, free_port
from binloop.nats.subjects import MSG_ID_HEADER, telemetry_subject
from binloop.nats.telemetry_client import TelemetryClient
from tests.nats_fixtures import publish, stream_messages


def test_records_are_logged_even_without_nats(tmp_path: Path) -> None:
    with TelemetryClient(tmp_path / "agent.jsonl") as client:
        rec = client.record("search", "FAILURE", session_id=7, failure_mode="notfound.user",
                            args={"q": "x"}, ts=1_700_000_000_000, duration_ms=12)
        assert rec["outcome"] == "failure" and rec["failure_mode"] == "NOTFOUND.user"
        assert not client.flush(timeout=0.1)  # no NATS configured: nothing to flush to
    logged = [orjson.loads(line) for line in (tmp_path / "agent.jsonl").read_bytes().splitlines()]
    assert logged == [rec]


def test_invalid_records_are_logged_unless_strict(tmp_path: Path) -> None:
    with TelemetryClient(tmp_path / "agent.jsonl") as client:
        client.record("search", "exploded", session_id=1)  # the job will dead-letter it
    with TelemetryClient(tmp_path / "strict.jsonl", strict=True) as client, \
            pytest.raises(ValueError, match="outcome"):
        client.record("search", "exploded", session_id=1)
    assert b'"exploded"' in (tmp_path / "agent.jsonl").read_bytes()
    assert (tmp_path / "strict.jsonl").read_bytes() == b""


def test_one_log_one_client(tmp_path: Path) -> None:
    with TelemetryClient(tmp_path / "agent.jsonl"), pytest.raises(RuntimeError, match="another"):
        TelemetryClient(tmp_path / "agent.jsonl")


@pytest.mark.slow
def test_buffers_while_nats_is_down_then_catches_up_in_order(tmp_path: Path) -> None:
    server = NatsServer(free_port(), tmp_path / "nats")
    log = tmp_path / "agent.jsonl"
    try:
        client = TelemetryClient(log, server.url)
        started = time.monotonic()
        first = [client.record("book.flight", "failure", session_id=i % 3, failure_mode="ARGS",
                               ts=1_700_000_000_000 + i, args={"i": i}) for i in range(300)]
        assert time.monotonic() - started < 5  # recorded although no server is up
        assert client.pending_bytes == log.stat().st_size
        server.start()
        publish(server.url, [])  # the job would create the stream; do it here
        assert client.flush(timeout=30)
        client.close()
        # A torn last line (a crash mid-write) and a new client on the same log: only
        # what was not yet published goes out, the torn line as its own message.
        with open(log, "ab") as torn:
            torn.write(b'{"session_id": 1, "to')
        with TelemetryClient(log, server.url) as again:
            later = [again.record("get user", "success", session_id="s", ts=1_700_000_001_000)]
            assert again.flush(timeout=30)
        stored = stream_messages(server.url, "TELEMETRY")
    finally:
        server.close()
    payloads = [orjson.loads(data) for _, _, data in stored[:300]]
    assert payloads == first  # all of them, once, in the log's order
    assert [headers[MSG_ID_HEADER] for _, headers, _ in stored[:300]] == [r["id"] for r in first]
    assert stored[300][2] == b'{"session_id": 1, "to'
    assert orjson.loads(stored[301][2]) == later[0]
    assert len(stored) == 302
    assert {subject for subject, _, _ in stored[:300]} <= {
        f"telemetry_p.{p}.book%2Eflight" for p in range(4)}
    assert telemetry_subject("telemetry", 0, "book.flight") == "telemetry.0.book%2Eflight"


def test_the_old_import_path_still_works_and_says_it_moved() -> None:
    import importlib
    import sys

    import pytest

    sys.modules.pop("binloop.telemetry_client", None)
    with pytest.warns(DeprecationWarning, match="binloop.nats.telemetry_client"):
        old = importlib.import_module("binloop.telemetry_client")
    from binloop.nats.telemetry_client import TelemetryClient

    assert old.TelemetryClient is TelemetryClient
