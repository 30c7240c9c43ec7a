"""Every sub-command, given a bad argument, a missing file and an unwritable output, says
so in one line on stderr and exits with the documented code (docs/robustness.md).

Commands without an input file have no "missing file" case (simulate, nats-server,
bench, demo); commands that only print have standard output on /dev/full as their
unwritable output. NATS is a closed port: unreachable is its own code (69).

The same cases run as root and as the unprivileged user `nobody` (tests/nonroot.py: a venv
of Debian's python that `nobody` can run, `setpriv`), there with HOME=/nonexistent as
nobody has it, an output in a directory it may not write in (/etc) and inputs it may not
read.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
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
from tests.nonroot import NonRootUnavailable, as_user, binloop_cli, is_root, shared_dir

ROOT = Path(__file__).resolve().parents[1]
# As nobody, outputs go here instead of UNWRITABLE: a directory only root may write in.
DENIED = "/etc/binloop-denied"
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


def run_case(cli: list[str], words: str, argv: list[str], full_stdout: bool, cwd: Path,
             env: dict[str, str], unprivileged: bool = False) -> subprocess.CompletedProcess[str]:
    with open("/dev/full" if full_stdout else os.devnull, "wb") as stdout:
        return subprocess.run(as_user([*cli, *words.split(), *argv], unprivileged),
                              stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120,
                              cwd=cwd, env=env, stdin=subprocess.DEVNULL)


def assert_one_line(proc: subprocess.CompletedProcess[str], words: str, code: int) -> None:
    lines = proc.stderr.splitlines()
    assert proc.returncode == code, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"binloop {words.split()[0]}: error: ")
    assert "Traceback" not in proc.stderr
    assert "[Errno" not in proc.stderr  # the reason in words, not Python's repr of it


def good_file(folder: Path) -> Path:
    good = folder / "good.jsonl"
    good.write_text('{"session_id": 1, "ts": 1700000000000, "tool": "t", "outcome": "failure"}'
                    "\n")
    return good


@pytest.mark.parametrize(("words", "args", "code", "full_stdout"), CASES,
                         ids=[f"{c[0]}:{' '.join(c[1])[:40]}" for c in CASES])
def test_one_line_and_the_documented_code(words: str, args: tuple[str, ...], code: int,
                                          full_stdout: bool, tmp_path: Path) -> None:
    good = good_file(tmp_path)
    argv = [a.format(good=good, tmp=tmp_path) for a in args]
    env = {**os.environ, "BINLOOP_PROGRESS": "false"}
    proc = run_case([sys.executable, "-m", "binloop.cli"], words, argv, full_stdout, tmp_path,
                    env)
    assert_one_line(proc, words, code)


# What only an unprivileged user meets: inputs it may not read, a library it may not enter.
NONROOT_CASES: list[tuple[str, tuple[str, ...], int, bool]] = [
    ("detect", ("--input", "{secret}"), EX_NOINPUT, False),
    ("detect", ("--input", "/root/telemetry.jsonl"), EX_NOINPUT, False),
    ("detect", ("--input", "/root"), EX_NOINPUT, False),
    ("sweep", ("--input", "{secret}", "--out", "{tmp}/sw"), EX_NOINPUT, False),
    ("publish", ("{secret}", "--nats", NATS), EX_NOINPUT, False),
    ("build", ("--event", "{secret}", "--library", "{tmp}/lib"), EX_NOINPUT, False),
    ("config", ("--config", "{secret}"), EX_NOINPUT, False),
    ("tools list", ("--library", "/root"), EX_NOINPUT, False),
    ("tools apply", ("--library", "{tmp}", "--telemetry", "{secret}"), EX_NOINPUT, False),
    ("detect", ("--input", "{good}", "--out", "{tmp}/x.jsonl", "--dead-letter",
                "/etc/dead.jsonl"), EX_CANTCREAT, False),
]


@pytest.fixture(scope="module")
def nobody_cli() -> list[str]:
    try:
        return binloop_cli(unprivileged=True)
    except NonRootUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def nobody_dir() -> Iterator[Path]:
    folder = shared_dir("binloop-cli-errors-")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize(("words", "args", "code", "full_stdout"), CASES + NONROOT_CASES,
                         ids=[f"{c[0]}:{' '.join(c[1])[:40]}" for c in CASES + NONROOT_CASES])
def test_as_nobody_one_line_and_the_documented_code(
        words: str, args: tuple[str, ...], code: int, full_stdout: bool,
        nobody_cli: list[str], nobody_dir: Path) -> None:
    good = good_file(nobody_dir)
    secret = nobody_dir / "secret.jsonl"  # root's, mode 0600: not nobody's to read
    secret.write_bytes(good.read_bytes())
    secret.chmod(0o600)
    if is_root():
        os.chown(good, 65534, 65534)
    argv = [a.format(good=good, tmp=nobody_dir, secret=secret).replace(UNWRITABLE, DENIED)
            for a in args]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent",
           "LANG": "C.UTF-8", "BINLOOP_PROGRESS": "false"}
    proc = run_case(nobody_cli, words, argv, full_stdout, nobody_dir, env, unprivileged=True)
    assert_one_line(proc, words, code)
    if (words, args, code, full_stdout) in NONROOT_CASES:  # root could: this ran as nobody
        assert "ermission denied" in proc.stderr or "not writable" in proc.stderr, proc.stderr
