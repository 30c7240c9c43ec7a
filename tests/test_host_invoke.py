"""The tool host's invoke round trip, as the Hanzo proxies speak it: a wrapper tool calls
the one tool it wraps through the caller, and nothing else; an invoke that the caller
never answers ends in a clear error, not a hang."""

from __future__ import annotations

import os
import queue
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from binloop.library.store import ToolLibrary
from pipeline_runner.sandbox import detect_isolation
from pipeline_runner.sandbox.host import LineServer, ToolHost
from tests.buildkit import event_of, failing_calls, runner_for
from tests.designers import HijackingDesigner

pytestmark = pytest.mark.skipif(
    not detect_isolation().complete and os.environ.get("BINLOOP_REQUIRE_SANDBOX") != "1",
    reason="sandbox incomplete here: " + "; ".join(detect_isolation().missing))
ARGS = {"url": "https://api.example.com/c"}
TRIGGER = "https://x.example/"  # the sleeper's use-time trigger


def network_event(tool: str) -> Any:
    return event_of(failing_calls(tool, "NETWORK.connection_reset", [
        ({"url": "https://api.example.com/a"}, "ECONNRESET while reading"),
        ({"url": "https://api.example.com/b"}, "Connection reset by peer")]))


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    root = tmp_path_factory.mktemp("invoke") / "library"
    retry = runner_for(root).build(network_event("fetch_url"))
    hijack = runner_for(root, HijackingDesigner("secret_tool", TRIGGER)).build(
        network_event("fetch_page"))
    assert retry.outcome == hijack.outcome == "gated", (retry.reason, hijack.reason)
    return root, retry.tool["name"], hijack.tool["name"]


class Caller:
    """The caller's side of the line protocol: answers the host's invokes with `answer`
    (None: never answers), records what the host asked for."""

    def __init__(self, host: ToolHost, answer: Any) -> None:
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.asked: list[dict[str, Any]] = []
        self.answer = answer
        self.server = LineServer(host, self._receive, workers=2)

    def _receive(self, line: bytes) -> None:
        message = orjson.loads(line)
        if message.get("op") != "invoke":
            self.lines.put(message)
            return
        self.asked.append(message)
        if self.answer is not None:
            self.server.handle_line(orjson.dumps({
                "id": message["id"], "op": "invoke_result", "invoke_id": message["invoke_id"],
                **self.answer(message["tool"], message["params"], len(self.asked))}))

    def call(self, tool: str, params: dict[str, Any]) -> dict[str, Any]:
        self.server.handle_line(orjson.dumps({"id": "c1", "tool": tool, "params": params,
                                              "invoke": True}))
        reply: dict[str, Any] = self.lines.get(timeout=120)
        return reply


def flaky(tool: str, params: dict[str, Any], number: int) -> dict[str, Any]:
    if number <= 2:
        return {"ok": False, "error": "ECONNRESET while reading"}
    return {"ok": True, "result": {"tool": tool, "params": params}}


def test_a_wrapper_calls_the_tool_it_wraps_through_the_caller(
        library: tuple[Path, str, str]) -> None:
    root, retry, _ = library
    assert ToolLibrary(root).entry(retry)  # gated
    host = ToolHost(root, ("python",), call_timeout_s=10)
    host.reload()
    assert host.tools[retry].invokes == {"fetch_url"}
    caller = Caller(host, flaky)
    try:
        reply = caller.call(retry, {"args": ARGS, "base_delay_ms": 0})
    finally:
        caller.server.close()
    assert reply["ok"] is True, reply
    assert reply["result"]["details"] == {"ok": True, "attempts": 3,
                                          "result": {"tool": "fetch_url", "params": ARGS}}
    assert [(m["tool"], m["params"]) for m in caller.asked] == [("fetch_url", ARGS)] * 3


def test_a_tool_may_invoke_no_other_tool(library: tuple[Path, str, str]) -> None:
    root, _, hijack = library
    host = ToolHost(root, ("python",), call_timeout_s=10)
    host.reload()
    assert host.tools[hijack].invokes == {"fetch_page"}
    caller = Caller(host, flaky)
    try:
        honest = caller.call(hijack, {"args": ARGS, "base_delay_ms": 0})
        reply = caller.call(hijack, {"args": {"url": TRIGGER}})
    finally:
        caller.server.close()
    details = reply["result"]["details"]
    assert details["ok"] is False and details["attempts"] == 1 and not details["retryable"]
    assert details["error"] == ("this tool may not invoke 'secret_tool': the tool host lets "
                                "it call fetch_page only")
    # The honest call went to fetch_page; the triggered one was refused by the host
    # itself: the caller was never asked for secret_tool.
    assert honest["result"]["details"]["ok"] is True
    assert [m["tool"] for m in caller.asked] == ["fetch_page"] * 3


def test_a_tool_that_invokes_another_tool_in_its_tests_is_not_gated(tmp_path: Path) -> None:
    result = runner_for(tmp_path / "library", HijackingDesigner("secret_tool")).build(
        network_event("fetch_url"))
    assert result.outcome != "gated"
    assert "the tool invoked 'secret_tool'; it may invoke only fetch_url" in result.reason


def test_an_unanswered_invoke_is_a_clear_error_not_a_hang(
        library: tuple[Path, str, str]) -> None:
    root, retry, _ = library
    host = ToolHost(root, ("python",), call_timeout_s=3)
    host.reload()
    caller = Caller(host, None)
    started = time.monotonic()
    try:
        reply = caller.call(retry, {"args": ARGS, "max_attempts": 1})
    finally:
        caller.server.close()
    assert len(caller.asked) == 1
    assert reply["ok"] is False and "timed out" in reply["error"], reply
    assert time.monotonic() - started < 30
