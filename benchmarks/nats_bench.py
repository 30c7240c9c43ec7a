"""`binloop bench nats`: the live job on NATS JetStream, measured in one run.

* (a) the raw ceiling: nats-py reading the whole pre-filled stream (one consumer per
  partition), no processing: stock ordered consumers with a counting callback, and
  binloop's pull consumers on nats-py drained without the dataflow; the faster is (a).
  Beside it, binloop's own wire reader (`binloop.nats.wire`, what the job reads with)
  drained the same way: the transport's ceiling;
* (b) the live job (`flows.live`, in this process, one worker) on the same stream,
  one record per message: records/s from its first record to its last; and the same
  job reading through nats-py (`--nats-client nats-py`) for comparison;
* (c) the same with batch envelopes of `--batch` records (and with 2 processes);

(a), (b) and (c) alternate over `--rounds` and report medians, in records per second
of wall time and per CPU second of the consuming process, and (with the embedded
server) the server's CPU seconds per 100k records: on a small machine the server
competes with the job for the cores;
* latency: the job running in its own process (`binloop run`) while records are
  published at `--rate` records/s (plain publishes, no ack per message: the load
  generator should take as little of the job's cores as it can): from publishing the
  θ-th failure of a key to receiving its BINEvent on `bin.events.>` (in a receiving
  process of its own), p50 / p99 / max.

Everything runs against a fresh embedded nats-server (or `--nats URL`, where the
streams `BENCH_*` are created and deleted). Results: JSON and a Markdown table in
`--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from nats.aio.msg import Msg

from benchmarks.bytecode import compile_packages
from binloop.core.config import Config, load_config
from binloop.core.schema import dumps_record, validate_record
from binloop.core.summary import RunSummary
from binloop.nats.consumer import OrderedConsumer
from binloop.nats.jetstream import connect, ensure_telemetry_stream, telemetry_stream_spec
from binloop.nats.publish import Message, messages, publish_messages
from binloop.nats.subjects import partition_prefix
from binloop.nats.wire import WireConnection
from binloop.nats.wire_consumer import WireOrderedConsumer

# Issue 12: (b) >= 1.0x the raw ceiling; (c) >= 500k records per second of the whole
# 2-process command; p99 <= 50 ms at 10k records/s.
GOALS = {"b_over_a": 1.0, "c_records_per_s": 500_000, "latency_p99_ms": 50.0}


@dataclass
class BenchArgs:
    nats: str | None
    records: int
    batch: int
    batch_records: int
    rate: float
    seconds: float
    partitions: int
    out: Path
    rounds: int = 3


def synthetic(n: int, seed: int = 1, start_ts: int | None = None) -> list[bytes]:
    """`n` records of ~300 bytes as `TelemetryClient` publishes them (normalised, with
    their id): 40 tools, 30% failures over 4 modes, dense ts."""
    rnd = random.Random(seed)
    ts = start_ts or 1_700_000_000_000
    modes = ("ARGS.bad_total", "NOTFOUND", "TIMEOUT", "NETWORK.dns")
    out = []
    for i in range(n):
        ts += rnd.randint(0, 3)
        failed = rnd.random() < 0.3
        out.append(_as_published({
            "session_id": i // 500, "ts": ts, "tool": f"tool_{rnd.randrange(40)}",
            "args": {"query": "x" * rnd.randint(10, 60), "n": i}, "agent_id": "bench",
            "outcome": "failure" if failed else "success", "duration_ms": rnd.randint(1, 900),
            "failure_mode": rnd.choice(modes) if failed else None}))
    return out


def _as_published(fields: dict[str, Any]) -> bytes:
    return dumps_record(validate_record(fields))


# -- set-up ---------------------------------------------------------------------------

async def _prefill(url: str, stream: str, prefix: str, partitions: int,
                   items: list[Message]) -> float:
    nc = await connect(url, "bench-prefill", 10)
    try:
        js = nc.jetstream(timeout=30)
        with contextlib.suppress(Exception):  # not there yet
            await js.delete_stream(stream)
        await ensure_telemetry_stream(js, telemetry_stream_spec(stream, prefix, partitions))
        stats = await publish_messages(js, items)
        return stats.records / stats.elapsed_s
    finally:
        await nc.close()


async def _drop_streams(url: str, names: list[str]) -> None:
    nc = await connect(url, "bench-cleanup", 10)
    try:
        for name in names:
            with contextlib.suppress(Exception):  # already gone
                await nc.jetstream().delete_stream(name)
    finally:
        await nc.close()


# -- (a) raw ceiling ------------------------------------------------------------------

@dataclass
class Clock:
    """Wall and CPU time (of this process) between the first and the last record."""

    wall: float = 0.0
    cpu: float = 0.0

    def start(self) -> None:
        if not self.wall:
            self.wall, self.cpu = time.perf_counter(), time.process_time()

    def rates(self, records: int) -> dict[str, float]:
        return {"records_per_s": records / (time.perf_counter() - self.wall),
                "records_per_cpu_s": records / max(time.process_time() - self.cpu, 1e-9)}


def _filters(prefix: str, partitions: int) -> list[str]:
    return [f"{partition_prefix(prefix)}.{i}.>" for i in range(partitions)]


async def _raw_ordered_callback(url: str, stream: str, prefix: str, partitions: int,
                                expected: int) -> dict[str, float]:
    """Stock nats-py: one ordered consumer per partition, a callback that counts."""
    nc = await connect(url, "bench-raw", 10)
    done = asyncio.Event()
    clock = Clock()
    count = 0

    async def on_msg(msg: Msg) -> None:
        nonlocal count
        clock.start()
        count += 1
        if count >= expected:
            done.set()

    try:
        js = nc.jetstream()
        for subject in _filters(prefix, partitions):
            await js.subscribe(subject, stream=stream, cb=on_msg, ordered_consumer=True)
        await asyncio.wait_for(done.wait(), 600)
        return clock.rates(expected)
    finally:
        await nc.close()


async def _raw_pull_drain(url: str, stream: str, prefix: str, partitions: int,
                          expected: int) -> dict[str, float]:
    """nats-py through binloop's consumer (`binloop.nats.consumer`, the source's way of
    reading: one pull consumer per partition, bounded requests in flight), records
    counted and dropped: the transport without the dataflow."""
    nc = await connect(url, "bench-raw", 10)
    try:
        js = nc.jetstream()
        consumers = [OrderedConsumer(nc, js, stream, [subject], 0, subject)
                     for subject in _filters(prefix, partitions)]
        clock = Clock()
        count = 0
        while count < expected:
            for consumer in consumers:
                got = (await consumer.poll(4096, 0.0)).records
                if got:
                    clock.start()
                    count += got
        for consumer in consumers:
            await consumer.close()
        return clock.rates(expected)
    finally:
        await nc.close()


def _raw_wire_drain(url: str, stream: str, prefix: str, partitions: int,
                    expected: int) -> dict[str, float]:
    """binloop's wire reader (`binloop.nats.wire`, the job's transport): one pull
    consumer per partition on one connection, records counted and dropped."""
    conn = WireConnection(url, "bench-raw", 10)
    try:
        consumers = [WireOrderedConsumer(conn, stream, [subject], 0, subject)
                     for subject in _filters(prefix, partitions)]
        clock = Clock()
        count = 0
        while count < expected:
            polled = 0
            for consumer in consumers:
                polled += consumer.poll(4096).records
            if polled:
                clock.start()
                count += polled
            else:
                time.sleep(0.0002)  # as the job's source: no busy wait on an empty socket
        rates = clock.rates(expected)
        for consumer in consumers:
            consumer.close()
        return rates
    finally:
        conn.close()


# -- (b), (c) the job in this process ----------------------------------------------------

def _job_config(url: str, stream: str, prefix: str, out: Path, **extra: str) -> Config:
    values = {"nats": url, "stream": stream, "subject_prefix": prefix, "build": "false",
              "until_idle": "1", "events_stream": f"{stream}_EVENTS",
              "events_subject_prefix": f"bench.{prefix}.events",
              "dead_letter": str(out / f"{stream}.dead.jsonl"), **extra}
    return load_config(values, env={})


def run_job_in_process(config: Config, expected: int) -> dict[str, float]:
    """Run flows.live until idle: records per second (wall and CPU time of this process)
    from the first record read to the last."""
    from datetime import timedelta

    from bytewax.run import cli_main

    from flows.live import build_flow

    clock = Clock()
    rates: dict[str, float] = {}
    read = 0

    def on_summary(summary: RunSummary) -> None:
        nonlocal read
        clock.start()
        read = summary.records_read
        if read >= expected and not rates:
            rates.update(clock.rates(expected))

    cli_main(build_flow(config, on_summary=on_summary), workers_per_process=config.workers,
             epoch_interval=timedelta(milliseconds=config.snapshot_interval))
    if not rates:
        raise RuntimeError(f"the job read {read} of {expected} records")
    return rates


def run_job_processes(url: str, config: Config, expected: int, out: Path,
                      server: ServerCpu | None = None) -> dict[str, Any]:
    """`binloop run --processes N` as `config` ends it, start to exit (start-up and any
    idle wait included): records/s of that whole command, per CPU second of all its processes and
    of the server; and, coarser, from the difference of its wall time and that of the
    same command on an empty stream."""
    server = server or ServerCpu(None)

    def wall(conf: Config, name: str) -> tuple[float, float, float, RunSummary]:
        summary_path = out / f"{name}.summary.json"
        env = {**os.environ, **conf.to_env(), "BINLOOP_SUMMARY_OUT": str(summary_path)}
        before, server_before = _children_cpu(), server.seconds()
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "binloop.cli", "run"], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        elapsed = time.perf_counter() - started
        cpu, server_cpu = _children_cpu() - before, server.seconds() - server_before
        if not summary_path.exists():  # no counters flowed (the empty stream)
            return elapsed, cpu, server_cpu, RunSummary()
        summary = RunSummary.from_json(orjson.loads(summary_path.read_bytes()))
        return elapsed, cpu, server_cpu, summary

    asyncio.run(_prefill(url, "BENCH_EMPTY", "bempty", config.partitions, []))
    empty = config.replace(stream="BENCH_EMPTY", subject_prefix="bempty")
    overhead, overhead_cpu, _, _ = wall(empty, "empty")
    full, cpu, server_cpu, summary = wall(config, "full")
    if summary.records_read != expected:
        raise RuntimeError(f"the job read {summary.records_read} of {expected} records")
    result = {"records": expected, "processes": config.processes, "wall_s": full,
              "cpu_s": cpu, "overhead_s": overhead, "overhead_cpu_s": overhead_cpu,
              "records_per_s": expected / max(full - overhead, 1e-9),
              "whole_records_per_s": expected / full,
              "records_per_cpu_s": expected / max(cpu, 1e-9)}
    if server.pid is not None:
        result["server_cpu_s"] = server_cpu
        result["records_per_server_cpu_s"] = expected / max(server_cpu, 1e-9)
    return result


def _children_cpu() -> float:
    """CPU seconds of this process's finished children (the job's processes)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# -- latency ----------------------------------------------------------------------------

