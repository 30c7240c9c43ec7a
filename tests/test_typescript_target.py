"""The TypeScript target: Hanzo bot plugins checked by tsc and tested with node --test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from binloop.library.store import ToolLibrary
from tests.buildkit import RecordingControl, runner_for
from tests.designers import ScriptedSourceDesigner
from tests.test_offline_designer import SCENARIOS, scenario_event
from tests.test_runner import payment_event

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("code", sorted(SCENARIOS))
def test_builds_a_working_plugin(tmp_path: Path, code: str, typescript_target: Any) -> None:
    result = runner_for(tmp_path / "lib", target=typescript_target).build(scenario_event(code))
    assert result.outcome == "gated", result.reason
    tool_dir = tmp_path / "lib" / result.tool["path"]
    plugin = orjson.loads((tool_dir / "bot.plugin.json").read_bytes())
    assert plugin["id"] == "binloop-" + result.tool["name"].replace("_", "-")
    assert plugin["configSchema"]["type"] == "object"
    assert orjson.loads((tool_dir / "package.json").read_bytes())["type"] == "module"
    source = (tool_dir / "index.ts").read_text()
    assert "export default plugin" in source and "api.registerTool" in source
    steps = {s.stage: s for s in result.stages}
    assert steps["check"].detail["steps"][0]["name"] == "tsc"
    assert "pass " in steps["test"].detail["steps"][0]["output"]


TS_TYPE_ERROR = '''
import type { BotPlugin } from "./types/hanzo-bot.js";
const plugin: BotPlugin = {
  id: "binloop-__NAME__", name: "__NAME__", description: "broken",
  configSchema: {},
  register(api) {
    api.registerTool({ name: "__NAME__", label: "x", description: "x", parameters: {},
      async execute(_id: string, params: Record<string, unknown>) {
        const total: number = params["args"];
        return { content: [{ type: "text", text: String(total) }], details: {} };
      } });
  },
};
export default plugin;
'''


def test_a_type_error_rolls_back(tmp_path: Path, typescript_target: Any) -> None:
    seed = runner_for(tmp_path / "lib", target=typescript_target).build(scenario_event("NOTFOUND"))
    assert seed.outcome == "gated", seed.reason
    library = ToolLibrary(tmp_path / "lib")
    before, control = library.content_digest(), RecordingControl()
    result = runner_for(tmp_path / "lib", ScriptedSourceDesigner({"typescript": TS_TYPE_ERROR}),
                        typescript_target, control).build(payment_event())
    assert result.outcome == "rolled_back"
    assert [s.stage for s in result.stages if s.outcome != "ok"] == ["check"]
    assert "TS2322" in result.reason  # 'unknown' is not assignable to 'number'
    assert library.content_digest() == before
    assert control.kinds() == ["pause", "resume"]


def test_failing_plugin_tests_roll_back(tmp_path: Path, typescript_target: Any) -> None:
    always_ok = TS_TYPE_ERROR.replace('const total: number = params["args"];',
                                      "const total = 1; void params;").replace(
        "details: {}", "details: { ok: true, repaired: true, args: {}, issues: [], changes: [] }")
    result = runner_for(tmp_path / "lib", ScriptedSourceDesigner({"typescript": always_ok}),
                        typescript_target).build(payment_event())
    assert result.outcome == "rolled_back"
    assert [s.stage for s in result.stages if s.outcome != "ok"] == ["test"], result.reason
    assert not (tmp_path / "lib" / "manifest.json").exists()
