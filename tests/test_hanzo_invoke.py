"""Wrapper tools (retry, alias, guard) in the real Hanzo bot: the proxy answers the tool
host's invoke round trip by calling the wrapped tool of the bot through the bot's own
POST /tools/invoke, and a sandboxed tool may invoke only the one tool it wraps.

The bot's loader loads the proxies of a library's load path and a plugin of "original"
tools (tests/data/hanzo_original_tools/, which count their calls in the bot process);
the bot's own /tools/invoke handler serves on the configured loopback port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from binloop.demo.hanzo_bot import HanzoBot
from binloop.demo.hanzo_run import bridge_dir
from binloop.library.hanzo_load_path import LOAD_PATH_DIR, plugin_id, write_load_path
from binloop.library.store import ToolLibrary
from tests.buildkit import event_of, failing_calls, runner_for
from tests.designers import HijackingDesigner
from tests.test_offline_designer import scenario_event

pytestmark = pytest.mark.slow
HARNESS = Path(__file__).resolve().parent / "hanzo_invoke_check.mjs"
ORIGINALS = Path(__file__).resolve().parent / "data" / "hanzo_original_tools"
TOKEN = "invoke-check-token-5d2e"


def network_event(tool: str) -> Any:
    return event_of(failing_calls(tool, "NETWORK.connection_reset", [
        ({"url": "https://api.example.com/a"}, "ECONNRESET while reading"),
        ({"url": "https://api.example.com/b"}, "Connection reset by peer")]))


def gated(result: Any) -> str:
    assert result.outcome == "gated", result.reason
    return str(result.tool["name"])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def library(typescript_target: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The wrapper tools, built and gated for real (python, and the alias in typescript)."""
    root = tmp_path_factory.mktemp("invoke") / "library"
    tools = {
        "retry": gated(runner_for(root).build(network_event("fetch_url"))),
        "alias": gated(runner_for(root, target=typescript_target)
                       .build(scenario_event("TOOL_GAP"))),
        "guard": gated(runner_for(root).build(scenario_event("RUNTIME"))),
        "missing": gated(runner_for(root).build(network_event("fetch_missing"))),
        "denied": gated(runner_for(root).build(network_event("fetch_denied"))),
        # a sleeper: honest in its acceptance tests, it asks for secret_tool for one URL
        "hijack": gated(runner_for(root, HijackingDesigner("secret_tool", "https://x.example/"))
                        .build(network_event("fetch_page"))),
    }
    lib = ToolLibrary(root)
    write_load_path(root, lib.read())
    meta = json.loads((root / lib.entry(tools["alias"])["path"] / "tool.json").read_text())
    assert meta["invokes"] == ["search_direct_flight"]
    return {"root": root, **tools}


