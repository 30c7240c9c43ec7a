"""The sandboxed tool host: gated tools called over a pipe, never imported by the caller.

    python -m pipeline_runner.sandbox.host --library DIR

One JSON object per line on stdin, one per line on stdout (the contract in
COORDINATION.md, "The tool host contract"):

    {"id", "tool", "params"}  -> {"id", "ok": true, "result": {"content": [...], "details"}}
                              |  {"id", "ok": false, "error": "<one line>"}
    {"id", "op": "reload"}    -> {"id", "ok": true, "tools": [names]}

MINIMAL HOST (issue 14, until issue 11's host lands): each call runs the tool's active
version in a fresh one-shot sandbox (`pipeline_runner.sandbox.Sandbox`: namespaces where
available, scrubbed environment, limits) from the bytes the manifest's sha256 vouch for;
python tools through `host_call.py`, typescript plugins through binloop's plugin host
(`host_call.mjs` + `plugin_host.mjs`). No long-lived workers, and a tool cannot call
another tool here (its invoker is absent, so retry/alias/guard/background answer "no
invoker"). Quarantined tools and tools not in the manifest are refused; the manifest is
re-read on `reload` and before each call (a cheap stat), so a withdrawn tool stops at once.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any, Final

import orjson

from binloop.core.fsutil import sha256_bytes
from binloop.core.names import UnsafeName, check_relpath
from binloop.library import manifest as mf
from binloop.library.store import ToolLibrary
from pipeline_runner.sandbox.runner import Limits, Sandbox

ACTIVE: Final = ("stable", "probationary")
CALL_FILE: Final = "binloop-call.json"


class CallRefused(Exception):
    """A call the host will not make (the message is the one-line error)."""


@dataclass
class ActiveTool:
    name: str
    version: int
    target: str
    entry: str
    files: dict[str, bytes]


def _one_line(text: str, limit: int = 500) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit] + "..."


class ToolHost:
    """The library's active tools, each call run in its own sandbox."""

    def __init__(self, library_dir: str | Path, limits: Limits | None = None) -> None:
        self.library = ToolLibrary(library_dir)
        self.limits = limits or Limits(wall_s=30, cpu_s=20)
        self._stat: tuple[int, int, int] | None = None
        self._manifest: mf.Manifest = mf.empty_manifest()
        self._sandboxes: dict[str, Sandbox] = {}

    def reload(self) -> list[str]:
        self._manifest = self.library.read()
        self._stat = self._manifest_stat()
        return sorted(name for name, entry in self._manifest["tools"].items()
                      if entry["status"] in ACTIVE)

    def call(self, tool: str, params: dict[str, Any]) -> dict[str, Any]:
        if self._manifest_stat() != self._stat:
            self.reload()
        active = self._active(tool)
        request = orjson.dumps({"entry": active.entry, "params": params})
        sandbox, argv, harness = self._runner(active.target)
        files = {**active.files, **harness, CALL_FILE: request}
        run = sandbox.run(argv, files, self.limits)
        if not run.ok:
            raise CallRefused(f"{tool}: {_one_line(run.reason())}")
        last = (run.stdout.strip().splitlines() or [""])[-1]
        try:
            reply = orjson.loads(last)
        except orjson.JSONDecodeError:
            raise CallRefused(f"{tool}: the tool gave no reply") from None
        if not isinstance(reply, dict):
            raise CallRefused(f"{tool}: the tool gave no reply")
        if not reply.get("ok"):
            raise CallRefused(_one_line(str(reply.get("error") or "the tool failed")))
        result = reply.get("result")
        if not isinstance(result, dict) or not isinstance(result.get("content"), list):
            raise CallRefused(f"{tool}: the tool's result has no content")
        return {"content": result["content"], "details": result.get("details")}

    def _active(self, tool: str) -> ActiveTool:
        entry = self._manifest["tools"].get(tool)
        if entry is None or entry["status"] not in ACTIVE:
            raise CallRefused(f"{tool}: not an active tool of the library")
        base = (self.library.root / entry["path"]).resolve()
        if not base.is_relative_to(self.library.tools_dir.resolve()):
            raise CallRefused(f"{tool}: version path outside the library")
        files: dict[str, bytes] = {}
        for rel, digest in entry["files"].items():
            try:
                path = (base / check_relpath(rel)).resolve()
            except UnsafeName as exc:
                raise CallRefused(f"{tool}: {exc}") from None
            if not path.is_relative_to(base) or not path.is_file():
                raise CallRefused(f"{tool}: {rel} is missing")
            data = path.read_bytes()
            if sha256_bytes(data) != digest:
                raise CallRefused(f"{tool}: {rel} does not match the manifest's sha256")
            files[str(PurePosixPath(rel))] = data
        return ActiveTool(tool, entry["version"], entry["target"], entry["entry"], files)

    def _runner(self, target: str) -> tuple[Sandbox, list[str], dict[str, bytes]]:
        here = resources.files("pipeline_runner.sandbox")
        if target == "python":
            if "python" not in self._sandboxes:
                readable = {Path(sys.prefix), Path(sys.base_prefix),
                            Path(sys.executable).resolve().parent}
                self._sandboxes["python"] = Sandbox(readable=sorted(readable),
                                                    path_dirs=[str(Path(sys.executable).parent)])
            harness = {"binloop_host_call.py": here.joinpath("host_call.py").read_bytes()}
            return self._sandboxes["python"], [sys.executable, "-I", "binloop_host_call.py"], \
                harness
        if target == "typescript":
            from pipeline_runner.toolchain import node_binary

            node = node_binary()
            if "typescript" not in self._sandboxes:
                self._sandboxes["typescript"] = Sandbox(
                    readable=[node.resolve().parent.parent], path_dirs=[str(node.parent)])
            plugin_host = resources.files("pipeline_runner.targets.harness")
            harness = {"binloop-host/host_call.mjs": here.joinpath("host_call.mjs").read_bytes(),
                       "binloop-host/plugin_host.mjs":
                           plugin_host.joinpath("plugin_host.mjs").read_bytes()}
            return self._sandboxes["typescript"], [
                str(node), "--disable-warning=ExperimentalWarning",
                "binloop-host/host_call.mjs"], harness
        raise CallRefused(f"unknown target {target!r}")

    def _manifest_stat(self) -> tuple[int, int, int] | None:
        try:
            st = self.library.manifest_path.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)


