"""`binloop` command line: one sub-command per module in `binloop.cli.commands`."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from binloop.core.config import ConfigError, add_arguments, load_config

# Each module defines `register(subparsers)`; heavy imports stay inside the handlers.
COMMAND_MODULES = (
    "binloop.cli.commands.detect",
    "binloop.cli.commands.config_cmd",
    "binloop.cli.commands.build",
    "binloop.cli.commands.tools",
    "binloop.cli.commands.runner",
    "binloop.cli.commands.simulate",
    "binloop.cli.commands.sweep",
    "binloop.cli.commands.run",
    "binloop.cli.commands.publish",
    "binloop.cli.commands.ingest",
    "binloop.cli.commands.nats_server",
    "binloop.cli.commands.bench",
    "binloop.cli.commands.status",
    "binloop.cli.commands.demo",
)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command; the benchmarks' sub-commands only when `argv` asks for
    `bench` (or is None: the whole tree, for documentation)."""
    parser = argparse.ArgumentParser(
        prog="binloop",
        description="Detect an agent fleet's recurring tool failures and build tools for them.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    if argv is None or "bench" in argv:
        from binloop.cli.commands.bench import register_benches

        register_benches(subparsers.choices["bench"])
    for command in subparsers.choices.values():  # --log-format, --log-level everywhere
        add_arguments(command, "logging", config_flag=False)
    return parser


def setup_command_logging(args: argparse.Namespace) -> None:
    """The one logger setup of every command (flags, BINLOOP_LOG_* or the TOML file)."""
    from binloop.core.logs import setup_logging

    names = ("config", "log_format", "log_level")
    config = load_config({name: getattr(args, name, None) for name in names})
    setup_logging(config.log_format, config.log_level)


def report_error(command: str, exc: Exception) -> None:
    from binloop.core.logs import current_format

    if current_format() == "json":
        logging.getLogger("binloop.cli").error("%s", exc, extra={"command": command})
    else:
        print(f"binloop {command}: error: {exc}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
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
