"""`binloop bench <name>`: the benchmarks of `benchmarks/`, one module per benchmark.

Each module listed in `BENCHES` defines `register_bench(subparsers)`, which adds its
sub-command with `set_defaults(func=...)` (registered only when `binloop bench` is run, so
that other commands start fast). To add a benchmark (e.g. `bench nats`), write
`benchmarks/<name>.py` with that function and list it here.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any

BENCHES = (
    "benchmarks.engines",
    "benchmarks.backlog",
    "benchmarks.coupon",
    "benchmarks.nats_bench",
)


def register(subparsers: Any) -> None:
    subparsers.add_parser(
        "bench", help="benchmarks: engines throughput/RSS, backlog policies, coupon check, "
                 "the live job on NATS",
        description="Run a benchmark; each writes JSON, a Markdown table (and plots) to --out.")


def register_benches(parser: Any) -> None:
    """The benchmarks' own sub-commands: only when `bench` was asked for (their modules
    import what they measure)."""
    benches = parser.add_subparsers(dest="bench", required=True, metavar="BENCH")
    for name in BENCHES:
        importlib.import_module(name).register_bench(benches)
    for bench in benches.choices.values():
        bench.set_defaults(func=_with_out_dir(bench.get_default("func")))


def _with_out_dir(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """The bench, after its `--out` directory is made (a one-line error, exit 73, before
    any work when it cannot be)."""
    def checked(args: argparse.Namespace) -> int:
        from binloop.replay.jsonl import ensure_output_dir

        if getattr(args, "out", None) is not None:
            ensure_output_dir(args.out)
        return run(args)
    return checked
