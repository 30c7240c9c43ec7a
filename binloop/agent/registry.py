"""The agent's tool registry: hot-loading gated tools from a binloop tool library.

What may run is decided by the library's `manifest.json` only (a `bin.registry.updated`
notice is a hint to look, never a list of what to load):

* a tool is loaded only when the manifest lists it, for this agent's target, with a
  status other than `quarantined`;
* its files are read once, each checked against the manifest's sha256, and the code
  that runs is made from exactly those bytes (Python: compiled from them; TypeScript:
  a private copy of them, served by binloop's node harness). A file that is missing,
  altered, outside the tool's version directory, or not listed is refused, and so is
  the whole tool;
* nothing else from the library directory is ever imported.

New code is loaded only on :meth:`ToolRegistry.reload` (on a `bin.registry.updated`
notice, and at start). Withdrawals act at once: :meth:`ToolRegistry.withdraw` (called
before each use, it costs a `stat` of the manifest) unloads a tool that was quarantined,
rolled back or removed since it was loaded.
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import orjson

from binloop.core.fsutil import sha256_bytes
from binloop.core.names import UnsafeName, check_relpath, check_tool_name
from binloop.library import manifest as mf
from binloop.library.store import ToolLibrary

log = logging.getLogger("binloop.agent")
Invoke = Callable[[str, dict[str, Any]], Any]


class ToolRefused(Exception):
    """A library tool the registry will not load (the message says why)."""


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


def verified_files(library: ToolLibrary, entry: mf.ToolEntry) -> dict[str, bytes]:
    """The active version's files, each read once and checked against the manifest."""
    name = check_tool_name(entry["name"])
    version_dir = (library.root / entry["path"]).resolve()
    if entry["path"] != f"tools/{name}/v{entry['version']}" or \
            version_dir.parent != library.tools_dir / name:
        raise ToolRefused(f"{name}: version path {entry['path']!r} is not its own")
    if entry["entry"] not in entry["files"]:
        raise ToolRefused(f"{name}: entry {entry['entry']!r} is not a listed file")
    files: dict[str, bytes] = {}
    for rel, digest in entry["files"].items():
        try:
            path = (version_dir / check_relpath(rel)).resolve()
        except UnsafeName as exc:
            raise ToolRefused(f"{name}: {exc}") from None
        if not path.is_relative_to(version_dir):
            raise ToolRefused(f"{name}: {rel} resolves outside its version directory")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ToolRefused(f"{name}: {rel} cannot be read ({exc.strerror})") from None
        if sha256_bytes(data) != digest:
            raise ToolRefused(f"{name}: {rel} does not match the manifest's sha256")
        files[rel] = data
    return files


def _metadata(name: str, files: dict[str, bytes]) -> dict[str, Any]:
    try:
        meta = orjson.loads(files["tool.json"])
    except (KeyError, orjson.JSONDecodeError):
        raise ToolRefused(f"{name}: no readable tool.json") from None
    if not isinstance(meta, dict) or meta.get("name") != name:
        raise ToolRefused(f"{name}: tool.json does not describe this tool")
    return meta


def load_python(entry: mf.ToolEntry, files: dict[str, bytes]) -> Callable[..., Any]:
    """`run` of a python tool, executed from the verified bytes of its entry file."""
    name, source = entry["name"], files[entry["entry"]]
    module_name = f"binloop_tools.{name}_v{entry['version']}"
    module = types.ModuleType(module_name)
    module.__file__ = f"<binloop library: {entry['path']}/{entry['entry']}>"
    code = compile(source, module.__file__, "exec")
    sys.modules[module_name] = module  # (dataclasses and typing look modules up by name)
    try:
        exec(code, module.__dict__)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    run: Callable[..., Any] | None = getattr(module, "run", None)
    if run is None or not callable(run) or getattr(module, "NAME", None) != name:
        sys.modules.pop(module_name, None)
        raise ToolRefused(f"{name}: {entry['entry']} defines no run() for this tool")
    return run


