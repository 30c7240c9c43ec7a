"""The `typescript` target: a Hanzo bot (OpenClaw) plugin module.

Tool directory: `index.ts` (default export `{id, name, description, configSchema,
register(api)}` typed with the real SDK's `OpenClawPluginDefinition`, `configSchema` a
validator object like the SDK's `emptyPluginConfigSchema()`, `register` calling
`api.registerTool({name, label, description, parameters, execute})`), the manifest
under both names the bot reads during its rename (`openclaw.plugin.json`,
`bot.plugin.json`), `package.json` with `openclaw.extensions`, `types/hanzo-bot.d.ts`
(the bot's own contract, restated), `tool.json`, and the acceptance cases
`acceptance/cases.json`.

Check: `tsc --strict --noEmit` twice, sandboxed, against the real SDK types (the
`openclaw` npm package, pinned, installed into the toolchain cache) and against the Hanzo
bot's contract (`types/hanzo-bot.d.ts`, whose declarations restate hanzoai/bot's
src/plugins/types.ts; where the two differ, the bot's types are the contract). The
tsconfigs of the check are written at check time (they name the cache) and are not part
of the tool.

Tests: the plugin runs alone in a sandboxed node worker (binloop's
`harness/serve_plugin.mjs` + `plugin_host.mjs`, the same host agents use; node >= 22.18
strips the types of `index.ts` itself; no cases in view) and binloop's parent process
judges each reply (:mod:`pipeline_runner.targets.acceptance`). Node, tsc and the SDK come
from `pipeline_runner.toolchain`.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Final

import orjson

from binloop.core.config import default
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
from pipeline_runner.toolchain import (
    NodeToolchain,
    PluginSdk,
    ensure_plugin_sdk,
    ensure_typescript,
    toolchain_dir,
)

COMPILER_OPTIONS: Final[dict[str, object]] = {
    "strict": True, "noEmit": True, "target": "es2022", "lib": ["es2022", "dom"],
    "module": "nodenext", "moduleResolution": "nodenext", "allowImportingTsExtensions": True,
    "verbatimModuleSyntax": True, "erasableSyntaxOnly": True, "noImplicitReturns": True,
    "noFallthroughCasesInSwitch": True, "skipLibCheck": True, "types": ["node"],
    "pretty": False}
CONFIG_SCHEMA: Final = {"type": "object", "properties": {}, "additionalProperties": False}
SDK_MODULE: Final = "openclaw/plugin-sdk/core"
BOT_TYPES: Final = "types/hanzo-bot.d.ts"


def plugin_id(tool_name: str) -> str:
    """The plugin id of a tool (also its package name and its directory's name)."""
    return "binloop-" + tool_name.replace("_", "-")


def manifest(plugin: str, name: str, description: str) -> bytes:
    """openclaw.plugin.json / bot.plugin.json (the same content under both names)."""
    # `contracts.tools`: the openclaw package's loader requires it (the bot ignores it).
    return _json({"id": plugin, "name": name, "description": description,
                  "configSchema": CONFIG_SCHEMA, "contracts": {"tools": [name]}})


def _json(value: object) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n"


class TypeScriptTarget:
    name = "typescript"
    entry = "index.ts"

    def __init__(self, cache_dir: Path | None = None,
                 typescript: str = default("typescript_version"),
                 check_limits: Limits | None = None, test_limits: Limits | None = None,
                 sandbox_mode: SandboxMode = "strict") -> None:
        self.sandbox_mode: SandboxMode = sandbox_mode
        self.cache_dir = toolchain_dir(cache_dir)
        self.typescript = typescript
        self.check_limits = check_limits or Limits.for_stage(default("check_timeout"))
        self.test_limits = test_limits or Limits.for_stage(default("test_timeout"))
        self._toolchain: NodeToolchain | None = None
        self._sdk: PluginSdk | None = None
        self._sandbox: Sandbox | None = None

    def toolchain(self) -> tuple[NodeToolchain, Sandbox]:
        """Node + tsc + the plugin SDK (installed on first use) and a sandbox that can
        read them."""
        if self._toolchain is None or self._sandbox is None or self._sdk is None:
            self._toolchain = ensure_typescript(self.cache_dir, self.typescript)
            self._sdk = ensure_plugin_sdk(self.cache_dir)
            self._sandbox = Sandbox(readable=[*self._toolchain.readable(), self._sdk.root],
                                    path_dirs=[str(self._toolchain.node.parent)],
                                    isolation=require(self.sandbox_mode))
        return self._toolchain, self._sandbox

    def sdk(self) -> PluginSdk:
        self.toolchain()
        assert self._sdk is not None
        return self._sdk

    def check_configs(self) -> dict[str, bytes]:
        """The two tsconfigs of the check: the real SDK package, and the bot's contract."""
        toolchain, _ = self.toolchain()
        sdk = self.sdk()
        base = {**COMPILER_OPTIONS, "typeRoots": [str(toolchain.types_root)]}
        real = {"compilerOptions": {**base, "paths": {SDK_MODULE: [str(sdk.core_types)]}},
                "files": ["index.ts"]}
        bot = {"compilerOptions": {**base, "paths": {
            SDK_MODULE: [f"./{BOT_TYPES}"],
            "@mariozechner/pi-agent-core": [str(sdk.agent_core_types)]}},
            "files": ["index.ts"]}
        return {"tsconfig.sdk.json": _json(real), "tsconfig.bot.json": _json(bot)}

    def package(self, design: Design, sources: dict[str, str]) -> dict[str, bytes]:
        source = checked_sources(sources, self.entry)
        plugin = plugin_id(design.name)
        harness = resources.files("pipeline_runner.targets.harness")
        plugin_manifest = manifest(plugin, design.name, design.description)
        return {
            "index.ts": source.encode(),
            "openclaw.plugin.json": plugin_manifest,
            "bot.plugin.json": plugin_manifest,
            "package.json": _json({
                "name": plugin, "version": "1.0.0", "private": True,
                "type": "module", "description": design.description,
                "openclaw": {"extensions": ["./index.ts"]},
                "binloop": {"answers": design.answers, "designer": design.designer}}),
            BOT_TYPES: harness.joinpath("hanzo-bot.d.ts").read_bytes(),
            "tool.json": metadata(design, self.name, self.entry),
            "acceptance/cases.json": cases_file(design),
        }

    def check(self, tool_dir: Path) -> StageRun:
        toolchain, sandbox = self.toolchain()
        files = {str(p.relative_to(tool_dir)): p.read_bytes()
                 for p in sorted(tool_dir.rglob("*")) if p.is_file()}
        files.update(self.check_configs())
        steps = []
        for name, config in (("tsc (openclaw SDK)", "tsconfig.sdk.json"),
                             ("tsc (hanzo bot contract)", "tsconfig.bot.json")):
            argv = [str(toolchain.node), str(toolchain.tsc_js), "-p", config]
            steps.append((name, lambda argv=argv: sandbox.run(argv, files, self.check_limits)))
        return run_steps(steps)

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
