"""The agent's tool registry: gated tools of a binloop tool library, called through the
sandboxed tool host (:mod:`pipeline_runner.sandbox.host`), never imported.

What may run is decided by the library's `manifest.json` only (a `bin.registry.updated`
notice is a hint to look, never a list of what to load):

* a tool is hosted only when the manifest lists it, for this agent's target, with a
  status other than `quarantined`;
* its files are read once, each checked against the manifest's sha256; the worker that
  runs it (its own sandboxed process, long-lived, started on first use) gets exactly
  those bytes and nothing of the agent: not its environment (API keys, NATS
  credentials), not its files, no network;
* a call has a timeout; a crashed worker is restarted a bounded number of times.

New code is loaded only on :meth:`ToolRegistry.reload` (on a `bin.registry.updated`
notice, and at start). Withdrawals act at once: :meth:`ToolRegistry.withdraw` (called
before each use, it costs a `stat` of the manifest) stops a tool that was quarantined,
rolled back or removed since it was loaded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from binloop.library import manifest as mf
from pipeline_runner.sandbox.host import (
    CALL_TIMEOUT_S,
    MAX_RESTARTS,
    CallFailed,
    ToolHost,
    ToolRefused,
    verified_files,
)
from pipeline_runner.sandbox.isolation import DEFAULT_MODE, SandboxMode

log = logging.getLogger("binloop.agent")
Invoke = Callable[[str, dict[str, Any]], Any]
__all__ = ["CallFailed", "LoadedTool", "Reload", "ToolRefused", "ToolRegistry", "verified_files"]


@dataclass
class LoadedTool:
    """A gated tool ready to call: `run(params, invoke)` returns its output object."""

    name: str
    version: int
    answers: mf.Answers
    target: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    call: Callable[[dict[str, Any], Invoke | None], Any]
    close: Callable[[], None] = lambda: None

    @property
    def checks_args(self) -> bool:
        """A check tool returns (repaired) `args` for the call; otherwise the tool makes
        the call itself through `invoke` (retry, guard, alias, background run)."""
        return "args" in (self.output_schema.get("required") or [])

    def run(self, params: dict[str, Any], invoke: Invoke | None = None) -> dict[str, Any]:
        output = self.call(params, invoke)
        if not isinstance(output, dict):
            raise ToolRefused(f"{self.name} returned {type(output).__name__}, not an object")
        return output


@dataclass
class Reload:
    """What one reload changed."""

    manifest_version: int
    loaded: list[str] = field(default_factory=list)
    unloaded: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


class ToolRegistry:
    """The gated tools of one library for one target (`python` or `typescript`)."""

    def __init__(self, library_dir: str | Path, target: str = "python",
                 work_dir: Path | None = None, call_timeout_s: float = CALL_TIMEOUT_S,
                 sandbox_mode: SandboxMode = DEFAULT_MODE,
                 max_restarts: int = MAX_RESTARTS) -> None:
        if target not in ("python", "typescript"):
            raise ValueError(f"unknown target {target!r}")
        self.host = ToolHost(library_dir, (target,), call_timeout_s, max_restarts,
                             sandbox_mode)
        self.library = self.host.library
        self.target = target
        self.call_timeout_s = call_timeout_s
        self.tools: dict[str, LoadedTool] = {}
        self.manifest_version = 0

    # -- using tools ---------------------------------------------------------------------
    def guards_for(self, tool: str) -> list[LoadedTool]:
        """Loaded tools that answer a failure of `tool` (check tools first)."""
        found = [t for t in self.tools.values() if t.answers["tool"] == tool]
        return sorted(found, key=lambda t: (not t.checks_args, t.name))

    def answers(self, tool: str, failure_mode: str) -> LoadedTool | None:
        return next((t for t in self.tools.values()
                     if (t.answers["tool"], t.answers["failure_mode"]) == (tool, failure_mode)),
                    None)

    # -- loading -------------------------------------------------------------------------
    def reload(self, min_version: int = 0, wait_s: float = 2.0) -> Reload:
        """Bring the hosted tools in line with the manifest (waiting up to `wait_s` for
        it to reach `min_version`, e.g. a copy of the library that lags behind)."""
        deadline = time.monotonic() + wait_s
        while self._version() < min_version and time.monotonic() < deadline:
            time.sleep(0.05)
        before = {n: t.version for n, t in self.tools.items()}
        self.host.reload()
        change = Reload(self.host.manifest_version, refused=dict(self.host.refused))
        for name, version in before.items():
            hosted = self.host.tools.get(name)
            if hosted is None or hosted.version != version:
                self.tools.pop(name, None)
                change.unloaded.append(name)
        for name, hosted in self.host.tools.items():
            if name not in self.tools:
                self.tools[name] = self._loaded(name, hosted.version, hosted.answers,
                                                hosted.meta)
                change.loaded.append(name)
        self.manifest_version = self.host.manifest_version
        return change

    def _version(self) -> int:
        """The manifest's version (-1 for one that fails its checks: the host refuses it)."""
        try:
            return self.library.read()["version"]
        except mf.ManifestError:
            return -1

    def withdraw(self) -> list[str]:
        """Stop tools the manifest no longer lets run (loads nothing new)."""
        gone = self.host.withdraw()
        for name in gone:
            self.tools.pop(name, None)
        return gone

    def close(self) -> None:
        self.tools = {}
        self.host.close()

    def _loaded(self, name: str, version: int, answers: dict[str, str],
                meta: dict[str, Any]) -> LoadedTool:
        host = self.host

        def call(params: dict[str, Any], invoke: Invoke | None) -> Any:
            return host.call(name, params, invoke)[0]

        return LoadedTool(name, version, answers,  # type: ignore[arg-type]
                          self.target, dict(meta.get("input_schema") or {}),
                          dict(meta.get("output_schema") or {}), call,
                          lambda: host.stop(name))
