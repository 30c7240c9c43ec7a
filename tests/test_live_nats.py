"""The live job against a real nats-server: events, outputs and counters equal the
reference engine's on the same records."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from binloop.cli.commands.run import run_live
from binloop.core.config import Config
from binloop.core.summary import RunSummary
from binloop.engines.reference import run_reference
from binloop.nats.server import NatsServer, free_port
from binloop.nats.subjects import MSG_ID_HEADER, event_subject
from binloop.nats.telemetry_client import TelemetryClient
from tests.nats_fixtures import (
    live_config,
    publish,
    stream_messages,
    stream_names,
    telemetry,
    write_lines,
)

pytestmark = pytest.mark.slow

COUNTERS = ("records_read", "valid", "invalid", "counted", "duplicates", "late",
            "events_fired")


def reference(config: Config, lines: list[bytes], tmp_path: Path) -> tuple[list[Any], Any]:
    """Events and summary of the reference engine on the same records, in file order."""
    source = write_lines(tmp_path / "telemetry.jsonl", lines)
    out = tmp_path / "reference_events.jsonl"
    summary = run_reference(config.replace(input=str(source), out=str(out),
                                           dead_letter=str(tmp_path / "ref_dead.jsonl")))
    return [orjson.loads(line) for line in out.read_bytes().splitlines()], summary


def events_in(path: Path) -> list[Any]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def assert_same_events(live: list[Any], expected: list[Any]) -> None:
    assert len(live) == len(expected)
    by_id = {e["event_id"]: e for e in expected}
    for event in live:
        assert event == by_id[event["event_id"]]


def assert_events_stream(url: str, expected: list[Any]) -> None:
    """BIN_EVENTS holds each event exactly once, on its escaped subject."""
    stored = stream_messages(url, "BIN_EVENTS")
    assert len(stored) == len(expected)
    by_id = {e["event_id"]: e for e in expected}
    for subject, headers, payload in stored:
        event = orjson.loads(payload)
        assert event == by_id[headers[MSG_ID_HEADER]]
        assert subject == event_subject("bin.events", event["tool"], event["failure_mode"])


def assert_same_counters(live: Any, expected: Any) -> None:
    assert {k: getattr(live, k) for k in COUNTERS} == {k: getattr(expected, k) for k in COUNTERS}


def assert_job_is_the_reference(url: str, config: Config, lines: list[bytes],
                                tmp_path: Path) -> None:
    """A job that wrote events.jsonl and summary.json under `tmp_path` fired the
    reference's events, once each on the events stream, with the reference's counters."""
    expected, ref_summary = reference(config, lines, tmp_path)
    assert_same_events(events_in(tmp_path / "events.jsonl"), expected)
    assert_events_stream(url, expected)
    summary = RunSummary.from_json(orjson.loads((tmp_path / "summary.json").read_bytes()))
    assert_same_counters(summary, ref_summary)


@pytest.mark.parametrize("client", ["auto", "nats-py"])
def test_live_events_equal_the_reference(nats_server: NatsServer, tmp_path: Path,
                                         client: str) -> None:
    """Through binloop's wire reader (auto) and through nats-py."""
    lines = telemetry(6000)
    publish(nats_server.url, lines)
    config = live_config(nats_server.url, tmp_path, nats_client=client)
    summary = run_live(config)
    expected, ref_summary = reference(config, lines, tmp_path)
    assert len(expected) >= 20
    tools = {e["tool"] for e in expected}
    assert {"book.flight", "get user", "café_lookup", "検索", "a*b>c", "x" * 250} <= tools
    assert_same_events(events_in(tmp_path / "events.jsonl"), expected)
    assert_events_stream(nats_server.url, expected)
    assert_same_counters(summary, ref_summary)