class ToolRegistry:
    """The gated tools of one library for one target (`python` or `typescript`)."""

    def __init__(self, library_dir: str | Path, target: str = "python",
                 work_dir: Path | None = None, call_timeout_s: float = 30.0) -> None:
        if target not in ("python", "typescript"):
            raise ValueError(f"unknown target {target!r}")
        self.library = ToolLibrary(library_dir)
        self.target = target
        self.call_timeout_s = call_timeout_s
        self._work_dir = work_dir
        self._own_work_dir: Path | None = None
        self.tools: dict[str, LoadedTool] = {}
        self.manifest_version = 0
        self._seen_stat: tuple[int, int, int] | None = None

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
        """Bring the loaded tools in line with the manifest (waiting up to `wait_s` for
        it to reach `min_version`, e.g. a copy of the library that lags behind)."""
        manifest = self._read(min_version, wait_s)
        change = Reload(manifest["version"])
        wanted = self._wanted(manifest)
        for name in [n for n in self.tools if n not in wanted or
                     wanted[n]["version"] != self.tools[n].version]:
            self._unload(name)
            change.unloaded.append(name)
        for name, entry in wanted.items():
            if name in self.tools:
                continue
            try:
                self.tools[name] = self._load(entry)
                change.loaded.append(name)
            except Exception as exc:  # a tool that cannot load never stops the agent
                change.refused[name] = str(exc) if isinstance(exc, ToolRefused) else \
                    f"{name}: {type(exc).__name__}: {exc}"
        self.manifest_version = manifest["version"]
        return change

    def withdraw(self) -> list[str]:
        """Unload tools the manifest no longer lets run (loads nothing new)."""
        stat = self._stat()
        if stat == self._seen_stat or not self.tools:
            return []
        self._seen_stat = stat
        wanted = self._wanted(self.library.read())
        gone = [n for n, t in self.tools.items()
                if n not in wanted or wanted[n]["version"] != t.version]
        for name in gone:
            self._unload(name)
        return gone

    def close(self) -> None:
        for name in list(self.tools):
            self._unload(name)
        if self._own_work_dir is not None:
            shutil.rmtree(self._own_work_dir, ignore_errors=True)

    def _wanted(self, manifest: mf.Manifest) -> dict[str, mf.ToolEntry]:
        return {name: entry for name, entry in manifest["tools"].items()
                if entry["status"] != "quarantined" and entry["target"] == self.target}

    def _read(self, min_version: int, wait_s: float) -> mf.Manifest:
        deadline = time.monotonic() + wait_s
        while True:
            self._seen_stat = self._stat()
            manifest = self.library.read()
            if manifest["version"] >= min_version or time.monotonic() >= deadline:
                return manifest
            time.sleep(0.05)

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = self.library.manifest_path.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _load(self, entry: mf.ToolEntry) -> LoadedTool:
        files = verified_files(self.library, entry)
        meta = _metadata(entry["name"], files)
        call: Callable[[dict[str, Any], Invoke | None], Any]
        close: Callable[[], None] = lambda: None  # noqa: E731
        if self.target == "python":
            call = load_python(entry, files)
        else:
            call, close = self._load_plugin(entry, files)
        return LoadedTool(entry["name"], entry["version"], dict(entry["answers"]),  # type: ignore[arg-type]
                          self.target, dict(meta.get("input_schema") or {}),
                          dict(meta.get("output_schema") or {}), call, close)

    def _load_plugin(self, entry: mf.ToolEntry, files: dict[str, bytes]
                     ) -> tuple[Callable[[dict[str, Any], Invoke | None], Any], Callable[[], None]]:
        from binloop.agent.node_host import NodePluginHost
        from pipeline_runner.toolchain import node_binary

        copy_dir = self._plugin_dir() / f"{entry['name']}-v{entry['version']}"
        shutil.rmtree(copy_dir, ignore_errors=True)
        for rel, data in files.items():
            path = copy_dir / PurePosixPath(rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        host = NodePluginHost(copy_dir / entry["entry"], node_binary(), self.call_timeout_s)
        if host.tool.get("name") != entry["name"]:
            host.close()
            raise ToolRefused(f"{entry['name']}: the plugin registers {host.tool.get('name')!r}")
        return host.execute, host.close

    def _plugin_dir(self) -> Path:
        if self._work_dir is not None:
            return self._work_dir
        if self._own_work_dir is None:
            self._own_work_dir = Path(tempfile.mkdtemp(prefix="binloop-agent-plugins-"))
        return self._own_work_dir

    def _unload(self, name: str) -> None:
        tool = self.tools.pop(name)
        sys.modules.pop(f"binloop_tools.{name}_v{tool.version}", None)
        tool.close()
