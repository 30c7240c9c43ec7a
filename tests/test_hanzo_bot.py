"""Generated plugins in the real Hanzo bot: its own loader loads the proxy plugins of a
library's load path (bundled plugins off), its tool resolution offers their tools, and
each call runs the generated code in binloop's sandboxed tool host, not in the bot."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from binloop.demo.hanzo_bot import HanzoBot
from binloop.library.hanzo_load_path import LOAD_PATH_DIR, plugin_id, write_load_path
from binloop.library.store import ToolLibrary
from pipeline_runner.design import Design
from pipeline_runner.designers.offline import OfflineDesigner
from tests.buildkit import runner_for
from tests.test_offline_designer import scenario_event
from tests.test_runner import payment_event

pytestmark = pytest.mark.slow
HARNESS = Path(__file__).resolve().parent / "hanzo_loader_check.mjs"
OPENCLAW_HARNESS = Path(__file__).resolve().parent / "openclaw_loader_check.mjs"
SECRET = "bot-side-secret-4f1c"
EXECUTE = "const details = await answer(isObject(params) ? params : {}, hostInvoke, signal);"
PROBE = ("const details = { ...(await answer(isObject(params) ? params : {}, hostInvoke, signal)),"
         " binloop_probe: { pid: process.pid, ppid: process.ppid, cwd: process.cwd(),"
         " secret: process.env.BINLOOP_PROBE_SECRET ?? null,"
         " env: Object.keys(process.env).sort() } };")


class ProbingDesigner(OfflineDesigner):
    """The offline designer's plugin, reporting where it runs in its details (extra keys:
    the acceptance cases still judge the rest)."""

    def implement(self, design: Design, target: str) -> dict[str, str]:
        sources = super().implement(design, target)
        assert EXECUTE in sources["index.ts"]
        return {"index.ts": sources["index.ts"].replace(EXECUTE, PROBE)}


def first_params(library: ToolLibrary, name: str) -> dict[str, Any]:
    entry = library.entry(name)
    cases = orjson.loads((library.root / entry["path"] / "acceptance/cases.json").read_bytes())
    return dict(cases[0]["steps"][0]["params"])


def test_the_bots_loader_loads_the_active_proxies_and_calls_run_sandboxed(
        bot: HanzoBot, typescript_target: Any, tmp_path: Path) -> None:
    root = tmp_path / "library"
    ts = runner_for(root, ProbingDesigner(), typescript_target).build(payment_event())
    assert ts.outcome == "gated", ts.reason
    py = runner_for(root).build(scenario_event("NOTFOUND"))
    gone = runner_for(root).build(scenario_event("PERM"))
    assert py.outcome == gone.outcome == "gated", (py.reason, gone.reason)
    library = ToolLibrary(root)
    library.set_status(gone.tool["name"], "quarantined", "test: not discoverable")
    write_load_path(root, library.read())
    active = sorted([ts.tool["name"], py.tool["name"]])
    calls = {name: first_params(library, name) for name in active}
    (tmp_path / "calls.json").write_text(json.dumps(calls))

    env = {**os.environ, "BINLOOP_PROBE_SECRET": SECRET, "HOME": str(tmp_path / "home"),
           "OPENCLAW_STATE_DIR": str(tmp_path / "state")}
    run = subprocess.run([str(bot.node), "--disable-warning=ExperimentalWarning", str(HARNESS),
                          str(bot.root), str(bot.bundled_dir), str(tmp_path / "calls.json"),
                          str(root / LOAD_PATH_DIR)], capture_output=True, text=True,
                         env=env, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])

    # Exactly the active tools, each a loaded proxy whose id is its directory's name.
    assert sorted(p["id"] for p in report["plugins"]) == sorted(plugin_id(n) for n in active)
    for plugin in report["plugins"]:
        assert plugin["status"] == "loaded" and plugin["origin"] == "config", plugin
        assert Path(plugin["source"]).parent.name == plugin["id"]
        assert Path(plugin["source"]).parent.parent == root / LOAD_PATH_DIR
    problems = [d for d in report["diagnostics"]
                if re.search(r"mismatch|duplicate|manifest|escapes|failed", d["message"])]
    assert problems == []
    assert sorted(report["tools"]) == active

    # Each tool's call answered through the host: the generated code's own result.
    for name in active:
        outcome = report["results"][name]
        assert outcome["ok"], outcome
        result = outcome["result"]
        assert json.loads(result["content"][0]["text"]) == result["details"]
    probe = report["results"][ts.tool["name"]]["result"]["details"]["binloop_probe"]
    # ... which ran in a sandbox: another process, not the bot's child even, without the
    # bot's environment, in a sandbox work directory.
    assert probe["pid"] != report["pid"] and probe["ppid"] != report["pid"]
    assert probe["secret"] is None
    assert "BINLOOP_PROBE_SECRET" not in probe["env"]
    assert probe["cwd"] != str(root) and not probe["cwd"].startswith(str(root))

    # The openclaw package's own loader agrees (it also wants `contracts.tools`, which the
    # proxies declare; bundled plugins off with its OPENCLAW_DISABLE_BUNDLED_PLUGINS).
    dist = typescript_target.sdk().node_modules / "openclaw" / "dist"
    run = subprocess.run([str(bot.node), "--disable-warning=ExperimentalWarning",
                          str(OPENCLAW_HARNESS), str(dist), str(tmp_path / "calls.json"),
                          str(root / LOAD_PATH_DIR)], capture_output=True, text=True,
                         env=env, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    package = json.loads(run.stdout.strip().splitlines()[-1])
    assert sorted((p["id"], p["status"]) for p in package["plugins"]) == \
        sorted((plugin_id(n), "loaded") for n in active)
    for name in active:
        assert package["results"][name]["ok"], package["results"][name]
    probe = package["results"][ts.tool["name"]]["result"]["details"]["binloop_probe"]
    assert probe["secret"] is None and probe["pid"] != package["pid"]
