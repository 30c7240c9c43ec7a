"""The sandboxed tool host: gated tools at use time, never imported into the caller."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from binloop.library.store import ToolLibrary
from pipeline_runner.sandbox import detect_isolation
from pipeline_runner.sandbox.client import ToolError
from pipeline_runner.sandbox.host import CallFailed, ToolHost
from tests.buildkit import runner_for
from tests.designers import UseTimeProbeDesigner
from tests.test_runner import payment_event

pytestmark = pytest.mark.skipif(
    not detect_isolation().complete and os.environ.get("BINLOOP_REQUIRE_SANDBOX") != "1",
    reason="sandbox incomplete here: " + "; ".join(detect_isolation().missing))


@pytest.fixture(scope="module")
def probe_library(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, Any]]:
    """A library with one gated tool that use-time flags can crash, hang or probe."""
    library = tmp_path_factory.mktemp("host") / "library"
    result = runner_for(library, UseTimeProbeDesigner()).build(payment_event())
    assert result.outcome == "gated", result.reason
    params = payment_event()["evidence"][-1]["args"]
    return library, result.tool["name"], {"args": params, "expected_total": 410}


@pytest.fixture
def library(probe_library: tuple[Path, str, dict[str, Any]], tmp_path: Path) -> Path:
    copy = tmp_path / "library"
    shutil.copytree(probe_library[0], copy)
    return copy


@pytest.fixture
def host(library: Path) -> Iterator[ToolHost]:
    host = ToolHost(library, ("python",), call_timeout_s=5, max_restarts=2)
    host.reload()
    yield host
    host.close()


def test_a_call_runs_in_a_sandboxed_worker_that_sees_nothing_of_the_caller(
        host: ToolHost, probe_library: tuple[Path, str, dict[str, Any]]) -> None:
    _, name, params = probe_library
    os.environ["BINLOOP_SECRET_TOKEN"] = "tok-BINLOOP_SECRET-should-never-leak"
    try:
        details, _ = host.call(name, {**params, "binloop_probe": True})
    finally:
        del os.environ["BINLOOP_SECRET_TOKEN"]
    assert details["ok"] is False and details["issues"]  # the honest answer
    assert details["probe_secret"] == []
    assert set(details["probe_env"]) <= {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "PWD",
                                         "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED", "NO_COLOR"}
    assert details["probe_pid"] != os.getpid() and details["probe_pid"] < 10  # own pid ns
    assert details["probe_home"] is False
    assert not any(m.startswith("generated_tool") or m.startswith("binloop_tools")
                   for m in sys.modules)  # never imported here


def test_the_worker_is_long_lived(host: ToolHost,
                                  probe_library: tuple[Path, str, dict[str, Any]]) -> None:
    _, name, params = probe_library
    host.call(name, params)
    worker = host.tools[name].worker
    assert worker is not None
    for _ in range(5):
        host.call(name, params)
    assert host.tools[name].worker is worker and host.status()[name]["calls"] == 6


def test_a_crashed_worker_is_restarted_a_bounded_number_of_times(
        host: ToolHost, probe_library: tuple[Path, str, dict[str, Any]]) -> None:
    _, name, params = probe_library
    for attempt in range(3):  # the first start, then max_restarts=2 restarts
        with pytest.raises(CallFailed, match="exited"):
            host.call(name, {**params, "binloop_crash": True})
        if attempt < 2:
            assert host.call(name, params)[0]["ok"] is False  # restarted, answers again
    with pytest.raises(CallFailed, match="not restarted"):
        host.call(name, params)
    assert host.status()[name]["restarts"] == 2


def test_a_hanging_call_times_out_and_the_next_call_gets_a_fresh_worker(
        host: ToolHost, probe_library: tuple[Path, str, dict[str, Any]]) -> None:
    _, name, params = probe_library
    with pytest.raises(CallFailed, match="timed out"):
        host.call(name, {**params, "binloop_hang": True})
    assert host.call(name, params)[0]["ok"] is False


def test_a_tool_error_is_a_reply_not_a_crash(host: ToolHost,
                                             probe_library: tuple[Path, str, dict[str, Any]]
                                             ) -> None:
    _, name, params = probe_library
    with pytest.raises(ToolError, match="asked to raise"):
        host.call(name, {**params, "binloop_raise": True})
    assert host.status()[name]["running"] and host.status()[name]["restarts"] == 0


def test_quarantine_stops_the_worker(host: ToolHost, library: Path,
                                     probe_library: tuple[Path, str, dict[str, Any]]) -> None:
    _, name, params = probe_library
    host.call(name, params)
    worker = host.tools[name].worker
    assert worker is not None and worker.alive
    ToolLibrary(library).set_status(name, "quarantined", "test")
    with pytest.raises(KeyError):
        host.call(name, params)
    assert not worker.alive and name not in host.tools


def test_the_host_process_speaks_the_contract(library: Path,
                                              probe_library: tuple[Path, str, dict[str, Any]]
                                              ) -> None:
    _, name, params = probe_library
    requests = [{"id": "r", "op": "reload"}, {"id": "1", "tool": name, "params": params},
                {"id": "2", "tool": "no_such_tool", "params": {}},
                {"id": "3", "tool": name, "params": {**params, "binloop_crash": True}},
                {"id": "s", "op": "status"}]
    proc = subprocess.Popen([sys.executable, "-m", "pipeline_runner.sandbox.host", "--library",
                             str(library)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    replies: dict[str, dict[str, Any]] = {}
    for request in requests:  # one at a time: the status must come after the calls
        proc.stdin.write(orjson.dumps(request) + b"\n")
        proc.stdin.flush()
        reply = orjson.loads(proc.stdout.readline())
        replies[reply["id"]] = reply
    proc.stdin.close()
    assert proc.wait(30) == 0, proc.stderr.read() if proc.stderr else ""
    assert replies["r"] == {"id": "r", "ok": True, "tools": [name]}
    result = replies["1"]["result"]
    assert replies["1"]["ok"] and result["content"][0]["type"] == "text"
    assert orjson.loads(result["content"][0]["text"]) == result["details"]
    assert replies["2"] == {"id": "2", "ok": False, "error": "no active tool 'no_such_tool'"}
    assert replies["3"]["ok"] is False and "exited" in replies["3"]["error"]
    assert "\n" not in replies["3"]["error"]
    assert replies["s"]["tools"][name]["calls"] == 2
