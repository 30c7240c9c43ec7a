"""`binloop ingest otlp`: an OTLP/HTTP receiver for OpenTelemetry GenAI tool spans."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from typing import Any

from binloop.core.config import add_arguments, load_config, positive_int

TOKEN_ENV = "BINLOOP_OTLP_TOKEN"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ingest", help="receive telemetry from other systems (OpenTelemetry)",
        description="Receive telemetry in other systems' formats and store it as binloop "
                    "records.")
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
    otlp = kinds.add_parser(
        "otlp", help="OTLP/HTTP receiver: execute_tool spans -> telemetry records",
        description="Serve POST /v1/traces (OTLP/HTTP, protobuf or JSON, gzip). Every "
                    "GenAI execute_tool span becomes a telemetry record (failure_mode null: "
                    "the job infers it from the error text), published on the telemetry "
                    "stream (--nats) or appended to a JSONL file (--out), secrets in args and "
                    "error texts masked first. Answers 200 only "
                    "once the records are stored. A bearer token is read from "
                    f"${TOKEN_ENV} or --token-file. Plain HTTP: put TLS in a proxy.")
    otlp.add_argument("--listen", default="127.0.0.1:4318", metavar="HOST:PORT",
                      help="address to listen on (default 127.0.0.1:4318; port 0: any)")
    otlp.add_argument("--out", metavar="FILE", help="append records to this JSONL file")
    otlp.add_argument("--no-fsync", action="store_true",
                      help="with --out: do not fsync before answering (faster, a crash of "
                           "the machine may lose what was acknowledged)")
    otlp.add_argument("--token-file", metavar="FILE", help="file holding the bearer token")
    otlp.add_argument("--max-body-bytes", type=positive_int, default=None, metavar="N",
                      help="largest body, as sent and decompressed (default 16 MiB): 413")
    otlp.add_argument("--max-inflight-spans", type=positive_int, default=None, metavar="N",
                      help="tool spans being stored at once before 429 (default 131072)")
    otlp.add_argument("--envelope", type=positive_int, default=512, metavar="N",
                      help="with --nats: records per batch envelope (default 512)")
    otlp.add_argument("--stats-out", metavar="FILE",
                      help="write the receiver's counters as JSON here at shutdown")
    add_arguments(otlp, "publish")
    otlp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from binloop.receiver.otlp_http import (
        DEFAULT_MAX_BODY_BYTES,
        DEFAULT_MAX_INFLIGHT_SPANS,
        OtlpReceiver,
        ReceiverServer,
        ReceiverSettings,
        parse_listen,
    )

    config = load_config(args)
    if bool(args.out) == bool(config.nats):
        raise ValueError("give exactly one of --out FILE and --nats URL")
    settings = ReceiverSettings(
        max_body_bytes=args.max_body_bytes or DEFAULT_MAX_BODY_BYTES,
        max_inflight_spans=args.max_inflight_spans or DEFAULT_MAX_INFLIGHT_SPANS,
        token=_token(args.token_file))
    sink = _sink(args, config)
    try:
        server = ReceiverServer(parse_listen(args.listen), OtlpReceiver(sink, settings))
    except OSError as exc:
        sink.close()
        raise ValueError(f"cannot listen on {args.listen}: {exc}") from None
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    where = args.out or "the telemetry stream"
    print(f"binloop ingest otlp: listening on {server.url}{'/v1/traces'} -> {where}",
          file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        # Requests being answered finish (their records stored) before the sink closes;
        # new ones on kept-alive connections get 503 and are retried elsewhere or later.
        server.receiver.stop()
        server.server_close()
        sink.close()
        counters = server.receiver.stats.to_json()
        print(f"binloop ingest otlp: stopped; {json.dumps(counters)}", file=sys.stderr)
        if args.stats_out:
            with open(args.stats_out, "w") as handle:
                json.dump(counters, handle)
    return 0


def _token(path: str | None) -> str | None:
    if path:
        with open(path) as handle:
            token = handle.read().strip()
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
    return token or None


def _sink(args: argparse.Namespace, config: Any) -> Any:
    from binloop.receiver.sinks import JsonlSink, NatsSink, NatsTarget

    if args.out:
        from binloop.core.errors import OutputError
        from binloop.replay.jsonl import check_output_path

        check_output_path(args.out)
        try:
            return JsonlSink(args.out, fsync=not args.no_fsync)
        except OSError as exc:
            raise OutputError(f"cannot open --out {args.out}: {exc}") from None
    from binloop.nats.jetstream import connect, ensure_telemetry_stream
    from flows.live import source_settings

    source = source_settings(config)

    async def connect_stream() -> Any:
        nc = await connect(source.url, "binloop-ingest-otlp", source.connect_timeout_s)
        js = nc.jetstream(timeout=10.0)
        await ensure_telemetry_stream(js, source.stream, source.manage_stream)
        return nc, js

    return NatsSink(NatsTarget(source.url, config.subject_prefix, connect_stream,
                               envelope=args.envelope))