def answer(host: ToolHost, line: bytes) -> dict[str, Any]:
    """The reply to one request line (never raises)."""
    try:
        request = orjson.loads(line)
    except orjson.JSONDecodeError:
        return {"id": None, "ok": False, "error": "not a JSON line"}
    if not isinstance(request, dict):
        return {"id": None, "ok": False, "error": "a request must be a JSON object"}
    call_id = request.get("id")
    try:
        if request.get("op") == "reload":
            return {"id": call_id, "ok": True, "tools": host.reload()}
        tool, params = request.get("tool"), request.get("params", {})
        if not isinstance(tool, str) or not isinstance(params, dict):
            raise CallRefused("a call needs a tool name and params (an object)")
        return {"id": call_id, "ok": True, "result": host.call(tool, params)}
    except CallRefused as exc:
        return {"id": call_id, "ok": False, "error": str(exc)}
    except Exception as exc:  # one bad call never ends the host
        return {"id": call_id, "ok": False, "error": _one_line(f"{type(exc).__name__}: {exc}")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline_runner.sandbox.host",
                                     description="Serve a library's gated tools over stdio.")
    parser.add_argument("--library", required=True, help="the tool library directory")
    args = parser.parse_args(argv)
    host = ToolHost(args.library)
    host.reload()
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        out.write(orjson.dumps(answer(host, line), default=str) + b"\n")
        out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
