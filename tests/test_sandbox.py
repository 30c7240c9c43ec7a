"""The sandbox against hostile code: loops, fork bombs, memory, files, sockets, env."""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline_runner.sandbox import Limits, Sandbox, detect_isolation, scrub_env

PY = [sys.executable, "-c"]
ISOLATED = detect_isolation()
needs_namespaces = pytest.mark.skipif(not ISOLATED.namespaces,
                                      reason="; ".join(ISOLATED.notes) or "no namespaces")


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(Limits(wall_s=20, cpu_s=10, memory_mb=1024, processes=64),
                   readable=[sys.prefix, sys.base_prefix])


def test_a_command_runs_in_a_fresh_directory_with_a_scrubbed_env(sandbox: Sandbox) -> None:
    os.environ["BINLOOP_TEST_API_KEY"] = "sk-test-should-never-leak-1234567890"
    try:
        result = sandbox.run([*PY, "import os; print(sorted(os.environ)); print(os.listdir('.'))"
                              "; print(open('given.txt').read()); print('nice', os.nice(0))"],
                             files={"given.txt": b"hello"})
    finally:
        del os.environ["BINLOOP_TEST_API_KEY"]
    assert result.ok, result.tail()
    assert "API_KEY" not in result.stdout and "sk-test" not in result.stdout
    assert "['given.txt']" in result.stdout and "hello" in result.stdout
    assert f"nice {os.nice(0) + 10}" in result.stdout  # builds yield the CPU to detection
    with pytest.raises(ValueError):
        scrub_env({"OPENAI_API_KEY": "x"}, [], "/tmp")


def test_isolation_is_reported() -> None:
    described = ISOLATED.describe()
    assert set(described) == {"namespaces", "network_isolated", "drops_privileges", "notes"}
    if not ISOLATED.network_isolated:
        assert described["notes"], "a machine without isolation must say so"


def test_infinite_loop_is_killed_at_the_wall_clock_limit(sandbox: Sandbox) -> None:
    result = sandbox.run([*PY, "while True: pass"], limits=Limits(wall_s=2, cpu_s=60))
    assert result.timed_out and not result.ok
    assert "timed out" in result.reason()


def test_cpu_limit_stops_a_spinning_process(sandbox: Sandbox) -> None:
    result = sandbox.run([*PY, "while True: pass"], limits=Limits(wall_s=30, cpu_s=1))
    assert not result.timed_out and not result.ok
    assert "SIGXCPU" in result.reason() or "SIGKILL" in result.reason()


def test_ten_gigabyte_allocation_fails(sandbox: Sandbox) -> None:
    result = sandbox.run([*PY, "x = bytearray(10 * 1024**3); print('allocated')"])
    assert not result.ok and "allocated" not in result.stdout
    assert "MemoryError" in result.stderr


@needs_namespaces
def test_fork_bomb_is_contained(sandbox: Sandbox) -> None:
    bomb = ("import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
            "            time.sleep(30)\n            os._exit(0)\n        n += 1\n"
            "except OSError as e:\n    print('stopped after', n, e)\n")
    result = sandbox.run([*PY, bomb], limits=Limits(wall_s=20, processes=32))
    assert result.ok and not result.timed_out, result.tail()
    forked = int(result.stdout.split("stopped after")[1].split()[0])
    assert forked < 32
    # the sleeping children died with the sandbox's pid namespace
    assert not any(b"time.sleep(30)" in _cmdline(pid) for pid in _pids())


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_writing_outside_the_directory_fails(sandbox: Sandbox, tmp_path: Path) -> None:
    outside = tmp_path / "escaped.txt"
    repo_file = Path(__file__).resolve().parents[1] / "escaped-from-sandbox.txt"
    code = (f"import os\nfor p in {[str(outside), str(repo_file), '/tmp/escaped.txt']!r}:\n"
            "    try:\n        open(p, 'w').write('x')\n        print('wrote', p)\n"
            "    except OSError as e:\n        print('refused', p, e.errno)\n"
            "open('inside.txt', 'w').write('fine')\n")
    result = sandbox.run([*PY, code], limits=Limits(wall_s=20, file_mb=1))
    assert result.ok, result.tail()
    assert not outside.exists() and not repo_file.exists()
    assert not Path("/tmp/escaped.txt").exists()


def test_large_files_hit_the_file_size_limit(sandbox: Sandbox) -> None:
    result = sandbox.run([*PY, "open('big', 'wb').write(b'x' * (8 << 20))"],
                         limits=Limits(wall_s=20, file_mb=1))
    assert not result.ok
    # Python ignores SIGXFSZ, so the write fails with EFBIG instead of the signal killing it
    assert "SIGXFSZ" in result.reason() or "File too large" in result.stderr


@pytest.fixture
def listener() -> Iterator[tuple[int, list[bytes]]]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    received: list[bytes] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            received.append(conn.recv(100))
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], received
    stop.set()
    thread.join(timeout=5)
    server.close()


@needs_namespaces
def test_no_network(sandbox: Sandbox, listener: tuple[int, list[bytes]]) -> None:
    port, received = listener
    code = (f"import socket\ntry:\n    s = socket.create_connection(('127.0.0.1', {port}), "
            "timeout=3)\n    s.sendall(b'exfiltrated')\n    print('connected')\n"
            "except OSError as e:\n    print('blocked', e)\n")
    result = sandbox.run([*PY, code])
    assert "blocked" in result.stdout, result.tail()
    assert received == []


@needs_namespaces
def test_environment_of_other_processes_is_out_of_reach(sandbox: Sandbox) -> None:
    os.environ["BINLOOP_TEST_TOKEN"] = "tok-should-never-leak-0987654321"
    try:
        code = ("import os\nfound = []\nfor pid in os.listdir('/proc'):\n"
                "    if pid.isdigit():\n        try:\n"
                "            found.append(open(f'/proc/{pid}/environ', 'rb').read())\n"
                "        except OSError:\n            pass\n"
                "print(any(b'tok-should-never-leak' in f for f in found), "
                "len(os.listdir('/proc')))\n"
                "print(os.listdir('/root') if os.path.isdir('/root') else 'no /root')\n")
        result = sandbox.run([*PY, code])
    finally:
        del os.environ["BINLOOP_TEST_TOKEN"]
    assert result.ok, result.tail()
    assert result.stdout.startswith("False"), result.stdout
    assert "tok-should-never-leak" not in result.stdout + result.stderr
