"""The `typescript` target: a Hanzo bot plugin module.

Tool directory: `index.ts` (default export `{id, name, description, configSchema,
register(api)}`, `register` calling `api.registerTool({name, label, description,
parameters, execute})`), `bot.plugin.json`, `package.json`, `tsconfig.json`,
`types/hanzo-bot.d.ts` (the interface it is checked against), `tool.json`, and the
acceptance tests `acceptance/cases.json` + `acceptance/acceptance.test.mjs` (node's
test runner; node >= 22.18 strips the types of `index.ts` itself), which hosts the plugin
with `acceptance/plugin_host.mjs` (the same host agents use through
`harness/serve_plugin.mjs`). Check:
`tsc --strict --noEmit`. Node and tsc come from `pipeline_runner.toolchain`.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Final

import orjson

from pipeline_runner.design import Design
from pipeline_runner.sandbox import Limits, Sandbox
from pipeline_runner.targets import StageRun, cases_file, checked_sources, metadata, run_steps
from pipeline_runner.toolchain import NodeToolchain, ensure_typescript

TSC_FLAGS: Final = (
    "--strict", "--noEmit", "--target", "es2022", "--lib", "es2022", "--module", "nodenext",
    "--moduleResolution", "nodenext", "--allowImportingTsExtensions", "--verbatimModuleSyntax",
    "--erasableSyntaxOnly", "--noImplicitReturns", "--noFallthroughCasesInSwitch",
    "--skipLibCheck", "--types", "node", "--pretty", "false")
CONFIG_SCHEMA: Final = {"type": "object", "properties": {}, "additionalProperties": False}


def _json(value: object) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n"


class TypeScriptTarget:
    name = "typescript"
    entry = "index.ts"

    def __init__(self, cache_dir: Path | None = None, typescript: str = "5.9.3",
                 check_limits: Limits | None = None, test_limits: Limits | None = None) -> None:
        self.cache_dir = cache_dir or Path.home() / ".cache" / "binloop" / "toolchain"
        self.typescript = typescript
        self.check_limits = check_limits or Limits(wall_s=180, cpu_s=120)
        self.test_limits = test_limits or Limits(wall_s=120, cpu_s=60)
        self._toolchain: NodeToolchain | None = None
        self._sandbox: Sandbox | None = None

    def toolchain(self) -> tuple[NodeToolchain, Sandbox]:
        """Node + tsc (installed on first use) and a sandbox that can read them."""
        if self._toolchain is None or self._sandbox is None:
            self._toolchain = ensure_typescript(self.cache_dir, self.typescript)
            self._sandbox = Sandbox(readable=self._toolchain.readable(),
                                    path_dirs=[str(self._toolchain.node.parent)])
        return self._toolchain, self._sandbox

    def package(self, design: Design, sources: dict[str, str]) -> dict[str, bytes]:
        source = checked_sources(sources, self.entry)
        plugin_id = "binloop-" + design.name.replace("_", "-")
        harness = resources.files("pipeline_runner.targets.harness")
        return {
            "index.ts": source.encode(),
            "bot.plugin.json": _json({
                "id": plugin_id, "name": design.name, "description": design.description,
                "entry": "index.ts", "configSchema": CONFIG_SCHEMA, "tools": [design.name]}),
            "package.json": _json({
                "name": f"@binloop/{plugin_id}", "version": "1.0.0", "private": True,
                "type": "module", "main": "index.ts", "description": design.description,
                "scripts": {"test": "node --test acceptance/"},
                "binloop": {"answers": design.answers, "designer": design.designer}}),
            "tsconfig.json": _json({"compilerOptions": {
                "strict": True, "noEmit": True, "target": "es2022", "module": "nodenext",
                "moduleResolution": "nodenext", "allowImportingTsExtensions": True,
                "verbatimModuleSyntax": True, "erasableSyntaxOnly": True, "skipLibCheck": True,
                "types": ["node"]}, "files": ["index.ts", "types/hanzo-bot.d.ts"]}),
            "types/hanzo-bot.d.ts": harness.joinpath("hanzo-bot.d.ts").read_bytes(),
            "tool.json": metadata(design, self.name, self.entry),
            "acceptance/cases.json": cases_file(design),
            "acceptance/acceptance.test.mjs": harness.joinpath("acceptance.test.mjs").read_bytes(),
            "acceptance/plugin_host.mjs": harness.joinpath("plugin_host.mjs").read_bytes(),
        }

    def check(self, tool_dir: Path) -> StageRun:
        toolchain, sandbox = self.toolchain()
        tsc = [str(toolchain.node), str(toolchain.tsc_js), *TSC_FLAGS, "--typeRoots",
               str(toolchain.types_root), "index.ts", "types/hanzo-bot.d.ts"]
        return run_steps([("tsc", lambda: sandbox.run(tsc, tool_dir, self.check_limits))])

    def test(self, tool_dir: Path) -> StageRun:
        toolchain, sandbox = self.toolchain()
        node = [str(toolchain.node), "--test", "--test-reporter=spec",
                "--disable-warning=ExperimentalWarning", "acceptance/acceptance.test.mjs"]
        return run_steps([("node --test", lambda: sandbox.run(node, tool_dir, self.test_limits,
                                                              {"NODE_DISABLE_COLORS": "1"}))])
