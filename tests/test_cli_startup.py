"""`binloop --help` and `binloop config` start fast: no heavy import, and only the parser of
the command asked for is built (docs/architecture.md has the measured figures; timing is
not asserted here, what makes it fast is)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from binloop.cli import COMMAND_MODULES, build_parser

HEAVY = ("polars", "nats", "bytewax", "pyarrow", "prometheus_client", "anthropic", "openai",
         "pipeline_runner", "flows", "sinks", "benchmarks")
PROBE = """
import sys
from binloop.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[-1].split(',')))
print('HEAVY', heavy, file=sys.stderr)
"""


@pytest.mark.parametrize("argv", [["--help"], ["config"], ["detect", "--help"]])
def test_starting_imports_nothing_heavy(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv, ",".join(HEAVY)],
                          capture_output=True, text=True, timeout=120)
    assert "HEAVY []" in done.stderr, done.stderr[-2000:]


def test_only_the_command_asked_for_gets_its_arguments() -> None:
    everything = build_parser(None)
    config_only = build_parser(["config"])
    commands = _subcommands(everything)
    assert len(commands) == len(COMMAND_MODULES)
    # the same commands, listed with the same help, either way
    assert _listing(config_only) == _listing(everything)
    assert build_parser(["--help"]).format_help() == everything.format_help()
    for name, parser in _subcommands(config_only).items():
        flags = {o for action in parser._actions for o in action.option_strings}
        if name == "config":
            assert {"--theta", "--markdown", "--log-level"} <= flags
        else:
            assert flags == set(), name  # an outline: listed, never parsed
    full = _subcommands(build_parser(["detect", "--input", "x"]))["detect"]
    assert full.format_help() == commands["detect"].format_help()


def _subcommands(parser: object) -> dict[str, object]:
    import argparse

    assert isinstance(parser, argparse.ArgumentParser)
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def _listing(parser: object) -> list[tuple[str, str | None]]:
    import argparse

    assert isinstance(parser, argparse.ArgumentParser)
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return [(choice.dest, choice.help) for choice in action._choices_actions]
