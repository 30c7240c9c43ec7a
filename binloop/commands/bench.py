"""`binloop bench <name>`: the benchmarks of `benchmarks/`, one module per benchmark.

Each module listed in `BENCHES` defines `register_bench(subparsers)`, which adds its
sub-command with `set_defaults(func=...)`.
"""

from __future__ import annotations

import importlib
from typing import Any

BENCHES = (
    "benchmarks.nats_bench",
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench", help="benchmarks (bench nats: the live job on NATS JetStream)",
        description="Run a benchmark; each writes JSON and a Markdown table to --out.")
    benches = parser.add_subparsers(dest="bench", required=True, metavar="BENCH")
    for name in BENCHES:
        importlib.import_module(name).register_bench(benches)
