"""`binloop` command line: one sub-command per module in `binloop.cli.commands`."""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from binloop.core.config import ConfigError, add_arguments, load_config
from binloop.core.errors import (
    EX_IOERR,
    EX_NOINPUT,
    EX_SOFTWARE,
    EX_UNAVAILABLE,
    EX_USAGE,
    CommandError,
    OutputWriteError,
    UsageError,
)

# Each command's module defines `register(subparsers)`; heavy imports stay inside the
# handlers. In the order `binloop --help` lists them.
COMMANDS: dict[str, str] = {
    "detect": "binloop.cli.commands.detect",
    "config": "binloop.cli.commands.config_cmd",
    "build": "binloop.cli.commands.build",
    "tools": "binloop.cli.commands.tools",
    "runner": "binloop.cli.commands.runner",
    "simulate": "binloop.cli.commands.simulate",
    "sweep": "binloop.cli.commands.sweep",
    "run": "binloop.cli.commands.run",
    "publish": "binloop.cli.commands.publish",
    "ingest": "binloop.cli.commands.ingest",
    "nats-server": "binloop.cli.commands.nats_server",
    "bench": "binloop.cli.commands.bench",
    "status": "binloop.cli.commands.status",
    "demo": "binloop.cli.commands.demo",
}
COMMAND_MODULES = tuple(COMMANDS.values())


class OneLineParser(argparse.ArgumentParser):
    """A parser whose usage errors are one line (and exit EX_USAGE, not argparse's 2,
    which `binloop build` uses for a clean rollback)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command; the benchmarks' sub-commands only when `argv` asks for
    `bench` (or is None: the whole tree, for documentation). When `argv` starts with a
    command, only that command is registered: the top-level parser then prints nothing
    (no option of its own comes first, the choice is valid), so the other commands need
    no module imported and no parser built."""
    parser = OneLineParser(
        prog="binloop",
        description="Detect an agent fleet's recurring tool failures and build tools for them.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                       parser_class=OneLineParser)
    wanted = None if argv is None else next((a for a in argv if not a.startswith("-")), "")
    commands = CommandsOnDemand(subparsers, wanted)
    modules = [COMMANDS[argv[0]]] if argv and argv[0] in COMMANDS else COMMAND_MODULES
    for name in modules:
        importlib.import_module(name).register(commands)
    if argv is None or "bench" in argv:
        from binloop.cli.commands.bench import register_benches

        register_benches(commands.built.get("bench", Outline()))
    for command in commands.built.values():  # --log-format, --log-level everywhere
        add_arguments(command, "logging", config_flag=False)
    return parser


class Outline:
    """Stands in for the parser of a command the command line does not ask for: whatever
    its `register` configures on it is ignored."""

    def __getattr__(self, name: str) -> Any:
        return self._ignore

    def _ignore(self, *args: Any, **kwargs: Any) -> Outline:
        return self


class CommandsOnDemand:
    """The sub-parsers, complete only for the command asked for (`wanted`; None: every
    command, for the docs). The others are listed with their help, but their ~400
    arguments are never built: that was most of `binloop --help`'s start-up time."""

    def __init__(self, subparsers: Any, wanted: str | None) -> None:
        self.subparsers = subparsers
        self.wanted = wanted
        self.built: dict[str, argparse.ArgumentParser] = {}

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if self.wanted is None or name == self.wanted:
            self.built[name] = self.subparsers.add_parser(name, **kwargs)
            return self.built[name]
        # listed in `binloop --help` and named in "invalid choice"; never parsed
        self.subparsers.add_parser(name, help=kwargs.get("help"), add_help=False)
        return Outline()


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


def exit_code(exc: BaseException) -> int:
    """The documented exit code of an error (binloop.core.errors)."""
    if isinstance(exc, CommandError):
        return exc.code
    if isinstance(exc, (ConfigError, ValueError, OverflowError)):
        return EX_USAGE
    if isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError,
                        PermissionError)):
        return EX_NOINPUT
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return EX_UNAVAILABLE
    if isinstance(exc, OSError):
        return EX_IOERR
    return EX_SOFTWARE


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        text = f"{exc.filename}: {exc.strerror}"  # not "[Errno 13] Permission denied: '...'"
    elif isinstance(exc, OSError) and exc.filename and str(exc.filename) not in text:
        text = f"{exc.filename}: {text}"
    if exit_code(exc) == EX_SOFTWARE:
        return (f"internal error: {type(exc).__name__}: {text} (run with --log-level debug "
                "for the traceback)")
    return text


def join_dash_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`--session-gap -1m` as `--session-gap=-1m`: argparse takes a value that starts with
    `-` for an unknown option; the setting's own check then gives its one-line error."""
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    command = sub.choices.get(argv[0]) if sub is not None and argv else None
    if command is None:
        return argv
    options = command._option_string_actions
    out: list[str] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        action = options.get(token)
        following = argv[index + 1] if index + 1 < len(argv) else None
        if (action is not None and action.nargs is None and action.option_strings
                and following is not None and following.startswith("-") and following != "-"
                and following not in options and not action.const):
            out.append(f"{token}={following}")
            index += 2
            continue
        out.append(token)
        index += 1
    return out


def flush_stdout() -> None:
    """Flush what the command printed (a full disk or a closed pipe is reported here, as
    one line, and not as "Exception ignored" at interpreter exit)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    except OSError as exc:
        _silence_stdout()
        raise OutputWriteError(f"writing standard output failed: {exc.strerror or exc}"
                               ) from None


def _output_error(exc: OSError) -> Exception:
    """An OSError without a file name while the command ran: writing (most often to
    standard output) failed. Stop writing to stdout, so that exit does not retry."""
    if exc.filename is not None or exc.errno not in (errno.ENOSPC, errno.EIO, errno.EPIPE,
                                                      errno.EDQUOT, errno.EFBIG):
        return exc
    _silence_stdout()
    return OutputWriteError(f"writing output failed: {exc.strerror or exc}")


def _silence_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in given if not a.startswith("-")), "?")
    try:
        parser = build_parser(given)
        args = parser.parse_args(join_dash_values(parser, given))
        command = args.command
        setup_command_logging(args)
        code = int(args.func(args) or 0)
        flush_stdout()
        return code
    except KeyboardInterrupt:
        return 130
    except SystemExit:
        raise  # --help, and commands that choose their own code
    except Exception as exc:
        if isinstance(exc, OSError) and not isinstance(exc, CommandError):
            exc = _output_error(exc)
        logging.getLogger("binloop.cli").debug("error", exc_info=True)
        report_error(command, ValueError(one_line(exc)))
        return exit_code(exc)


if __name__ == "__main__":
    sys.exit(main())
