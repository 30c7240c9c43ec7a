"""`binloop bench nats`: the live job on NATS JetStream, measured in one run.

* (a) the raw ceiling: nats-py reading the whole pre-filled stream, no processing
  (two consumers: a stock ordered consumer with a callback, and the same kind of
  push consumer the source uses, drained without a callback); the faster is (a);
* (b) the live job (`flows.live`, in this process, one worker) on the same stream,
  one record per message: records/s from its first record to its last;
* (c) the same with batch envelopes of `--batch` records;
* latency: the job running in its own process (`binloop run`) while records are
  published at `--rate` records/s: from publishing the θ-th failure of a key to
  receiving its BINEvent on `bin.events.>`, p50 / p99 / max.

Everything runs against a fresh embedded nats-server (or `--nats URL`, where the
streams `BENCH_*` are created and deleted). Results: JSON and a Markdown table in
`--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from binloop.config import Config, load_config
from binloop.jetstream import connect, ensure_telemetry_stream, telemetry_stream_spec
from binloop.publish import Message, messages, publish_messages
from binloop.schema import dumps_record, validate_record
from binloop.subjects import partition_prefix
from binloop.summary import RunSummary

GOALS = {"b_over_a": 0.9, "c_records_per_s": 500_000, "latency_p99_ms": 100.0}


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

async def _raw_ordered_callback(url: str, stream: str, prefix: str, expected: int) -> float:
    """Stock nats-py: an ordered consumer with a callback that counts."""
    nc = await connect(url, "bench-raw", 10)
    done = asyncio.Event()
    count = 0
    started = 0.0

    async def on_msg(msg: Msg) -> None:
        nonlocal count, started
        if count == 0:
            started = time.perf_counter()
        count += 1
        if count >= expected:
            done.set()

    try:
        sub = await nc.jetstream().subscribe(f"{partition_prefix(prefix)}.>", stream=stream,
                                             cb=on_msg, ordered_consumer=True)
        await asyncio.wait_for(done.wait(), 600)
        elapsed = time.perf_counter() - started
        await sub.unsubscribe()
        return expected / elapsed
    finally:
        await nc.close()


async def _raw_push_drain(url: str, stream: str, prefix: str, expected: int) -> float:
    """nats-py push consumer (no acks, flow control) drained without a callback."""
    nc = await connect(url, "bench-raw", 10)
    try:
        js = nc.jetstream()
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox, pending_msgs_limit=0, pending_bytes_limit=256 << 20)
        await js.add_consumer(stream, ConsumerConfig(
            deliver_subject=inbox, filter_subject=f"{partition_prefix(prefix)}.>",
            ack_policy=AckPolicy.NONE, flow_control=True, idle_heartbeat=1.0,
            mem_storage=True, deliver_policy=DeliverPolicy.ALL))
        queue = sub._pending_queue
        count, started = 0, 0.0
        while count < expected:
            msg = await asyncio.wait_for(queue.get(), 30)
            if not started:
                started = time.perf_counter()
            while True:
                if msg.data:
                    count += 1
                elif msg.reply:
                    await nc.publish(msg.reply, b"")
                try:
                    msg = queue.get_nowait()
                except asyncio.QueueEmpty:
                    break
        return expected / (time.perf_counter() - started)
    finally:
        await nc.close()


# -- (b), (c) the job in this process ----------------------------------------------------

def _job_config(url: str, stream: str, prefix: str, out: Path, **extra: str) -> Config:
    values = {"nats": url, "stream": stream, "subject_prefix": prefix, "build": "false",
              "until_idle": "1", "events_stream": f"{stream}_EVENTS",
              "events_subject_prefix": f"bench.{prefix}.events",
              "dead_letter": str(out / f"{stream}.dead.jsonl"), **extra}
    return load_config(values, env={})


def run_job_in_process(config: Config, expected: int) -> dict[str, Any]:
    """Run flows.live until idle; records/s from the first to the last record read."""
    from datetime import timedelta

    from bytewax.run import cli_main

    from flows.live import build_flow

    marks: dict[str, float] = {}
    final = RunSummary()

    def on_summary(summary: RunSummary) -> None:
        now = time.perf_counter()
        marks.setdefault("first", now)
        if summary.records_read >= expected and "last" not in marks:
            marks["last"] = now
        final.records_read, final.events_fired = summary.records_read, summary.events_fired

    started = time.perf_counter()
    cli_main(build_flow(config, on_summary=on_summary), workers_per_process=config.workers,
             epoch_interval=timedelta(milliseconds=config.snapshot_interval))
    if "last" not in marks:
        raise RuntimeError(f"the job read {final.records_read} of {expected} records")
    return {"records": expected, "events": final.events_fired,
            "records_per_s": expected / (marks["last"] - marks["first"]),
            "startup_s": marks["first"] - started}


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


async def _measure_latency(url: str, stream: str, prefix: str, events_prefix: str,
                           lines: list[bytes], rate: float, job_ready: Callable[[], bool],
                           warmup_s: float = 1.0) -> dict[str, Any]:
    nc = await connect(url, "bench-latency", 10)
    sent_at: dict[str, float] = {}
    latencies: list[float] = []
    published = 0.0

    async def on_event(msg: Msg) -> None:
        now = time.perf_counter()
        fired = orjson.loads(msg.data)["evidence"][-1]["id"]
        if fired in sent_at and sent_at[fired] - published >= warmup_s:
            latencies.append((now - sent_at[fired]) * 1000)

    try:
        js = nc.jetstream(timeout=10)
        await nc.subscribe(f"{events_prefix}.>", cb=on_event)
        while not job_ready():
            await asyncio.sleep(0.05)
        items = list(messages(lines, 1, prefix))
        record_ids = [orjson.loads(line)["id"] for line in lines]
        published = time.perf_counter()
        pending = []
        for index, (msg, rid) in enumerate(zip(items, record_ids, strict=True)):
            due = published + index / rate
            if (wait := due - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            sent_at[rid] = time.perf_counter()
            pending.append(await js.publish_async(msg.subject, msg.payload,
                                                  headers=msg.headers))
            if len(pending) >= 1000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
        achieved = len(items) / (time.perf_counter() - published)
        await asyncio.sleep(2.0)  # let the last events arrive
    finally:
        await nc.close()
    latencies.sort()
    if not latencies:
        raise RuntimeError("no BINEvent arrived")
    return {"rate_target": rate, "rate_achieved": achieved, "events": len(latencies),
            "p50_ms": statistics.median(latencies),
            "p99_ms": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
            "max_ms": latencies[-1]}


def run_latency(url: str, args: BenchArgs) -> dict[str, Any]:
    stream, prefix = "BENCH_LATENCY", "blat"
    lines = latency_records(args.rate, args.seconds)
    asyncio.run(_prefill(url, stream, prefix, args.partitions, []))
    config = _job_config(url, stream, prefix, args.out, until_idle="off",
                         start="new", partitions=str(args.partitions))
    summary_path = args.out / "latency_job_summary.json"
    env = {**os.environ, **config.to_env(), "BINLOOP_SUMMARY_OUT": str(summary_path)}
    log = open(args.out / "latency_job.log", "wb")  # noqa: SIM115 - closed below
    job = subprocess.Popen([sys.executable, "-m", "binloop.cli", "run"], env=env,
                           stdout=log, stderr=subprocess.STDOUT)
    try:
        ready = threading.Event()
        threading.Timer(3.0, ready.set).start()  # the job connects and creates consumers
        return asyncio.run(_measure_latency(url, stream, prefix, config.events_subject_prefix,
                                            lines, args.rate, ready.is_set))
    finally:
        job.terminate()
        job.wait(60)
        log.close()


# -- the whole benchmark ----------------------------------------------------------------

def run_bench(args: BenchArgs) -> dict[str, Any]:
    from binloop.nats_server import NatsServer

    args.out.mkdir(parents=True, exist_ok=True)
    server = None if args.nats else NatsServer(max_payload=16 << 20).start()
    url = args.nats or (server.url if server else "")
    try:
        return _measure_all(url, args)
    finally:
        asyncio.run(_drop_streams(url, [f"BENCH_{k}{s}" for k in ("SINGLE", "BATCH", "LATENCY")
                                        for s in ("", "_EVENTS")]))
        if server is not None:
            server.close()


def _measure_all(url: str, args: BenchArgs) -> dict[str, Any]:
    results: dict[str, Any] = {"records": args.records, "batch": args.batch,
                               "batch_records": args.batch_records,
                               "partitions": args.partitions, "cpus": os.cpu_count()}
    lines = synthetic(args.records)
    results["publish_single_records_per_s"] = asyncio.run(_prefill(
        url, "BENCH_SINGLE", "bsingle", args.partitions, list(messages(lines, 1, "bsingle"))))
    raw = {"ordered_callback": asyncio.run(
               _raw_ordered_callback(url, "BENCH_SINGLE", "bsingle", len(lines))),
           "push_drain": asyncio.run(_raw_push_drain(url, "BENCH_SINGLE", "bsingle",
                                                     len(lines)))}
    results["a_raw_records_per_s"] = raw
    results["a_records_per_s"] = max(raw.values())
    results["b"] = run_job_in_process(
        _job_config(url, "BENCH_SINGLE", "bsingle", args.out), len(lines))
    results["b_over_a"] = results["b"]["records_per_s"] / results["a_records_per_s"]
    del lines
    batch_lines = synthetic(args.batch_records, seed=2)
    results["publish_batch_records_per_s"] = asyncio.run(_prefill(
        url, "BENCH_BATCH", "bbatch", args.partitions,
        list(messages(batch_lines, args.batch, "bbatch"))))
    results["c"] = run_job_in_process(
        _job_config(url, "BENCH_BATCH", "bbatch", args.out), len(batch_lines))
    del batch_lines
    results["latency"] = run_latency(url, args)
    results["goals"] = GOALS
    results["met"] = {
        "b_over_a": results["b_over_a"] >= GOALS["b_over_a"],
        "c_records_per_s": results["c"]["records_per_s"] >= GOALS["c_records_per_s"],
        "latency_p99_ms": results["latency"]["p99_ms"] <= GOALS["latency_p99_ms"]}
    return results


def render(results: dict[str, Any]) -> str:
    raw = results["a_raw_records_per_s"]
    lat = results["latency"]
    rows = [
        "| measure | value | goal |", "|---|---|---|",
        f"| (a) raw nats-py, ordered consumer + callback | {raw['ordered_callback']:,.0f} "
        "msg/s | |",
        f"| (a) raw nats-py, push consumer drained | {raw['push_drain']:,.0f} msg/s | |",
        f"| (b) live job, 1 record/message | {results['b']['records_per_s']:,.0f} records/s | |",
        f"| (b) / (a) | {results['b_over_a']:.2f} | >= {GOALS['b_over_a']} |",
        f"| (c) live job, envelopes of {results['batch']} | "
        f"{results['c']['records_per_s']:,.0f} records/s | >= {GOALS['c_records_per_s']:,} |",
        f"| latency p50 at {lat['rate_achieved']:,.0f} records/s | {lat['p50_ms']:.1f} ms | |",
        f"| latency p99 ({lat['events']} events) | {lat['p99_ms']:.1f} ms | "
        f"<= {GOALS['latency_p99_ms']:.0f} ms |",
        f"| latency max | {lat['max_ms']:.1f} ms | |",
        f"| publish (acked), 1 record/message | "
        f"{results['publish_single_records_per_s']:,.0f} records/s | |",
        f"| publish (acked), envelopes | {results['publish_batch_records_per_s']:,.0f} "
        "records/s | |",
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
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "bench-nats")
    parser.set_defaults(func=main)


def main(ns: argparse.Namespace) -> int:
    args = BenchArgs(ns.nats, ns.records, ns.batch, ns.batch_records, ns.rate, ns.seconds,
                     ns.partitions, ns.out)
    results = run_bench(args)
    (args.out / "nats_bench.json").write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    table = render(results)
    (args.out / "nats_bench.md").write_text(table + "\n")
    print(table)
    return 0
