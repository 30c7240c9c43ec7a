"""`binloop status` against a real nats-server before any job ran, and the status
publisher's keys (the running job is covered in test_cluster)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from binloop.cli import main
from binloop.core.summary import RunSummary
from binloop.nats.jetstream import connect
from binloop.nats.server import NatsServer, free_port
from binloop.ops.job_status import PublisherSettings, StatusPublisher, read_job_status

pytestmark = pytest.mark.slow


def test_status_of_a_fresh_server_reports_what_is_missing(
        nats_server: NatsServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--nats", nats_server.url, "--library", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "telemetry stream TELEMETRY: missing" in out
    assert "events stream BIN_EVENTS: missing" in out
    assert "no status bucket" in out
    assert f"library {tmp_path}: empty" in out


def test_status_without_a_server_is_a_clean_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--nats", f"nats://127.0.0.1:{free_port()}",
                 "--connect-timeout", "500ms"]) == 69  # EX_UNAVAILABLE
    assert "cannot connect to NATS" in capsys.readouterr().err


def test_publisher_writes_process_and_summary_keys(nats_server: NatsServer) -> None:
    publisher = StatusPublisher(PublisherSettings(nats_server.url, "STATUS_T", "job-a", 0.1,
                                                  process_id=3, processes=4, workers=2)).start()
    summary = RunSummary(records_read=10, valid=9, invalid=1, events_fired=2)
    publisher.note_summary(summary)
    publisher.close()
    assert publisher.published >= 2

    async def read() -> object:
        nc = await connect(nats_server.url, "test", 5)
        try:
            return await read_job_status(nc.jetstream(), "STATUS_T", "job-a")
        finally:
            await nc.close()

    status = asyncio.run(read())
    assert isinstance(status, dict)
    assert status["summary"]["records_read"] == 10 and status["summary"]["process_id"] == 3
    process = status["processes"]["3"]
    assert (process["state"], process["workers"], process["processes"]) == ("stopped", 2, 4)
