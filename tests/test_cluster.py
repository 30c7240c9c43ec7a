"""The live job as a cluster of separate `binloop run` processes (each with its process
id and the shared address list, as pods of a StatefulSet run it), against a real
nats-server: the same events as one process and as the reference engine, metrics
scraped over HTTP, the status the job publishes, and recovery across restarts of the
cluster with other process and worker counts."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from binloop.cli.commands.run import run_live
from binloop.core.config import Config
from binloop.core.summary import RunSummary
from binloop.nats.server import NatsServer
from binloop.ops.cluster import free_ports
from tests.nats_fixtures import live_config, publish, stream_messages, telemetry
from tests.test_live_nats import (
    COUNTERS,
    assert_events_stream,
    assert_same_counters,
    assert_same_events,
    events_in,
    reference,
    wait_for,
)

pytestmark = pytest.mark.slow
PARTITIONS = 4


def start_member(config: Config, tmp_path: Path, name: str, *args: str,
                 **env: str) -> subprocess.Popen[bytes]:
    """One `binloop run` process; settings from the environment, cluster flags in `args`."""
    full_env = {**os.environ, **config.to_env(),
                "BINLOOP_SUMMARY_OUT": str(tmp_path / "summary.json"), **env}
    log = open(tmp_path / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([sys.executable, "-m", "binloop.cli", "run", *args], env=full_env,
                            stdout=log, stderr=subprocess.STDOUT)


def cluster_args(process_id: int, addresses: str, metrics_port: int = 0) -> list[str]:
    return ["--process-id", str(process_id), "--addresses", addresses,
            "--metrics-port", str(metrics_port), "--metrics-addr", "127.0.0.1"]


def local_addresses(count: int) -> str:
    return ";".join(f"127.0.0.1:{port}" for port in free_ports(count))


def summary_of(tmp_path: Path) -> RunSummary:
    try:
        return RunSummary.from_json(orjson.loads((tmp_path / "summary.json").read_bytes()))
    except (FileNotFoundError, orjson.JSONDecodeError):
        return RunSummary()


def counters(summary: Any) -> dict[str, int]:
    return {k: getattr(summary, k) for k in COUNTERS}


def scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def total(scrapes: list[Any], name: str) -> float:
    return sum(sum(s.get(name, {}).values()) for s in scrapes)


def by_partition(scrapes: list[Any], name: str) -> list[dict[str, float]]:
    return [{dict(labels)["partition"]: v for labels, v in s.get(name, {}).items()}
            for s in scrapes]


def partition_last_seqs(url: str) -> dict[str, int]:
    """The last stream sequence of each partition (from the stored subjects)."""
    last: dict[str, int] = {}
    for seq, (subject, _, _) in enumerate(stream_messages(url, "TELEMETRY"), start=1):
        last[f"TELEMETRY/{subject.split('.')[1]}"] = seq
    return last


def binloop_status(config: Config) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "binloop.cli", "status", "--json"],
                          env={**os.environ, **config.to_env()}, capture_output=True,
                          check=True)
    return dict(orjson.loads(done.stdout))


def stop_all(jobs: list[subprocess.Popen[bytes]]) -> list[int]:
    for job in jobs:
        job.send_signal(signal.SIGTERM)
    return [job.wait(60) for job in jobs]


def kill_all(jobs: list[subprocess.Popen[bytes]]) -> None:
    for job in jobs:
        if job.poll() is None:
            job.kill()
            job.wait(10)


def test_two_processes_share_the_partitions_and_serve_their_metrics(
        nats_server: NatsServer, tmp_path: Path) -> None:
    lines = telemetry(6000, seed=21)
    publish(nats_server.url, lines, partitions=PARTITIONS)
    config = live_config(nats_server.url, tmp_path, until_idle="off", status_interval="300ms")
    expected, ref_summary = reference(config, lines, tmp_path)
    addresses, ports = local_addresses(2), free_ports(2)
    # Process 0 logs JSON lines (process 1 may also print timely's own "error connecting
    # to worker 0 ... retrying" while process 0 starts, which is not binloop's).
    jobs = [start_member(config, tmp_path, "p0", *cluster_args(0, addresses, ports[0]),
                         BINLOOP_LOG_FORMAT="json"),
            start_member(config, tmp_path, "p1", *cluster_args(1, addresses, ports[1]))]
    try:
        wait_for(lambda: counters(summary_of(tmp_path)) == counters(ref_summary))
        scrapes = [scrape(port) for port in ports]
        running = binloop_status(config)
        assert stop_all(jobs) == [0, 0]
    finally:
        kill_all(jobs)
    assert_same_events(events_in(tmp_path / "events.jsonl"), expected)
    assert_events_stream(nats_server.url, expected)
    assert_same_counters(summary_of(tmp_path), ref_summary)

    # Each process counted its own share; Prometheus' sum is the job's count.
    assert total(scrapes, "binloop_records_read_total") == len(lines)
    assert 0 < total(scrapes[:1], "binloop_records_read_total") < len(lines)
    for metric, field in (("binloop_records_valid_total", "valid"),
                          ("binloop_records_counted_total", "counted"),
                          ("binloop_records_duplicate_total", "duplicates"),
                          ("binloop_records_late_total", "late"),
                          ("binloop_events_fired_total", "events_fired")):
        assert total(scrapes, metric) == getattr(ref_summary, field), metric
    positions = by_partition(scrapes, "binloop_source_position")
    assert all(positions) and not set(positions[0]) & set(positions[1])
    assert {**positions[0], **positions[1]} == partition_last_seqs(nats_server.url)
    pending = by_partition(scrapes, "binloop_source_pending_messages")
    assert set({**pending[0], **pending[1]}.values()) == {0}

    # `binloop status` while running: the consumers of the 4 partitions, all caught up.
    consumers = running["telemetry"]["consumers"]
    assert sorted(c["partition"] for c in consumers) == list(range(PARTITIONS))
    assert {c["pending"] for c in consumers} == {0}
    # ... and once stopped, the job's published summary and both processes.
    published = binloop_status(config)["job"]["published"]
    assert {k: published["summary"][k] for k in COUNTERS} == counters(ref_summary)
    assert {k: p["state"] for k, p in published["processes"].items()} == \
        {"0": "stopped", "1": "stopped"}
    assert sum(p["metrics"]["records_read"] for p in published["processes"].values()) == \
        len(lines)
    json_log = (tmp_path / "p0.log").read_bytes().splitlines()
    assert json_log and all(orjson.loads(line)["process_id"] == 0 for line in json_log)

    # One process on the same stream fires the very same events.
    one = run_live(config.replace(events_stream="BIN_EVENTS_ONE", events_subject_prefix="bin.one",
                                  events_out=str(tmp_path / "one.jsonl"), until_idle=1500,
                                  status_interval=None, summary_out=None))
    assert_same_events(events_in(tmp_path / "one.jsonl"), events_in(tmp_path / "events.jsonl"))
    assert_same_counters(one, ref_summary)


def resumed_positions(log: Path) -> list[int]:
    return [int(m.group(1)) for m in
            re.finditer(r"resumes after stream seq (\d+)", log.read_text(errors="replace"))]


def test_cluster_restarts_with_other_worker_counts_exactly_once(
        nats_server: NatsServer, tmp_path: Path) -> None:
    """2 processes x 1 worker, killed -9 mid-stream; 1 process x 2 workers, killed -9;
    then 2 processes x 2 workers to the end, all from one recovery store."""
    lines = telemetry(12000, seed=23)
    config = live_config(nats_server.url, tmp_path, recovery_dir=tmp_path / "recovery",
                         snapshot_interval="300ms", until_idle="off", status_interval="off")
    expected, ref_summary = reference(config, lines, tmp_path)
    # The first half is published before the first kill, the rest after it: however
    # late a loaded machine lets the kill come, the stream is cut mid-way.
    half = len(lines) // 2
    publisher = threading.Thread(target=publish, args=(nats_server.url, lines[:half]),
                                 kwargs={"rate": 2000, "partitions": PARTITIONS})
    publisher.start()
    jobs: list[subprocess.Popen[bytes]] = []
    try:
        addresses = local_addresses(2)
        jobs = [start_member(config, tmp_path, f"a{i}", *cluster_args(i, addresses))
                for i in range(2)]
        wait_for(lambda: summary_of(tmp_path).records_read >= 3000
                 and len(events_in(tmp_path / "events.jsonl")) >= 3, jobs[0])
        time.sleep(1.0)  # three snapshot intervals: every partition has a position to resume
        kill_all(jobs)
        fired_first = len(events_in(tmp_path / "events.jsonl"))
        read_first = summary_of(tmp_path).records_read
        publisher.join()
        publisher = threading.Thread(target=publish, args=(nats_server.url, lines[half:]),
                                     kwargs={"rate": 2000, "partitions": PARTITIONS})
        publisher.start()
        jobs = [start_member(config, tmp_path, "b", "--workers", "2")]
        # b's own progress: the summary still says what a read, which under load can be
        # past 7000 already; b must have resumed every partition and read on from there.
        wait_for(lambda: len(resumed_positions(tmp_path / "b.log")) == PARTITIONS
                 and summary_of(tmp_path).records_read
                 >= min(len(lines), max(7000, read_first + 500)), jobs[0])
        kill_all(jobs)
        publisher.join()
        addresses = local_addresses(2)
        jobs = [start_member(config, tmp_path, f"c{i}", *cluster_args(i, addresses),
                             "--workers", "2", "--until-idle", "2") for i in range(2)]
        assert [job.wait(120) for job in jobs] == [0, 0]
    finally:
        kill_all(jobs)
        publisher.join()
    assert 3 <= fired_first < len(expected)
    for phase in ("b", "c0"):  # every partition resumed from a snapshot, not the start
        resumed = resumed_positions(tmp_path / f"{phase}.log") + \
            (resumed_positions(tmp_path / "c1.log") if phase == "c0" else [])
        assert len(resumed) == PARTITIONS and min(resumed) > 0, phase
    assert_same_events(events_in(tmp_path / "events.jsonl"), expected)
    assert_events_stream(nats_server.url, expected)
    assert_same_counters(summary_of(tmp_path), ref_summary)
