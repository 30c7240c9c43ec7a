"""Every command in the README runs, as written (paths under /tmp and the port moved into the
test's own directory and a free port)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# What CI itself runs around the suite: the install step and the suite (see .ci/run).
RUN_BY_CI = ("pip install -e '.[dev]'", "pytest -q")
# Commands that serve until they are stopped.
SERVES = ("binloop nats-server", "binloop run")


def readme_blocks() -> list[list[str]]:
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    return [[line.split("  #")[0].strip() for line in block.splitlines()
             if line.strip() and not line.lstrip().startswith("#")] for block in blocks]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def localised(command: str, tmp: Path, port: int) -> list[str]:
    command = command.replace("/tmp/", f"{tmp}/").replace("4222", str(port))
    words = shlex.split(command.rstrip("&").strip())
    if words[0] == "binloop":
        words = [sys.executable, "-m", "binloop", *words[1:]]
    return words


def run_block(commands: list[str], tmp: Path) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    serving: list[subprocess.Popen[bytes]] = []
    try:
        for command in commands:
            if command in RUN_BY_CI:
                continue
            words = localised(command, tmp, port)
            if command.startswith(SERVES) or command.endswith("&"):
                serving.append(subprocess.Popen(words, cwd=tmp, env=env,
                                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
                time.sleep(2.0)
                assert serving[-1].poll() is None, (command, serving[-1].communicate()[0])
                continue
            done = subprocess.run(words, cwd=tmp, env=env, capture_output=True, timeout=300)
            assert done.returncode == 0, (command, done.stderr.decode()[-2000:])
        for proc in serving:
            assert proc.poll() is None, proc.args
    finally:
        for proc in reversed(serving):
            proc.send_signal(signal.SIGINT)
            try:
                assert proc.wait(timeout=60) in (0, -signal.SIGINT), proc.args
            finally:
                if proc.poll() is None:
                    proc.kill()


def test_the_readme_is_short_and_its_commands_are_known() -> None:
    assert len(README.read_text().splitlines()) <= 200
    commands = [c for block in readme_blocks() for c in block]
    assert set(RUN_BY_CI) <= set(commands)
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -e '.[dev]'" in ci and "\npytest -q" in ci


def serves(commands: list[str]) -> bool:
    return any(c.startswith(("binloop demo", *SERVES)) for c in commands)


def test_the_replay_commands_run(tmp_path: Path) -> None:
    quick = [commands for commands in readme_blocks() if not serves(commands)]
    assert any(c.startswith("binloop detect") for commands in quick for c in commands)
    for commands in quick:
        run_block(commands, tmp_path)


@pytest.mark.slow
def test_every_readme_command_runs_in_order(tmp_path: Path) -> None:
    for commands in readme_blocks():
        run_block(commands, tmp_path)