def latency_records(rate: float, seconds: float) -> list[bytes]:
    """Records at real time: every 300 records a new set of 5 tools, each failing
    about 6 times in one session, so that a key fires every ~60 records."""
    rnd = random.Random(3)
    now = int(time.time() * 1000)
    total = int(rate * seconds)
    out = []
    for i in range(total):
        block = i // 300
        failed = rnd.random() < 0.1
        out.append(_as_published({
            "session_id": block, "ts": now + int(i * 1000 / rate),
            "tool": f"lat_{block}_{rnd.randrange(5)}" if failed else f"ok_{rnd.randrange(40)}",
            "args": {"n": i}, "outcome": "failure" if failed else "success",
            "failure_mode": "ARGS.bad" if failed else None}))
    return out


class EventClock:
    """Receives BINEvents in a process of its own, noting when each arrived.

    Its own process, not a thread of the publisher's: a thread would wait for the
    publisher's GIL (up to the 5 ms switch interval, over and over while publishing
    keeps it busy), and that wait would be counted as the job's latency.
    `time.perf_counter` is the system's monotonic clock, the same in both processes.
    """

    def __init__(self, url: str, subject: str) -> None:
        context = multiprocessing.get_context("spawn")
        self._ready, self._stop = context.Event(), context.Event()
        self._results, sender = context.Pipe(duplex=False)
        self._process = context.Process(target=_receive_events, daemon=True,
                                        args=(url, subject, self._ready, self._stop, sender))
        self._process.start()
        sender.close()
        if not self._ready.wait(30):
            self._process.kill()
            raise RuntimeError("the BINEvent receiver did not connect within 30 s")
        self.arrived: dict[str, float] = {}

    def close(self) -> None:
        self._stop.set()
        if self._results.poll(30):
            self.arrived = self._results.recv()
        self._process.join(10)