@pytest.mark.parametrize("offered_by", ["load path", "bridge"])
def test_wrapper_tools_call_the_tool_they_wrap_in_the_bot_and_nothing_else(
        bot: HanzoBot, library: dict[str, Any], offered_by: str, tmp_path: Path) -> None:
    root = library["root"]
    retry, alias, guard, hijack = (library[k] for k in ("retry", "alias", "guard", "hijack"))
    missing, denied = library["missing"], library["denied"]
    calls = {
        "retry": {"tool": retry, "params": {"args": {"url": "https://api.example.com/c"}}},
        "alias": {"tool": alias, "params": {"origin": "JFK", "destination": "SEA"}},
        "guard_ok": {"tool": guard, "params": {"args": {"report_id": "r_2", "format": "csv"}}},
        "guard_throws": {"tool": guard, "params": {"args": {"report_id": "r_3",
                                                            "format": "xlsx"}}},
        "missing": {"tool": missing, "params": {"args": {"url": "https://x.example/"}}},
        "denied": {"tool": denied, "params": {"args": {"url": "https://x.example/"}}},
        "hijack": {"tool": hijack, "params": {"args": {"url": "https://x.example/"}}},
    }
    (tmp_path / "calls.json").write_text(json.dumps(calls))
    if offered_by == "load path":  # one proxy plugin per tool
        ids = [plugin_id(name) for name in (retry, alias, guard, missing, denied, hijack)]
        paths, entries = [str(ORIGINALS), str(root / LOAD_PATH_DIR)], {}
    else:  # the bridge's tool factory (telemetry to a JSONL file only)
        ids = ["binloop-bridge"]
        paths = [str(ORIGINALS), str(bridge_dir())]
        entries = {"binloop-bridge": {"enabled": True, "config": {
            "library": str(root), "python": sys.executable,
            "jsonlPath": str(tmp_path / "records.jsonl")}}}
    config = {
        "plugins": {"load": {"paths": paths}, "allow": ["binloop-test-originals", *ids],
                    "entries": entries,
                    "slots": {"memory": "none"}},  # bundled plugins are off: no memory-core
        "gateway": {"port": free_port(), "auth": {"mode": "token", "token": TOKEN}},
        "tools": {"deny": ["fetch_denied"]},
    }
    (tmp_path / "bot.json").write_text(json.dumps(config))
    env = {**os.environ, "HOME": str(tmp_path / "home"),
           "OPENCLAW_STATE_DIR": str(tmp_path / "state"),
           "OPENCLAW_CONFIG_PATH": str(tmp_path / "bot.json")}
    for key in ("OPENCLAW_GATEWAY_TOKEN", "OPENCLAW_GATEWAY_PASSWORD", "OPENCLAW_GATEWAY_PORT"):
        env.pop(key, None)
    run = subprocess.run([str(bot.node), "--disable-warning=ExperimentalWarning", str(HARNESS),
                          str(bot.root), str(bot.bundled_dir), str(tmp_path / "calls.json")],
                         capture_output=True, text=True, env=env, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert {p["id"]: p["status"] for p in report["plugins"]} == \
        dict.fromkeys(["binloop-test-originals", *ids], "loaded"), report["plugins"]
    results = report["results"]
    for label, outcome in results.items():
        assert outcome["ok"], (label, outcome)  # every answer is the tool's, none a throw
    details = {label: outcome["result"]["details"] for label, outcome in results.items()}

    # retry: the bot's fetch_url failed twice (its error shape), the third call answered.
    assert details["retry"] == {"ok": True, "attempts": 3,
                                "result": {"ok": True, "url": "https://api.example.com/c",
                                           "body": "items: 3"}}
    # alias: the missing search_flights answered by the bot's search_direct_flight.
    assert details["alias"] == {"ok": True, "via": "search_direct_flight", "result": {
        "flights": [{"flight_number": "HAT001", "origin": "JFK", "destination": "SEA"}]}}
    # guard: passes a good call through; a throw of the bot's tool is a clear failure.
    assert details["guard_ok"]["ok"] is True
    assert details["guard_ok"]["result"] == {"report_id": "r_2", "rows": 12}
    assert details["guard_throws"]["ok"] is False and details["guard_throws"]["skipped"] is False
    assert "parse_report failed" in details["guard_throws"]["error"]
    # A tool the bot does not have, or that its tool policy denies: a clear error, at once.
    for label, tool in (("missing", "fetch_missing"), ("denied", "fetch_denied")):
        assert details[label]["ok"] is False and details[label]["attempts"] == 1, details[label]
        assert f"{tool} is not available to this agent" in details[label]["error"]
        assert results[label]["seconds"] < 20
    # The hijacking tool asked for secret_tool: refused; the bot's secret_tool never ran.
    assert details["hijack"]["ok"] is False and details["hijack"]["attempts"] == 1
    assert "this tool may not invoke 'secret_tool'" in details["hijack"]["error"]
    assert "fetch_page only" in details["hijack"]["error"]
    assert "the bot's own secret" not in json.dumps(details)

    # Each wrapped call ran the bot's own tool, in the bot process, exactly so often.
    assert report["originalCalls"] == {"fetch_url": 3, "search_direct_flight": 1,
                                       "parse_report": 2}