def start_job(config: Config, tmp_path: Path, name: str, *extra: str) -> subprocess.Popen[bytes]:
    """`binloop run` in its own process, configured through the environment."""
    env = {**os.environ, **config.to_env(), "BINLOOP_SUMMARY_OUT": str(tmp_path / name)}
    log = open(tmp_path / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([sys.executable, "-m", "binloop.cli", "run", *extra], env=env,
                            stdout=log, stderr=subprocess.STDOUT)


def records_read(summary_path: Path) -> int:
    """Records read so far by a running job (its summary file, rewritten every second)."""
    try:
        return int(orjson.loads(summary_path.read_bytes())["records_read"])
    except (FileNotFoundError, orjson.JSONDecodeError):
        return 0


def wait_for(predicate: Callable[[], bool], job: subprocess.Popen[bytes] | None = None,
             timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if job is not None and job.poll() is not None:
            raise AssertionError(f"the job exited with {job.returncode}")
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


def stream_exists(url: str, name: str) -> bool:
    return any(n == name for n in stream_names(url))


def committed_epoch(recovery: Path) -> int:
    """The newest epoch a job committed to its Bytewax recovery store (-1: none)."""
    newest = -1
    for part in recovery.glob("part-*.sqlite3"):
        with contextlib.closing(sqlite3.connect(f"file:{part}?mode=ro", uri=True)) as db:
            try:
                row = db.execute("SELECT MAX(commit_epoch) FROM commits").fetchone()
            except sqlite3.OperationalError:  # not created yet
                continue
            newest = max(newest, row[0] if row and row[0] is not None else -1)
    return newest


def test_kill_9_and_resume_from_recovery_is_exactly_once(
        nats_server: NatsServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lines = telemetry(9000, seed=11)
    config = live_config(nats_server.url, tmp_path, recovery_dir=tmp_path / "recovery",
                         snapshot_interval="300ms", until_idle="off")
    publisher = threading.Thread(target=publish, args=(nats_server.url, lines),
                                 kwargs={"rate": 3000})
    job = start_job(config, tmp_path, "first.json")
    try:
        # The job is running (its event sink made BIN_EVENTS) before telemetry flows in.
        wait_for(lambda: stream_exists(nats_server.url, "BIN_EVENTS"), job)
        publisher.start()
        # mid-stream: a third of the telemetry read, events out, a snapshot committed
        # after that (the job reads faster than 3000 records/s)
        wait_for(lambda: records_read(tmp_path / "first.json") >= 3000
                 and len(events_in(tmp_path / "events.jsonl")) >= 5, job)
        committed = committed_epoch(tmp_path / "recovery")
        wait_for(lambda: committed_epoch(tmp_path / "recovery") > committed, job)
        os.kill(job.pid, signal.SIGKILL)
        assert job.wait(10) == -signal.SIGKILL
    finally:
        if job.poll() is None:
            job.kill()
        publisher.join()
    fired_before = len(events_in(tmp_path / "events.jsonl"))
    with caplog.at_level(logging.INFO, "binloop"):
        summary = run_live(config.replace(until_idle=1500))
    resumed = [int(m.group(1)) for m in re.finditer(r"resumes after stream seq (\d+)", caplog.text)]
    assert len(resumed) == 4 and sum(resumed) > 0  # from the snapshot, not from the start
    expected, ref_summary = reference(config, lines, tmp_path)
    assert 5 <= fired_before < len(expected)
    assert_same_events(events_in(tmp_path / "events.jsonl"), expected)
    assert_events_stream(nats_server.url, expected)
    assert_same_counters(summary, ref_summary)


def record_all(client: TelemetryClient, lines: list[bytes]) -> None:
    for line in lines:
        fields = orjson.loads(line)
        client.record(fields.pop("tool"), fields.pop("outcome"), **fields)


def test_nats_server_restart_mid_stream_loses_nothing(nats_server: NatsServer,
                                                      tmp_path: Path) -> None:
    """The server goes down while the job runs and agents record; the agents' client
    buffers, the job reconnects and resumes; SIGTERM then stops it cleanly."""
    lines = telemetry(6000, seed=5)
    config = live_config(nats_server.url, tmp_path, until_idle="off")
    job = start_job(config, tmp_path, "summary.json")
    try:
        with TelemetryClient(tmp_path / "agent.jsonl", nats_server.url) as client:
            record_all(client, lines[:3000])
            wait_for(lambda: records_read(tmp_path / "summary.json") > 0, job)
            nats_server.stop()
            record_all(client, lines[3000:4500])  # the agent goes on while NATS is down
            assert client.pending_bytes > 0
            time.sleep(1.0)
            nats_server.start()
            record_all(client, lines[4500:])
            assert client.flush(timeout=60)
        wait_for(lambda: records_read(tmp_path / "summary.json") == len(lines), job)
        job.send_signal(signal.SIGTERM)
        assert job.wait(60) == 0
    finally:
        if job.poll() is None:
            job.kill()
    assert_job_is_the_reference(nats_server.url, config, lines, tmp_path)
    assert "resuming after stream seq" in (tmp_path / "summary.json.log").read_text()


def test_two_processes_and_batch_envelopes_give_the_same_events(nats_server: NatsServer,
                                                                tmp_path: Path) -> None:
    """`binloop publish --batch` then `binloop run --processes 2`, stopped by SIGTERM."""
    lines = telemetry(8000, seed=13)
    source = write_lines(tmp_path / "telemetry.jsonl", lines)
    published = subprocess.run(
        [sys.executable, "-m", "binloop.cli", "publish", "--nats", nats_server.url,
         "--batch", "25", "--partitions", "4", str(source)],
        capture_output=True, text=True, check=True)
    assert "published 8,000 records in" in published.stderr
    config = live_config(nats_server.url, tmp_path, processes=2, workers=1, until_idle="off")
    job = start_job(config, tmp_path, "summary.json")
    try:
        wait_for(lambda: records_read(tmp_path / "summary.json") == len(lines), job)
        job.send_signal(signal.SIGTERM)  # passed on to both processes
        assert job.wait(60) == 0
    finally:
        if job.poll() is None:
            job.kill()
    assert_job_is_the_reference(nats_server.url, config, lines, tmp_path)


def test_until_idle_0_drains_the_backlog_and_ends(nats_server: NatsServer,
                                                  tmp_path: Path) -> None:
    """`binloop run --processes 2 --until-idle 0` over a pre-filled stream ends by itself
    once drained, having read every record once; so does one over an empty stream
    (another stream name)."""
    lines = telemetry(5000, seed=17)
    publish(nats_server.url, lines, batch=50)
    config = live_config(nats_server.url, tmp_path, processes=2, workers=1, until_idle="0")
    job = start_job(config, tmp_path, "summary.json")
    try:
        assert job.wait(120) == 0  # without --until-idle it would run on
    finally:
        if job.poll() is None:
            job.kill()
    assert records_read(tmp_path / "summary.json") == len(lines)
    assert_job_is_the_reference(nats_server.url, config, lines, tmp_path)
    empty = config.replace(stream="EMPTY_TELEMETRY", subject_prefix="empty.telemetry",
                           events_out=str(tmp_path / "empty_events.jsonl"))
    job = start_job(empty, tmp_path, "empty_summary.json")
    try:
        assert job.wait(120) == 0
    finally:
        if job.poll() is None:
            job.kill()


def test_builds_need_a_library(capsys: pytest.CaptureFixture[str]) -> None:
    from binloop.cli import main

    assert main(["run", "--nats", "nats://127.0.0.1:1"]) == 64  # EX_USAGE
    err = capsys.readouterr().err
    assert "--library" in err and "--no-build" in err


def test_run_without_a_reachable_server_is_a_clean_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    from binloop.cli import main

    port = free_port()  # nothing listens there
    assert main(["run", "--nats", f"nats://127.0.0.1:{port}", "--no-build",
                 "--connect-timeout", "500ms"]) == 69  # EX_UNAVAILABLE
    assert "cannot connect to NATS" in capsys.readouterr().err


def test_a_stream_whose_subjects_overlap_another_is_a_clean_error(
        nats_server: NatsServer, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    from binloop.cli import main
    from binloop.nats.jetstream import StreamSpec, connect, ensure_stream

    async def squat() -> None:
        nc = await connect(nats_server.url, "test-squatter", 10)
        await ensure_stream(nc.jetstream(), StreamSpec("OTHER", ("telemetry.>",)))
        await nc.close()

    asyncio.run(squat())
    assert main(["run", "--nats", nats_server.url, "--no-build", "--stream", "MINE"]) == 64
    err = capsys.readouterr().err
    assert "cannot create stream MINE" in err and "overlap" in err
