"""The library's Hanzo bot load path: exactly one proxy plugin per active tool, kept in
step with the manifest, and the tool host it forwards to (generated code never on it)."""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from binloop.library.hanzo_load_path import LOAD_PATH_DIR, plugin_id, write_load_path
from binloop.library.store import ToolLibrary
from pipeline_runner.sandbox.host import LineServer, ToolHost

pytestmark = pytest.mark.slow


@pytest.fixture
def library(gated: tuple[Path, str], tmp_path: Path) -> tuple[ToolLibrary, str]:
    root, name = gated
    shutil.copytree(root, tmp_path / "library")
    return ToolLibrary(tmp_path / "library"), name


def plugins(root: Path) -> list[str]:
    return sorted(p.name for p in (root / LOAD_PATH_DIR).iterdir() if p.is_dir())


def test_one_proxy_plugin_per_active_tool(library: tuple[ToolLibrary, str]) -> None:
    lib, name = library
    run = subprocess.run([sys.executable, "-m", "binloop.cli", "tools", "hanzo-plugins",
                          "--library", str(lib.root), "--json"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["plugins"] == [plugin_id(name)]
    plugin_dir = lib.root / LOAD_PATH_DIR / plugin_id(name)
    manifest = orjson.loads((plugin_dir / "openclaw.plugin.json").read_bytes())
    assert manifest == orjson.loads((plugin_dir / "bot.plugin.json").read_bytes())
    package = orjson.loads((plugin_dir / "package.json").read_bytes())
    assert manifest["id"] == package["name"] == plugin_dir.name
    assert package["openclaw"]["extensions"] == ["./index.ts"]
    assert sorted(p.name for p in plugin_dir.iterdir()) == \
        ["bot.plugin.json", "host_client.ts", "index.ts", "openclaw.plugin.json", "package.json"]
    # The generated tool's own code is not on the load path: only binloop's proxy.
    tool_source = (lib.root / lib.entry(name)["path"] / "tool.py").read_text()
    for path in plugin_dir.iterdir():
        assert tool_source not in path.read_text()
    assert "pipeline_runner.sandbox.host" in (plugin_dir / "host_client.ts").read_text()


def test_the_load_path_follows_the_manifest(library: tuple[ToolLibrary, str]) -> None:
    lib, name = library
    write_load_path(lib.root, lib.read())
    lib.set_status(name, "quarantined", "test")
    assert plugins(lib.root) == []
    lib.set_status(name, "stable", "test")
    assert plugins(lib.root) == [plugin_id(name)]
    assert orjson.loads((lib.root / LOAD_PATH_DIR / plugin_id(name) / "package.json")
                        .read_bytes())["binloop"]["status"] == "stable"


def answer(host: ToolHost, line: bytes) -> dict[str, Any]:
    """One request through the host's line protocol (what a proxy plugin sends)."""
    replies: queue.Queue[bytes] = queue.Queue()
    server = LineServer(host, replies.put, workers=1)
    server.handle_line(line)
    reply: dict[str, Any] = orjson.loads(replies.get(timeout=120))
    return reply


def test_the_host_runs_active_tools_and_refuses_withdrawn_ones(
        library: tuple[ToolLibrary, str]) -> None:
    lib, name = library
    host = ToolHost(lib.root)
    assert host.reload() == [name]
    entry = lib.entry(name)
    cases = orjson.loads((lib.root / entry["path"] / "acceptance/cases.json").read_bytes())
    params = cases[0]["steps"][0]["params"]
    reply = answer(host, orjson.dumps({"id": "1", "tool": name, "params": params}))
    assert reply["ok"] is True, reply
    assert json.loads(reply["result"]["content"][0]["text"]) == reply["result"]["details"]
    lib.set_status(name, "quarantined", "test")
    refused = answer(host, orjson.dumps({"id": "2", "tool": name, "params": params}))
    assert refused == {"id": "2", "ok": False, "error": f"no active tool {name!r}"}
    (lib.root / entry["path"] / "tool.py").write_text("raise SystemExit(0)\n")
    lib.set_status(name, "stable", "test")
    assert host.reload() == []  # a tool whose files changed is refused when it is loaded
    assert "sha256" in host.refused[name]
    tampered = answer(host, orjson.dumps({"id": "3", "tool": name, "params": params}))
    assert tampered == {"id": "3", "ok": False, "error": f"no active tool {name!r}"}
