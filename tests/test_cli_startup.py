"""`binloop --help` and `binloop config` start fast: no heavy import, and only the parser of
the command asked for is built (docs/architecture.md has the measured figures; timing is
not asserted here, what makes it fast is)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from binloop.cli import COMMAND_MODULES, COMMANDS, build_parser

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
    help_first = build_parser(["--help", "config"])  # the top-level parser prints here
    commands = _subcommands(everything)
    assert list(commands) == list(COMMANDS)  # each module registers the name mapped to it
    assert len(commands) == len(COMMAND_MODULES)
    # the same commands, listed with the same help, either way
    assert _listing(help_first) == _listing(everything)
    assert build_parser(["--help"]).format_help() == everything.format_help()
    assert build_parser(["nope"]).format_help() == everything.format_help()
    # a command line that starts with its command registers that command alone
    assert list(_subcommands(build_parser(["config", "--theta", "3"]))) == ["config"]
    for name, parser in _subcommands(help_first).items():
        flags = {o for action in parser._actions for o in action.option_strings}
        if name == "config":
            assert {"--theta", "--markdown", "--log-level"} <= flags
        else:
            assert flags == set(), name  # an outline: listed, never parsed
    for name in COMMANDS:
        alone = _subcommands(build_parser([name, "--log-level", "info"]))[name]
        assert alone.format_help() == commands[name].format_help(), name


def test_a_command_imports_no_other_command_module() -> None:
    probe = ("import sys; from binloop.cli import build_parser; build_parser(['detect']); "
             "print(sorted(m for m in sys.modules if m.startswith('binloop.cli.commands.')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "['binloop.cli.commands.detect']"


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


# What `binloop detect --engine bytewax` must not import: the other engines' and commands'
# dependencies (each was start-up every replay paid for nothing), and what is imported
# only when used (a TOML config file; a temporary directory for a cluster's summary: one
# process hands its summary over in memory).
NOT_FOR_DETECT = ("polars", "pyarrow", "nats", "google", "opentelemetry", "pydantic",
                  "jsonschema", "httpx", "matplotlib", "prometheus_client", "anthropic",
                  "openai", "pipeline_runner", "benchmarks", "tomllib", "tomli", "tempfile")
DETECT_PROBE = """
import sys
from binloop.cli import main
code = main(sys.argv[1:-1])
loaded = {m.split('.')[0] for m in sys.modules}
print('UNWANTED', sorted(loaded & set(sys.argv[-1].split(','))), file=sys.stderr)
print('COMMANDS', sorted(m for m in sys.modules if m.startswith('binloop.cli.commands.')),
      file=sys.stderr)
sys.exit(code)
"""


def test_a_bytewax_replay_imports_only_what_it_uses(tmp_path: Path) -> None:
    telemetry = tmp_path / "in.jsonl"
    telemetry.write_text("".join(
        f'{{"session_id": 1, "ts": {1_700_000_000_000 + i}, "tool": "t", '
        f'"outcome": "failure", "failure_mode": "TIMEOUT"}}\n' for i in range(3)))
    argv = ["detect", "--input", str(telemetry), "--out", str(tmp_path / "events.jsonl"),
            "--dead-letter", str(tmp_path / "dead.jsonl"), "--no-progress",
            "--window", "global", "--theta", "3", "--engine", "bytewax", "--workers", "1"]
    done = subprocess.run([sys.executable, "-c", DETECT_PROBE, *argv, ",".join(NOT_FOR_DETECT)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "events fired 1" in done.stderr  # the replay did run
    assert "UNWANTED []" in done.stderr, done.stderr[-2000:]
    assert "COMMANDS ['binloop.cli.commands.detect']" in done.stderr, done.stderr[-2000:]
