"""`binloop` command line: one sub-command per module in `binloop.commands`."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from binloop.config import ConfigError

# Each module defines `register(subparsers)`; heavy imports stay inside the handlers.
COMMAND_MODULES = (
    "binloop.commands.detect",
    "binloop.commands.config_cmd",
    "binloop.commands.build",
    "binloop.commands.tools",
    "binloop.commands.runner",
    "binloop.commands.simulate",
    "binloop.commands.sweep",
    "binloop.commands.run",
    "binloop.commands.publish",
    "binloop.commands.nats_server",
    "binloop.commands.bench",
    "binloop.commands.demo",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="binloop",
        description="Detect an agent fleet's recurring tool failures and build tools for them.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        print(f"binloop {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
