"""The TypeScript target: Hanzo bot plugins checked by tsc, run in a sandboxed node worker
and judged by binloop's parent process."""

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
    plugin = orjson.loads((tool_dir / "openclaw.plugin.json").read_bytes())
    assert (tool_dir / "bot.plugin.json").read_bytes() == \
        (tool_dir / "openclaw.plugin.json").read_bytes()
    assert plugin["id"] == "binloop-" + result.tool["name"].replace("_", "-")
    assert plugin["configSchema"]["type"] == "object"
    package = orjson.loads((tool_dir / "package.json").read_bytes())
    assert package["type"] == "module" and package["openclaw"]["extensions"] == ["./index.ts"]
    assert package["name"] == plugin["id"]  # the loader's id hint is the package name
    source = (tool_dir / "index.ts").read_text()
    assert "export default plugin" in source and "api.registerTool" in source
    assert 'from "openclaw/plugin-sdk/core"' in source and "invokeTool" not in source
    steps = {s.stage: s for s in result.stages}
    assert [s["name"] for s in steps["check"].detail["steps"]] == \
        ["tsc (openclaw SDK)", "tsc (hanzo bot contract)"]
    assert all(s["ok"] for s in steps["check"].detail["steps"])
    test_steps = steps["test"].detail["steps"]
    assert test_steps[0]["name"] == "acceptance" and "all matched" in test_steps[0]["output"]
    assert [s["name"] for s in test_steps[1:]] == [
        "null tool (returns its input)", "null tool (raises)",
        "null tool (forwards once to the original tool)"]
    assert all("fails as it must" in s["output"] for s in test_steps[1:])


TS_TYPE_ERROR = '''
import type { OpenClawPluginDefinition } from "openclaw/plugin-sdk/core";
const plugin: OpenClawPluginDefinition = {
  id: "binloop-__NAME__", name: "__NAME__", description: "broken",
  configSchema: { safeParse: () => ({ success: true }), jsonSchema: {} },
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


# The plugin shape binloop generated before issue 14: a raw JSON Schema as configSchema
# and `api.invokeTool`, neither of which the real plugin API has.
OLD_SHAPE = '''
import type { OpenClawPluginDefinition } from "openclaw/plugin-sdk/core";
const plugin: OpenClawPluginDefinition = {
  id: "binloop-old-tool", name: "old_tool", description: "old",
  configSchema: { type: "object", properties: {}, additionalProperties: false },
  register(api) {
    const invoke = api.invokeTool;
    api.registerTool({ name: "old_tool", label: "x", description: "x", parameters: {},
      async execute(_id: string, params: Record<string, unknown>) {
        const details = { ok: true, result: invoke ? await invoke("x", params) : null };
        return { content: [{ type: "text", text: JSON.stringify(details) }], details };
      } });
  },
};
export default plugin;
'''


@pytest.mark.parametrize("config", ["tsconfig.sdk.json", "tsconfig.bot.json"])
def test_the_real_sdk_and_the_bot_contract_each_refuse_the_old_plugin_shape(
        config: str, typescript_target: Any) -> None:
    toolchain, sandbox = typescript_target.toolchain()
    harness = Path(__file__).resolve().parents[1] / "pipeline_runner/targets/harness"
    files = {"index.ts": OLD_SHAPE.encode(),
             "types/hanzo-bot.d.ts": (harness / "hanzo-bot.d.ts").read_bytes(),
             **typescript_target.check_configs()}
    run = sandbox.run([str(toolchain.node), str(toolchain.tsc_js), "-p", config], files)
    assert not run.ok
    assert "Property 'invokeTool' does not exist" in run.stdout, run.stdout
    assert "'type' does not exist in type 'OpenClawPluginConfigSchema'" in run.stdout, run.stdout
