"""`binloop` command line: one sub-command per module in `binloop.commands`."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from binloop.config import ConfigError, add_arguments, load_config

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
    "binloop.commands.ingest",
    "binloop.commands.nats_server",
    "binloop.commands.bench",
    "binloop.commands.status",
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
    for command in subparsers.choices.values():  # --log-format, --log-level everywhere
        add_arguments(command, "logging", config_flag=False)
    return parser


def setup_command_logging(args: argparse.Namespace) -> None:
    """The one logger setup of every command (flags, BINLOOP_LOG_* or the TOML file)."""
    from binloop.logs import setup_logging

    names = ("config", "log_format", "log_level")
    config = load_config({name: getattr(args, name, None) for name in names})
    setup_logging(config.log_format, config.log_level)


def report_error(command: str, exc: Exception) -> None:
    from binloop.logs import current_format

    if current_format() == "json":
        logging.getLogger("binloop.cli").error("%s", exc, extra={"command": command})
    else:
        print(f"binloop {command}: error: {exc}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        setup_command_logging(args)
        return int(args.func(args) or 0)
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        report_error(args.command, exc)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
