"""The `typescript` target: a Hanzo bot plugin module.

Tool directory: `index.ts` (default export `{id, name, description, configSchema,
register(api)}`, `register` calling `api.registerTool({name, label, description,
parameters, execute})`), `bot.plugin.json`, `package.json`, `tsconfig.json`,
`types/hanzo-bot.d.ts` (the interface it is checked against), `tool.json` and the
acceptance cases `acceptance/cases.json`. Check: `tsc --strict --noEmit`, sandboxed.
Tests: the plugin runs alone in a sandboxed node worker (binloop's
`harness/serve_plugin.mjs` + `plugin_host.mjs`, the same host agents use; node >= 22.18
strips the types of `index.ts` itself; no cases in view) and binloop's parent process
judges each reply (:mod:`pipeline_runner.targets.acceptance`). Node and tsc come from
`pipeline_runner.toolchain`.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Final

import orjson

from pipeline_runner.design import Design
from pipeline_runner.sandbox import Limits, Sandbox, SandboxMode, require
from pipeline_runner.sandbox.client import ToolWorker
from pipeline_runner.targets import (
    StageRun,
    cases_file,
    checked_sources,
    metadata,
    run_steps,
    tool_files,
)
from pipeline_runner.targets.acceptance import acceptance_stage
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
                 check_limits: Limits | None = None, test_limits: Limits | None = None,
                 sandbox_mode: SandboxMode = "strict") -> None:
        self.sandbox_mode: SandboxMode = sandbox_mode
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
                                    path_dirs=[str(self._toolchain.node.parent)],
                                    isolation=require(self.sandbox_mode))
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
                "binloop": {"answers": design.answers, "designer": design.designer}}),
            "tsconfig.json": _json({"compilerOptions": {
                "strict": True, "noEmit": True, "target": "es2022", "module": "nodenext",
                "moduleResolution": "nodenext", "allowImportingTsExtensions": True,
                "verbatimModuleSyntax": True, "erasableSyntaxOnly": True, "skipLibCheck": True,
                "types": ["node"]}, "files": ["index.ts", "types/hanzo-bot.d.ts"]}),
            "types/hanzo-bot.d.ts": harness.joinpath("hanzo-bot.d.ts").read_bytes(),
            "tool.json": metadata(design, self.name, self.entry),
            "acceptance/cases.json": cases_file(design),
        }

    def check(self, tool_dir: Path) -> StageRun:
        toolchain, sandbox = self.toolchain()
        tsc = [str(toolchain.node), str(toolchain.tsc_js), *TSC_FLAGS, "--typeRoots",
               str(toolchain.types_root), "index.ts", "types/hanzo-bot.d.ts"]
        return run_steps([("tsc", lambda: sandbox.run(tsc, tool_dir, self.check_limits))])

    def test(self, tool_dir: Path) -> StageRun:
        toolchain, _ = self.toolchain()
        cases, meta, files = tool_files(tool_dir)
        sandbox = Sandbox(readable=[toolchain.node.resolve().parent.parent],
                          path_dirs=[str(toolchain.node.parent)],
                          isolation=require(self.sandbox_mode))

        def start() -> ToolWorker:
            return ToolWorker(sandbox, "typescript", files, self.entry, self.test_limits,
                              start_timeout_s=min(30.0, self.test_limits.wall_s),
                              node=str(toolchain.node))

        return acceptance_stage(start, cases, meta, self.test_limits.wall_s, True,
                                lambda ready: plugin_contract(ready, meta))


def plugin_contract(ready: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """What the plugin's one registered tool must declare (from its worker's ready line)."""
    problems = []
    if ready.get("name") != meta.get("name"):
        problems.append(f"the registered tool is {ready.get('name')!r}, the design's is "
                        f"{meta.get('name')!r}")
    for key in ("label", "description"):
        if not isinstance(ready.get(key), str) or not ready.get(key):
            problems.append(f"the tool's {key} must be a non-empty string")
    parameters = ready.get("parameters")
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        problems.append("the tool's parameters must be an object schema")
    return problems