def _receive_events(url: str, subject: str, ready: Any, stop: Any, results: Any) -> None:
    arrived: dict[str, float] = {}

    async def run() -> None:
        nc = await connect(url, "bench-events", 10)

        async def on_event(msg: Msg) -> None:
            now = time.perf_counter()
            arrived.setdefault(orjson.loads(msg.data)["evidence"][-1]["id"], now)

        await nc.subscribe(subject, cb=on_event)
        await nc.flush()
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.05)
        await nc.close()

    asyncio.run(run())
    results.send(arrived)


async def _publish_paced(url: str, lines: list[bytes], prefix: str,
                         rate: float) -> tuple[dict[str, float], float, float]:
    """Publish at `rate` records/s; returns when each record id was sent, the start,
    and the rate achieved.

    Plain NATS publishes (the stream captures the subjects; no ack per message): an
    acked JetStream publish cost this process ~39 us of CPU per message on a 2-core
    machine (2026-12-04), 40% of a core at 10k records/s taken from the job it
    measures; a plain one ~7 us. A record the server did not store fires no event,
    and the report counts the events that arrived.
    """
    nc = await connect(url, "bench-latency", 10)
    sent_at: dict[str, float] = {}
    try:
        items = list(messages(lines, 1, prefix))
        record_ids = [orjson.loads(line)["id"] for line in lines]
        started = time.perf_counter()
        for index, (msg, rid) in enumerate(zip(items, record_ids, strict=True)):
            due = started + index / rate
            if (wait := due - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            sent_at[rid] = time.perf_counter()
            await nc.publish(msg.subject, msg.payload, headers=msg.headers)
        await nc.flush()
        return sent_at, started, len(items) / (time.perf_counter() - started)
    finally:
        await nc.close()


def latency_figures(sent_at: dict[str, float], arrived: dict[str, float], after: float,
                    ) -> dict[str, float]:
    latencies = sorted((arrived[rid] - sent) * 1000 for rid, sent in sent_at.items()
                       if rid in arrived and sent >= after)
    if not latencies:
        raise RuntimeError("no BINEvent arrived")
    return {"events": len(latencies), "p50_ms": statistics.median(latencies),
            "p99_ms": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
            "max_ms": latencies[-1]}


def run_latency(url: str, args: BenchArgs, warmup_s: float = 1.0) -> dict[str, Any]:
    """The job in its own process (`binloop run`), records published at `args.rate`;
    latencies of the events fired after the first `warmup_s`."""
    stream, prefix = "BENCH_LATENCY", "blat"
    lines = latency_records(args.rate, args.seconds)
    asyncio.run(_prefill(url, stream, prefix, args.partitions, []))
    config = _job_config(url, stream, prefix, args.out, until_idle="off",
                         start="new", partitions=str(args.partitions))
    env = {**os.environ, **config.to_env(),
           "BINLOOP_SUMMARY_OUT": str(args.out / "latency_job_summary.json")}
    log = open(args.out / "latency_job.log", "wb")  # noqa: SIM115 - closed below
    job = subprocess.Popen([sys.executable, "-m", "binloop.cli", "run"], env=env,
                           stdout=log, stderr=subprocess.STDOUT)
    events = EventClock(url, f"{config.events_subject_prefix}.>")
    try:
        time.sleep(3.0)  # the job connects and creates its consumers
        sent_at, started, achieved = asyncio.run(_publish_paced(url, lines, prefix,
                                                                args.rate))
        time.sleep(2.0)  # the last events
    finally:
        events.close()
        job.terminate()
        job.wait(60)
        log.close()
    return {"rate_target": args.rate, "rate_achieved": achieved,
            "settings": {"partitions": args.partitions, "shards": config.shard_count(),
                         "source_poll_ms": config.source_poll},
            **latency_figures(sent_at, events.arrived, started + warmup_s)}


# -- the whole benchmark ----------------------------------------------------------------

class ServerCpu:
    """CPU seconds used by the embedded server's process (Linux /proc; 0 elsewhere or
    with --nats)."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid

    def seconds(self) -> float:
        if self.pid is None:
            return 0.0
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def measure(self, run: Any, records: int) -> dict[str, Any]:
        """`run()`'s result with the server's CPU seconds per 100k records added."""
        before = self.seconds()
        result: dict[str, Any] = run()
        if self.pid is not None:
            result["server_cpu_s_per_100k"] = (self.seconds() - before) * 100_000 / records
        return result


def run_bench(args: BenchArgs) -> dict[str, Any]:
    from binloop.nats.server import NatsServer

    args.out.mkdir(parents=True, exist_ok=True)
    server = None if args.nats else NatsServer(max_payload=16 << 20).start()
    url = args.nats or (server.url if server else "")
    try:
        return _measure_all(url, args, ServerCpu(server.pid if server else None))
    finally:
        asyncio.run(_drop_streams(url, [f"BENCH_{k}{s}" for k in
                                        ("SINGLE", "BATCH", "LATENCY", "EMPTY")
                                        for s in ("", "_EVENTS")]))
        if server is not None:
            server.close()


def _whole_runs(url: str, args: BenchArgs, stream: str, prefix: str, expected: int,
                server: ServerCpu) -> dict[str, Any]:
    """`binloop run --processes 2 --until-idle 0` (it ends once it has drained the
    pre-filled stream), start to exit, `args.rounds` times: the median of each figure."""
    config = _job_config(url, stream, prefix, args.out, processes="2", until_idle="0",
                         partitions=str(args.partitions))
    return _median([run_job_processes(url, config, expected, args.out, server)
                    for _ in range(args.rounds)])


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def _measure_all(url: str, args: BenchArgs, server: ServerCpu) -> dict[str, Any]:
    """(a) and (b) alternate over `rounds` (the machine's load varies): each figure is
    the median of its rounds, in records per second of wall time and per CPU second
    of the consuming process (what one dedicated core would do)."""
    results: dict[str, Any] = {"records": args.records, "batch": args.batch,
                               "batch_records": args.batch_records, "rounds": args.rounds,
                               "partitions": args.partitions, "cpus": os.cpu_count(),
                               "load_before": os.getloadavg(),
                               "bytecode": compile_packages()}
    lines = synthetic(args.records)
    results["publish_single_records_per_s"] = asyncio.run(_prefill(
        url, "BENCH_SINGLE", "bsingle", args.partitions, list(messages(lines, 1, "bsingle"))))
    runs: dict[str, list[dict[str, float]]] = {
        "a_ordered_callback": [], "a_pull_drain": [], "a_wire_drain": [], "b": [],
        "b_nats_py": [], "c": []}
    single = ("BENCH_SINGLE", "bsingle", args.partitions, len(lines))
    n = len(lines)
    for _ in range(args.rounds):
        runs["a_ordered_callback"].append(server.measure(
            lambda: asyncio.run(_raw_ordered_callback(url, *single)), n))
        runs["a_pull_drain"].append(server.measure(
            lambda: asyncio.run(_raw_pull_drain(url, *single)), n))
        runs["a_wire_drain"].append(server.measure(lambda: _raw_wire_drain(url, *single), n))
        runs["b"].append(server.measure(lambda: run_job_in_process(
            _job_config(url, "BENCH_SINGLE", "bsingle", args.out), n), n))
        runs["b_nats_py"].append(server.measure(lambda: run_job_in_process(
            _job_config(url, "BENCH_SINGLE", "bsingle", args.out, nats_client="nats-py"), n),
            n))
    results["b_2_processes"] = _whole_runs(url, args, "BENCH_SINGLE", "bsingle", len(lines),
                                           server)
    del lines
    batch_lines = synthetic(args.batch_records, seed=2)
    results["publish_batch_records_per_s"] = asyncio.run(_prefill(
        url, "BENCH_BATCH", "bbatch", args.partitions,
        list(messages(batch_lines, args.batch, "bbatch"))))
    batch_n = len(batch_lines)
    del batch_lines
    for _ in range(args.rounds):
        runs["c"].append(server.measure(lambda: run_job_in_process(
            _job_config(url, "BENCH_BATCH", "bbatch", args.out), batch_n), batch_n))
    results["c_2_processes"] = _whole_runs(url, args, "BENCH_BATCH", "bbatch", batch_n, server)
    results["runs"] = runs
    for name, measured in runs.items():
        results[name] = _median(measured)
    raw = max(results["a_ordered_callback"]["records_per_s"],
              results["a_pull_drain"]["records_per_s"])
    raw_cpu = max(results["a_ordered_callback"]["records_per_cpu_s"],
                  results["a_pull_drain"]["records_per_cpu_s"])
    results["b_over_a"] = results["b"]["records_per_s"] / raw
    results["b_over_a_cpu"] = results["b"]["records_per_cpu_s"] / raw_cpu
    results["b_over_wire"] = results["b"]["records_per_s"] / results["a_wire_drain"][
        "records_per_s"]
    results["b_nats_py_over_a"] = results["b_nats_py"]["records_per_s"] / raw
    results["b_2_processes_over_a"] = results["b_2_processes"]["records_per_s"] / raw
    results["latency"] = run_latency(url, args)
    results["load_after"] = os.getloadavg()
    results["goals"] = GOALS
    results["met"] = {
        "b_over_a": results["b_over_a"] >= GOALS["b_over_a"],
        "c_records_per_s": results["c_2_processes"]["whole_records_per_s"]
        >= GOALS["c_records_per_s"],
        "latency_p99_ms": results["latency"]["p99_ms"] <= GOALS["latency_p99_ms"]}
    return results


def render(results: dict[str, Any]) -> str:
    lat = results["latency"]

    def rate(name: str) -> str:
        got = results[name]
        server = got.get("server_cpu_s_per_100k")
        return (f"{got['records_per_s']:,.0f} | {got['records_per_cpu_s']:,.0f} | "
                + (f"{server:.2f}" if server is not None else ""))

    two = results["c_2_processes"]
    rows = [
        f"records {results['records']:,} (a, b), {results['batch_records']:,} (c); "
        f"{results['partitions']} partitions; median of {results['rounds']} rounds; "
        f"load average before/after {results['load_before'][0]:.1f}/"
        f"{results['load_after'][0]:.1f} on {results['cpus']} CPUs", "",
        "| measure | records/s (wall) | records per CPU-second | server CPU-s per 100k "
        "records | goal |",
        "|---|---|---|---|---|",
        f"| (a) raw nats-py, ordered consumers + callback | {rate('a_ordered_callback')} | |",
        f"| (a) raw nats-py, binloop's pull consumers, no dataflow | {rate('a_pull_drain')}"
        " | |",
        f"| binloop's wire reader, no dataflow (the job's transport) | "
        f"{rate('a_wire_drain')} | |",
        f"| (b) live job, 1 record/message, 1 worker | {rate('b')} | |",
        f"| (b) / (a) | {results['b_over_a']:.2f} | {results['b_over_a_cpu']:.2f} | | "
        f">= {GOALS['b_over_a']} |",
        f"| (b) / wire reader | {results['b_over_wire']:.2f} | | | |",
        f"| (b) reading through nats-py (`--nats-client nats-py`) | {rate('b_nats_py')} | |",
        f"| (b, nats-py) / (a) | {results['b_nats_py_over_a']:.2f} | | | |",
        f"| (b) 2 processes (wall time less an empty run's) | "
        f"{results['b_2_processes']['records_per_s']:,.0f} | | | |",
        f"| (c) live job, envelopes of {results['batch']}, 1 worker (first to last record) | "
        f"{rate('c')} | |",
        f"| (c) 2 processes, whole command incl. start-up (`--until-idle 0`) | "
        f"{two['whole_records_per_s']:,.0f} | {two['records_per_cpu_s']:,.0f} | "
        + (f"{two['server_cpu_s'] * 100_000 / two['records']:.2f}"
           if "server_cpu_s" in two else "")
        + f" | >= {GOALS['c_records_per_s']:,} |",
        f"| (c) 2 processes (wall time less an empty run's) | {two['records_per_s']:,.0f} | "
        "| | |",
        f"| publish (acked), 1 record/message | {results['publish_single_records_per_s']:,.0f}"
        " | | | |",
        f"| publish (acked), envelopes | {results['publish_batch_records_per_s']:,.0f} | | | |",
        "",
        f"Latency at {lat['rate_achieved']:,.0f} records/s ({lat['events']} events): p50 "
        f"{lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms (goal <= "
        f"{GOALS['latency_p99_ms']:.0f} ms), max {lat['max_ms']:.1f} ms.",
    ]
    return "\n".join(rows)


def register_bench(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "nats", help="live job on NATS: raw ceiling, end to end, envelopes, latency",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nats", default=None, metavar="URL",
                        help="use this server (default: start an embedded one)")
    parser.add_argument("--records", type=int, default=300_000,
                        help="records for (a) and (b) (default 300000)")
    parser.add_argument("--batch", type=int, default=100, help="records per envelope (c)")
    parser.add_argument("--batch-records", type=int, default=2_000_000,
                        help="records for (c) (default 2000000)")
    parser.add_argument("--rate", type=float, default=10_000,
                        help="records/s published during the latency run (default 10000)")
    parser.add_argument("--seconds", type=float, default=15.0,
                        help="length of the latency run (default 15)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating rounds of (a) and (b), and rounds of (c) (medians)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "bench-nats")
    parser.set_defaults(func=main)


def main(ns: argparse.Namespace) -> int:
    args = BenchArgs(ns.nats, ns.records, ns.batch, ns.batch_records, ns.rate, ns.seconds,
                     ns.partitions, ns.out, ns.rounds)
    results = run_bench(args)
    (args.out / "nats_bench.json").write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    table = render(results)
    (args.out / "nats_bench.md").write_text(table + "\n")
    print(table)
    return 0
