"""`binloop demo`: the whole loop on this machine (NATS, live job, build runner, agent)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the whole BIN loop here: NATS, the live job, the build runner and "
                     "a reference agent (no network, no API key)",
        description="Start the embedded NATS server, the live detection job with the build "
                    "runner (offline designer) and the reference agent; watch the agent fail "
                    "θ times, get paused, get a tool built, checked, tested and gated, resume, "
                    "use the tool and see it promoted to stable. Prints the timeline; leaves "
                    "the library, audit log, telemetry, events and logs in the work directory. "
                    "Exit 0 when the loop closed, 1 when it did not (the reason is printed), "
                    "64 on bad options (docs/robustness.md), 130 when interrupted.")
    parser.add_argument("--workdir", type=Path, default=None, metavar="DIR",
                        help="new or empty directory for everything the demo writes "
                             "(default: ./binloop-demo-<time>)")
    parser.add_argument("--target", choices=("python", "typescript"), default="python",
                        help="the generated tool: a Python module or a Hanzo bot plugin in "
                             "TypeScript (default: python)")
    parser.add_argument("--agent", choices=("python", "hanzo"), default="python",
                        help="the agent: binloop's Python reference agent, or the same job "
                             "inside a Hanzo bot's plugin runtime (its loader and hook "
                             "runner) with binloop's bridge plugin (docs/hanzo.md)")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="give up when the loop has not closed after this long "
                             "(default: 300, the paper's budget; 1200 with --agent hanzo, "
                             "whose bot runtime takes minutes to start)")
    parser.add_argument("--latency", type=float, default=0.1, metavar="SECONDS",
                        help="how long each mock airline call of the agent takes "
                             "(default: 0.1)")
    parser.add_argument("--verbose", action="store_true",
                        help="show every tool call of the agent in the timeline")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from binloop.demo.run import DemoOptions, run_demo

    if args.timeout is None:
        args.timeout = 1200.0 if args.agent == "hanzo" else 300.0
    if args.timeout <= 0 or args.latency < 0:
        raise ValueError("--timeout must be > 0 and --latency >= 0")
    if args.workdir is not None:
        from binloop.replay.jsonl import ensure_output_dir

        ensure_output_dir(args.workdir)
    return run_demo(DemoOptions(args.workdir, args.target, args.timeout,
                                latency_s=args.latency, verbose=args.verbose,
                                agent=args.agent))
