"""Every sub-command, given a bad argument, a missing file and an unwritable output, says
so in one line on stderr and exits with the documented code (docs/robustness.md).

Commands without an input file have no "missing file" case (simulate, nats-server,
bench, demo); commands that only print have standard output on /dev/full as their
unwritable output. NATS is a closed port: unreachable is its own code (69).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from binloop.cli import build_parser
from binloop.core.errors import (
    EX_CANTCREAT,
    EX_IOERR,
    EX_NOINPUT,
    EX_UNAVAILABLE,
    EX_USAGE,
)

ROOT = Path(__file__).resolve().parents[1]
MISSING = "/nonexistent-binloop/missing.jsonl"
UNWRITABLE = "/proc/version"  # a regular file the kernel refuses to open for writing


def closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"nats://127.0.0.1:{port}"


NATS = closed_port()
FAST = ("--connect-timeout", "1s")

# (command words, arguments, expected code, stdout to /dev/full)
CASES: list[tuple[str, tuple[str, ...], int, bool]] = [
    ("detect", ("--input", "{good}", "--theta", "0"), EX_USAGE, False),
    ("detect", ("--input", MISSING), EX_NOINPUT, False),
    ("detect", ("--input", "{good}", "--out", UNWRITABLE), EX_CANTCREAT, False),
    ("detect", ("--input", "{good}", "--engine", "polars", "--dead-letter", "/"), EX_CANTCREAT,
     False),
    ("config", ("--window", "weekly"), EX_USAGE, False),
    ("config", ("--config", MISSING), EX_NOINPUT, False),
    ("config", (), EX_IOERR, True),
    ("build", ("--event", "{good}", "--check-timeout", "x"), EX_USAGE, False),
    ("build", ("--event", MISSING, "--library", "{tmp}/lib"), EX_NOINPUT, False),
    ("build", ("--event", "{good}", "--library", UNWRITABLE + "/lib"), EX_CANTCREAT, False),
    ("tools list", ("--library", "{tmp}", "--bogus"), EX_USAGE, False),
    ("tools list", ("--library", MISSING), EX_NOINPUT, False),
    ("tools list", ("--library", "{tmp}"), EX_IOERR, True),
    ("tools show", ("--library", "{tmp}"), EX_USAGE, False),
    ("tools show", ("nothing", "--library", "{tmp}"), EX_NOINPUT, False),
    ("tools promote", ("nothing", "--library", "{tmp}"), EX_NOINPUT, False),
    ("tools quarantine", ("nothing", "--library", "{tmp}", "--reason", "x"), EX_NOINPUT, False),
    ("tools rollback", ("nothing", "--library", "{tmp}", "--to", "x"), EX_USAGE, False),
    ("tools apply", ("--library", "{tmp}", "--telemetry", MISSING), EX_NOINPUT, False),
    ("tools hanzo-plugins", ("--library", "{tmp}", "--bogus"), EX_USAGE, False),
    ("tools hanzo-plugins", ("--library", MISSING), EX_NOINPUT, False),
    ("tools hanzo-plugins", ("--library", "{tmp}"), EX_IOERR, True),
    ("runner", ("--build-workers", "0"), EX_USAGE, False),
    ("runner", ("--config", MISSING), EX_NOINPUT, False),
    ("runner", ("--nats", NATS, *FAST, "--library", UNWRITABLE + "/lib"), EX_CANTCREAT, False),
    ("runner", ("--nats", NATS, *FAST, "--library", "{tmp}/lib"), EX_UNAVAILABLE, False),
    ("simulate", ("--out", "{tmp}/s.jsonl", "--sessions", "x"), EX_USAGE, False),
    ("simulate", ("--out", UNWRITABLE), EX_CANTCREAT, False),
    ("sweep", ("--input", "{good}", "--out", "{tmp}/sw", "--thetas", "x"), EX_USAGE, False),
    ("sweep", ("--input", MISSING, "--out", "{tmp}/sw"), EX_NOINPUT, False),
    ("sweep", ("--input", "{good}", "--out", UNWRITABLE), EX_CANTCREAT, False),
    ("run", ("--session-gap", "-1m"), EX_USAGE, False),
    ("run", ("--config", MISSING), EX_NOINPUT, False),
    ("run", ("--nats", NATS, *FAST, "--no-build", "--dead-letter", UNWRITABLE), EX_CANTCREAT,
     False),
    ("run", ("--nats", NATS, *FAST, "--no-build"), EX_UNAVAILABLE, False),
    ("publish", ("{good}", "--rate", "x"), EX_USAGE, False),
    ("publish", (MISSING, "--nats", NATS), EX_NOINPUT, False),
    ("publish", ("{good}", "--nats", NATS, *FAST), EX_UNAVAILABLE, False),
    ("nats-server", ("--port", "x"), EX_USAGE, False),
    ("nats-server", ("--port", "0", "--store-dir", UNWRITABLE), EX_CANTCREAT, False),
    ("bench engines", ("--out", "{tmp}/b", "--records", "x"), EX_USAGE, False),
    ("bench engines", ("--out", UNWRITABLE), EX_CANTCREAT, False),
    ("bench backlog", ("--out", "{tmp}/b", "--bogus"), EX_USAGE, False),
    ("bench backlog", ("--out", UNWRITABLE), EX_CANTCREAT, False),
    ("bench coupon", ("--out", "{tmp}/b", "--bogus"), EX_USAGE, False),
    ("bench coupon", ("--out", UNWRITABLE), EX_CANTCREAT, False),
    ("bench nats", ("--bogus",), EX_USAGE, False),
    ("bench nats", ("--out", UNWRITABLE), EX_CANTCREAT, False),
    ("status", ("--events", "x"), EX_USAGE, False),
    ("status", ("--config", MISSING), EX_NOINPUT, False),
    ("status", ("--nats", NATS, *FAST), EX_UNAVAILABLE, False),
    ("ingest otlp", ("--listen", "bogus", "--out", "{tmp}/o.jsonl"), EX_USAGE, False),
    ("ingest otlp", ("--listen", "127.0.0.1:0", "--out", "{tmp}/o.jsonl", "--token-file",
                     MISSING), EX_NOINPUT, False),
    ("ingest otlp", ("--listen", "127.0.0.1:0", "--out", UNWRITABLE), EX_CANTCREAT, False),
    ("ingest otlp", ("--listen", "127.0.0.1:0", "--nats", NATS, *FAST), EX_UNAVAILABLE, False),
    ("demo", ("--timeout", "x"), EX_USAGE, False),
    ("demo", ("--workdir", UNWRITABLE), EX_CANTCREAT, False),
]


def commands() -> set[str]:
    """Every leaf command of the CLI (`tools list`, `bench engines`, `detect`, ...)."""
    leaves: set[str] = set()

    def walk(parser: argparse.ArgumentParser, words: str) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            leaves.add(words.strip())
        for sub in subs:
            for name, child in sub.choices.items():
                walk(child, f"{words} {name}")

    walk(build_parser(), "")
    return leaves


def test_every_command_has_its_error_cases() -> None:
    assert {words for words, *_ in CASES} == commands()


@pytest.mark.parametrize(("words", "args", "code", "full_stdout"), CASES,
                         ids=[f"{c[0]}:{' '.join(c[1])[:40]}" for c in CASES])
def test_one_line_and_the_documented_code(words: str, args: tuple[str, ...], code: int,
                                          full_stdout: bool, tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text('{"session_id": 1, "ts": 1700000000000, "tool": "t", "outcome": "failure"}'
                    "\n")
    argv = [a.format(good=good, tmp=tmp_path) for a in args]
    env = {**os.environ, "BINLOOP_PROGRESS": "false"}
    with open("/dev/full" if full_stdout else os.devnull, "wb") as stdout:
        proc = subprocess.run([sys.executable, "-m", "binloop.cli", *words.split(), *argv],
                              stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120,
                              cwd=tmp_path, env=env, stdin=subprocess.DEVNULL)
    lines = proc.stderr.splitlines()
    assert proc.returncode == code, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"binloop {words.split()[0]}: error: ")
    assert "Traceback" not in proc.stderr
