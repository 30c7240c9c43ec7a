"""Spans per second that `binloop ingest otlp` sustains, whole wall time.

    python -m benchmarks.otlp_bench [--requests N] [--connections C] [--rounds R] [--out DIR]

A load generator in another process pre-encodes `ExportTraceServiceRequest` bodies of
512 execute_tool spans (10% failures with error texts, a fifth of them holding a bearer
token that the receiver masks; gzip and plain), then posts them
over C keep-alive connections to a running `binloop ingest otlp` (one process), into
each sink: a JSONL file (fsync before every answer) and a real nats-server's JetStream
stream. The time is from the first request to the last answer (encoding excluded).
C defaults to 4 (measured on 2 cores: 10, what a Collector in front sends at once by
default, its exporters' `sending_queue.num_consumers`, gave 6-8% less into NATS). The
six cases run in R alternating rounds (each case once a round, a new receiver process
each time); each case is reported as the median of its rounds, with the lowest and
highest beside it.
In the same run, an anchor: protobuf decoding of the same bodies in one loop, no HTTP
and no mapping (what any receiver pays at least); figures are reported beside it.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from binloop.replay.otlp import attribute

SPANS_PER_BODY = 512
TOOLS = ("read_file", "run_tests", "http_get", "book_reservation", "search_code", "db_query")
ERRORS = ("FileNotFoundError: [Errno 2] No such file or directory: 'src/m{n}.py'",
          "TimeoutError: read timed out after {n} s",
          "payment amount does not add up, total price is {n}, but paid {m}",
          "psycopg.errors.UniqueViolation: duplicate key value violates unique constraint",
          # a secret the receiver must mask before the sink (as fleets do leak them)
          "401 Unauthorized: Authorization: Bearer sk-live{n}Ab7Qz9Xw2Lm4Np6Rt8Vy0")


def body(seed: int) -> bytes:
    rnd = random.Random(seed)
    request = ExportTraceServiceRequest()
    resource = request.resource_spans.add()
    resource.resource.attributes.append(attribute("service.name", "bench-agent"))
    scope = resource.scope_spans.add()
    scope.scope.name = "bench"
    start = 1_700_000_000_000_000_000 + seed * 10_000_000_000
    for i in range(SPANS_PER_BODY):
        span = scope.spans.add()
        span.trace_id = rnd.randbytes(16)
        span.span_id = rnd.randbytes(8)
        tool = TOOLS[i % len(TOOLS)]
        span.name = f"execute_tool {tool}"
        span.kind = Span.SPAN_KIND_INTERNAL
        span.start_time_unix_nano = start + i * 1_000_000
        span.end_time_unix_nano = span.start_time_unix_nano + rnd.randint(1, 900) * 1_000_000
        span.attributes.extend([
            attribute("gen_ai.operation.name", "execute_tool"),
            attribute("gen_ai.tool.name", tool),
            attribute("gen_ai.tool.call.id", f"call_{seed}_{i}"),
            attribute("gen_ai.conversation.id", f"conv-{seed % 50}"),
            attribute("gen_ai.tool.call.arguments", json.dumps({"path": f"src/m{i}.py", "n": i})),
        ])
        if rnd.random() < 0.1:
            span.status.code = Status.STATUS_CODE_ERROR
            span.status.message = rnd.choice(ERRORS).format(n=rnd.randint(1, 999),
                                                            m=rnd.randint(1, 999))
            span.attributes.append(attribute("error.type", "ToolError"))
    return request.SerializeToString()


def loadgen(args: argparse.Namespace) -> int:
    """The load generator process: encode, then post; prints one JSON line."""
    bodies = [body(args.seed + i) for i in range(args.requests)]
    if args.gzip:
        bodies = [gzip.compress(b, 1) for b in bodies]
    host, port = re.sub(r"^http://", "", args.url).split(":")
    headers = {"Content-Type": "application/x-protobuf"}
    if args.gzip:
        headers["Content-Encoding"] = "gzip"
    failures: list[int] = []
    retries = [0]

    def worker(part: list[bytes]) -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        for item in part:
            while True:
                conn.request("POST", "/v1/traces", item, headers)
                reply = conn.getresponse()
                reply.read()
                if reply.status in (429, 503):
                    retries[0] += 1
                    time.sleep(float(reply.getheader("Retry-After") or 1) / 10)
                    continue
                if reply.status != 200:
                    failures.append(reply.status)
                break
        conn.close()

    parts = [bodies[i::args.connections] for i in range(args.connections)]
    threads = [threading.Thread(target=worker, args=(p,)) for p in parts]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    print(json.dumps({"requests": len(bodies), "spans": len(bodies) * SPANS_PER_BODY,
                      "bytes": sum(map(len, bodies)), "seconds": elapsed,
                      "failed": len(failures), "retries": retries[0]}))
    return 0


def decode_anchor(requests: int, seed: int) -> dict[str, float]:
    bodies = [body(seed + i) for i in range(requests)]
    started = time.perf_counter()
    spans = 0
    for item in bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(item)
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    spans += len(span.attributes) > 0
    elapsed = time.perf_counter() - started
    return {"spans": spans, "seconds": elapsed, "spans_per_s": spans / elapsed}


def stage_costs(requests: int, seed: int) -> dict[str, float]:
    """CPU µs a span of each step of the receiver, in this process (no HTTP): decode,
    map + validate, the redactor (its cache cold, then warm: the second pass sees the
    same texts; and as if every text were new), and the JSONL encoding."""
    from binloop.core import redact
    from binloop.core.schema import RecordParser
    from binloop.receiver import redacting
    from binloop.receiver.sinks import record_line
    from binloop.replay.otlp import decode_protobuf, map_request

    bodies = [body(seed + i) for i in range(min(requests, 50))]
    spans = len(bodies) * SPANS_PER_BODY

    def cpu(step: Any, setup: Any = None) -> tuple[float, Any]:
        """The least CPU time of three runs (a neighbour's load only adds)."""
        best, out = float("inf"), None
        for _ in range(3):
            if setup is not None:
                setup()
            started = time.process_time()
            out = step()
            best = min(best, time.process_time() - started)
        return best / spans * 1e6, out

    def cold() -> None:  # the receiver's caches and the redactor's own
        redacting._error.cache_clear()
        redacting._args_json.cache_clear()
        redacting._args_text.cache_clear()
        redact._evidence_text.cache_clear()

    decode_us, decoded = cpu(lambda: [decode_protobuf(b) for b in bodies])
    map_us, _ = cpu(lambda: [map_request(r, RecordParser()) for r in decoded])
    redacting.redact_record({"args": {"warm": "up"}, "error": "the rules compile once"})
    cold_us, mapped = cpu(lambda: [map_request(r, RecordParser(), redact=redacting.redact_record)
                                   for r in decoded], cold)
    warm_us, _ = cpu(lambda: [map_request(r, RecordParser(), redact=redacting.redact_record)
                              for r in decoded])

    def uncached(rec: dict[str, Any], args_text: str | None) -> int:  # every text new
        cold()
        return redacting.redact_record(rec, args_text)

    uncached_us, _ = cpu(lambda: [map_request(r, RecordParser(), redact=uncached)
                                  for r in decoded])
    encode_us, _ = cpu(lambda: [b"".join(record_line(rec) + b"\n" for rec in m.records)
                                for m in mapped])
    return {"decode_us": decode_us, "map_validate_us": map_us,
            "redact_cold_us": cold_us - map_us, "redact_warm_us": warm_us - map_us,
            "redact_every_text_new_us": uncached_us - map_us,
            "encode_us": encode_us}


def run_case(sink: list[str], use_gzip: bool, args: argparse.Namespace,
             env: dict[str, str]) -> dict[str, Any]:
    receiver = subprocess.Popen([sys.executable, "-m", "binloop.cli", "ingest", "otlp",
                                 "--listen", "127.0.0.1:0", *sink], env=env,
                                stderr=subprocess.PIPE, text=True)
    assert receiver.stderr is not None
    seen = ""
    while not (found := re.search(r"listening on (http://\S+)/v1/traces", seen)):
        line = receiver.stderr.readline()
        if not line:
            raise RuntimeError(f"the receiver did not start: {seen}")
        seen += line
    import psutil

    proc = psutil.Process(receiver.pid)
    before = proc.cpu_times()
    load_before = os.getloadavg()[0]
    try:
        gen = subprocess.run([sys.executable, "-m", "benchmarks.otlp_bench", "loadgen",
                              "--url", found.group(1), "--requests", str(args.requests),
                              "--connections", str(args.connections), "--seed", "1",
                              *(["--gzip"] if use_gzip else [])],
                             capture_output=True, text=True, env=env, check=True)
        after = proc.cpu_times()
    finally:
        receiver.send_signal(signal.SIGTERM)
        _, err = receiver.communicate(timeout=60)
    result: dict[str, Any] = json.loads(gen.stdout)
    stats = re.search(r"stopped; (\{.*\})", err)
    result["receiver"] = json.loads(stats.group(1)) if stats else None
    if result["failed"]:
        raise RuntimeError(f"{result['failed']} requests were refused: {err[-2000:]}")
    result["spans_per_s"] = result["spans"] / result["seconds"]
    cpu = (after.user + after.system) - (before.user + before.system)
    result["load_1min"] = [load_before, os.getloadavg()[0]]  # before and after the run
    result["receiver_cpu_s"] = cpu
    result["spans_per_cpu_s"] = result["spans"] / cpu if cpu > 0 else None
    return result


def _median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One case over its rounds: medians of spans/s and of spans per CPU-second."""
    rates = [r["spans_per_s"] for r in runs]
    return {"sink": runs[0]["sink"], "gzip": runs[0]["gzip"], "spans": runs[0]["spans"],
            "spans_per_s": statistics.median(rates), "spans_per_s_low": min(rates),
            "spans_per_s_high": max(rates),
            "spans_per_cpu_s": statistics.median(r["spans_per_cpu_s"] or 0 for r in runs),
            "retries": sum(r["retries"] for r in runs),
            "load_low": min(min(r["load_1min"]) for r in runs),
            "load_high": max(max(r["load_1min"]) for r in runs)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd")
    gen = sub.add_parser("loadgen")
    gen.add_argument("--url", required=True)
    gen.add_argument("--requests", type=int, default=200)
    gen.add_argument("--connections", type=int, default=2)
    gen.add_argument("--seed", type=int, default=1)
    gen.add_argument("--gzip", action="store_true")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/otlp"))
    args = parser.parse_args(argv)
    if args.cmd == "loadgen":
        return loadgen(args)
    from binloop.nats.server import NatsServer

    env = {**os.environ, "BINLOOP_LOG_LEVEL": "warning"}
    runs: list[dict[str, Any]] = []
    anchor = decode_anchor(args.requests, 1)
    stages = stage_costs(args.requests, 1)
    with tempfile.TemporaryDirectory(prefix="binloop-otlp-bench-") as tmp, \
            NatsServer(store_dir=Path(tmp) / "nats") as server:
        for round_no in range(args.rounds):
            for use_gzip in (False, True):
                tag = f"{round_no}-{int(use_gzip)}"
                out = Path(tmp) / f"records-{tag}.jsonl"
                for sink, flags in (("jsonl", ["--out", str(out)]),
                                    ("jsonl --no-fsync",
                                     ["--out", f"{out}.nofsync", "--no-fsync"]),
                                    ("nats", ["--nats", server.url, "--stream", f"T{tag}",
                                              "--subject-prefix", f"tel{tag}"])):
                    run = run_case(flags, use_gzip, args, env)
                    for written in Path(tmp).glob("records-*"):
                        written.unlink()
                    runs.append({"sink": sink, "gzip": use_gzip, "round": round_no, **run})
    rows = [_median_row([r for r in runs if (r["sink"], r["gzip"]) == case])
            for case in dict.fromkeys((r["sink"], r["gzip"]) for r in runs)]
    result = {"load_average": os.getloadavg(), "cpus": os.cpu_count(),
              "spans_per_body": SPANS_PER_BODY, "connections": args.connections,
              "rounds": args.rounds, "decode_anchor": anchor,
              "stages_cpu_us_per_span": stages, "cases": rows, "runs": runs}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "otlp_receiver.json").write_text(json.dumps(result, indent=2))
    lines = ["| sink | gzip | spans a round | spans/s (wall), median | lowest - highest "
             "| / decode anchor | spans per receiver CPU-second, median | retries (429/503) "
             "| load average (lowest - highest) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['sink']} | {r['gzip']} | {r['spans']:,} | {r['spans_per_s']:,.0f} "
                     f"| {r['spans_per_s_low']:,.0f} - {r['spans_per_s_high']:,.0f} "
                     f"| {r['spans_per_s'] / anchor['spans_per_s']:.3f} "
                     f"| {r['spans_per_cpu_s']:,.0f} | {r['retries']} "
                     f"| {r['load_low']:.1f} - {r['load_high']:.1f} |")
    steps = ", ".join(f"{name.removesuffix('_us')} {value:.2f}" for name, value in stages.items())
    text = (f"{args.rounds} rounds, {args.connections} connections. Load average "
            f"{result['load_average'][0]:.1f} on {result['cpus']} CPUs at the end; decode "
            f"anchor {anchor['spans_per_s']:,.0f} spans/s. CPU µs a span in-process: {steps}."
            "\n\n" + "\n".join(lines) + "\n")
    (args.out / "otlp_receiver.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
