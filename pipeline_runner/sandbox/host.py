"""The sandboxed tool host: how agents and plugin hosts call gated tools at use time.

Generated code is never imported into the caller's process. Each gated tool version
gets one long-lived worker (the same worker, sandbox and isolation as the build's test
stage: :class:`~pipeline_runner.sandbox.client.ToolWorker`), started on its first call
and spoken to over a pipe. The host

* loads only what the library's manifest lists as active (not `quarantined`), every
  file checked against the manifest's sha256 (:func:`verified_files`);
* gives each call a timeout; a worker that crashes, hangs or hits a limit is stopped
  and started again on the next call, at most `max_restarts` times per version;
* stops a tool's worker as soon as the manifest no longer lets it run (quarantine,
  rollback, a new version), checked with a `stat` of the manifest before each call;
* passes none of its own environment to a worker (bwrap starts from an empty one).

In process: :class:`ToolHost`. As a process (the contract in COORDINATION.md, spoken by
the Hanzo proxy plugins): `python -m pipeline_runner.sandbox.host --library DIR` reads
one JSON object per line on stdin and writes one per line on stdout:

  {"id", "tool", "params"[, "invoke": true]}  ->  {"id", "ok": true, "result":
      {"content": [{"type": "text", "text"}], "details"}} | {"id", "ok": false, "error"}
  {"id", "op": "reload"}  ->  {"id", "ok": true, "tools": [names]}
  {"id", "op": "status"}  ->  {"id", "ok": true, "tools": {name: {version, target,
      running, restarts, calls}}}

With `"invoke": true` a tool that wraps another tool (retry, alias, guard, background)
may call it: the host writes {"id", "op": "invoke", "invoke_id", "tool", "params"} and
the caller answers {"id", "op": "invoke_result", "invoke_id", "ok", "result" | "error"}.
Without it the tool gets no invoke. A tool may invoke only the tool its verified
`tool.json` names in `invokes` (the one it wraps); the host refuses any other name
itself, without asking the caller, and the tool sees its invoke fail with the reason.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import queue
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from binloop.core.config import default
from binloop.core.fsutil import sha256_bytes
from binloop.core.names import UnsafeName, check_relpath, check_tool_name
from binloop.library import manifest as mf
from binloop.library.store import ToolLibrary
from pipeline_runner.sandbox.client import Invoke, TargetName, ToolError, ToolWorker, WorkerFailed
from pipeline_runner.sandbox.isolation import DEFAULT_MODE, SandboxMode
from pipeline_runner.sandbox.launch import Limits, Sandbox
from pipeline_runner.sandbox.probe import require

TARGETS: Final = ("python", "typescript")
# A call that takes longer fails (its worker is stopped); a version whose worker crashed
# this often is not started again.
CALL_TIMEOUT_S: Final = 30.0
MAX_RESTARTS: Final = 3
DEFAULT_LIMITS: Final = {
    # long-lived workers: the per-call timeout bounds a call, these bound the worker
    "python": Limits(wall_s=0, cpu_s=3600, memory_mb=1024, tmpfs_mb=64, processes=64, nice=0),
    "typescript": Limits(wall_s=0, cpu_s=3600, memory_mb=1024, address_space_mb=8192,
                         tmpfs_mb=64, processes=64, nice=0),
}


class ToolRefused(Exception):
    """A library tool the host will not run (the message says why)."""


class CallFailed(Exception):
    """A call that got no answer from the tool (its worker failed, or it is withdrawn)."""


def verified_files(library: ToolLibrary, entry: mf.ToolEntry) -> dict[str, bytes]:
    """The active version's files, each read once and checked against the manifest."""
    name = check_tool_name(entry["name"])
    version_dir = (library.root / entry["path"]).resolve()
    if entry["path"] != f"tools/{name}/v{entry['version']}" or \
            version_dir.parent != library.tools_dir.resolve() / name:
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


def runnable(files: dict[str, bytes]) -> dict[str, bytes]:
    """What a worker gets: the tool's own files (not its cases nor binloop's metadata)."""
    return {rel: data for rel, data in files.items()
            if not rel.startswith("acceptance/") and rel != "tool.json"}


@dataclass
class HostedTool:
    """One gated tool version and its worker (started on first use)."""

    name: str
    version: int
    target: TargetName
    entry: str
    files: dict[str, bytes]
    meta: dict[str, Any]
    answers: dict[str, str]
    invokes: frozenset[str] = frozenset()
    worker: ToolWorker | None = None
    restarts: int = 0
    calls: int = 0
    last_failure: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def stop(self) -> None:
        with self.lock:
            if self.worker is not None:
                self.worker.close()
                self.worker = None


class ToolHost:
    """Gated tools of one library, each served by its own sandboxed worker."""

    def __init__(self, library_dir: str | Path, targets: tuple[str, ...] = TARGETS,
                 call_timeout_s: float = CALL_TIMEOUT_S, max_restarts: int = MAX_RESTARTS,
                 sandbox_mode: SandboxMode = DEFAULT_MODE,
                 limits: dict[str, Limits] | None = None) -> None:
        self.library = ToolLibrary(library_dir)
        self.targets = targets
        self.call_timeout_s = call_timeout_s
        self.max_restarts = max_restarts
        self.sandbox_mode: SandboxMode = sandbox_mode
        self.limits = {**DEFAULT_LIMITS, **(limits or {})}
        self.tools: dict[str, HostedTool] = {}
        self.refused: dict[str, str] = {}
        self.manifest_version = 0
        self._seen_stat: tuple[int, int, int] | None = None
        self._sandboxes: dict[str, tuple[Sandbox, str | None]] = {}
        self._lock = threading.RLock()

    # -- the manifest --------------------------------------------------------------------
    def reload(self) -> list[str]:
        """Bring the hosted tools in line with the manifest; the names now hosted."""
        with self._lock:
            self._seen_stat = self._stat()
            try:
                manifest = self.library.read()
            except mf.ManifestError as exc:  # a tampered manifest: nothing of it runs
                for tool in self.tools.values():
                    tool.stop()
                self.tools = {}
                self.refused = dict.fromkeys(self._listed_names(), f"manifest refused: {exc}")
                return []
            wanted = self._wanted(manifest)
            for name in [n for n, t in self.tools.items()
                         if n not in wanted or wanted[n]["version"] != t.version]:
                self.tools.pop(name).stop()
            self.refused = {}
            for name, entry in wanted.items():
                if name in self.tools:
                    continue
                try:
                    self.tools[name] = self._hosted(entry)
                except (ToolRefused, UnsafeName, KeyError, ValueError) as exc:
                    self.refused[name] = str(exc)
            self.manifest_version = manifest["version"]
            return sorted(self.tools)

    def _listed_names(self) -> list[str]:
        """The tool names a manifest that failed its checks lists (for the refusals)."""
        try:
            tools = orjson.loads((self.library.root / "manifest.json").read_bytes())["tools"]
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
            return []
        return [str(name) for name in tools] if isinstance(tools, dict) else []

    def withdraw(self) -> list[str]:
        """Stop tools the manifest no longer lets run (loads nothing new); cheap when the
        manifest has not changed (one stat)."""
        stat = self._stat()
        if stat == self._seen_stat:
            return []
        with self._lock:
            self._seen_stat = stat
            wanted = self._wanted(self.library.read())
            gone = [n for n, t in self.tools.items()
                    if n not in wanted or wanted[n]["version"] != t.version]
            for name in gone:
                self.tools.pop(name).stop()
            return gone

    def _wanted(self, manifest: mf.Manifest) -> dict[str, mf.ToolEntry]:
        return {name: entry for name, entry in manifest["tools"].items()
                if entry["status"] != "quarantined" and entry["target"] in self.targets}

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = self.library.manifest_path.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _hosted(self, entry: mf.ToolEntry) -> HostedTool:
        files = verified_files(self.library, entry)
        try:
            meta = orjson.loads(files["tool.json"])
        except (KeyError, orjson.JSONDecodeError):
            raise ToolRefused(f"{entry['name']}: no readable tool.json") from None
        if not isinstance(meta, dict) or meta.get("name") != entry["name"]:
            raise ToolRefused(f"{entry['name']}: tool.json does not describe this tool")
        target: TargetName = "python" if entry["target"] == "python" else "typescript"
        invokes = meta.get("invokes", [])
        if not isinstance(invokes, list) or not all(isinstance(n, str) for n in invokes):
            raise ToolRefused(f"{entry['name']}: tool.json's invokes is not a list of names")
        return HostedTool(entry["name"], entry["version"], target, entry["entry"],
                          runnable(files), meta,
                          {"tool": entry["answers"]["tool"],
                           "failure_mode": entry["answers"]["failure_mode"]},
                          frozenset(invokes))

    # -- calls ---------------------------------------------------------------------------
    def call(self, name: str, params: dict[str, Any], invoke: Invoke | None = None
             ) -> tuple[Any, str]:
        """(details, text) of one call of tool `name`; raises ToolError (the tool's own
        error), CallFailed (no answer) or KeyError (no such tool)."""
        self.withdraw()
        with self._lock:
            tool = self.tools.get(name)
        if tool is None:
            raise KeyError(name)
        with tool.lock:
            worker = self._worker(tool)
            tool.calls += 1
            try:
                return worker.call(params, _only(tool, invoke), self.call_timeout_s,
                                   f"a call of {name}")
            except WorkerFailed as exc:
                worker.close()
                tool.worker = None
                tool.last_failure = str(exc)
                raise CallFailed(f"{name} v{tool.version}: {exc}") from None

    def _worker(self, tool: HostedTool) -> ToolWorker:
        if tool.worker is not None and tool.worker.alive:
            return tool.worker
        if tool.worker is not None or tool.last_failure:
            tool.worker = None
            if tool.restarts >= self.max_restarts:
                raise CallFailed(f"{tool.name} v{tool.version}: its worker failed "
                                 f"{tool.restarts + 1} times; not restarted "
                                 f"(last: {tool.last_failure})")
            tool.restarts += 1
        sandbox, node = self._sandbox(tool.target)
        try:
            tool.worker = ToolWorker(sandbox, tool.target, tool.files, tool.entry,
                                     self.limits[tool.target], self.call_timeout_s, node)
        except WorkerFailed as exc:
            tool.last_failure = str(exc)
            raise CallFailed(f"{tool.name} v{tool.version}: {exc}") from None
        if tool.worker.ready.get("name") != tool.name:
            got = tool.worker.ready.get("name")
            tool.worker.close()
            tool.worker = None
            tool.last_failure = f"the worker serves {got!r}"
            raise CallFailed(f"{tool.name}: the tool's code registers {got!r}")
        return tool.worker

    def _sandbox(self, target: TargetName) -> tuple[Sandbox, str | None]:
        with self._lock:
            if target not in self._sandboxes:
                isolation = require(self.sandbox_mode)
                if target == "python":
                    self._sandboxes[target] = (Sandbox(readable=[Path(sys.base_prefix)],
                                                       isolation=isolation), None)
                else:
                    from pipeline_runner.toolchain import node_binary

                    node = node_binary()
                    self._sandboxes[target] = (Sandbox(readable=[node.resolve().parent.parent],
                                                       path_dirs=[str(node.parent)],
                                                       isolation=isolation), str(node))
            return self._sandboxes[target]

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {name: {"version": t.version, "target": t.target,
                           "running": t.worker is not None and t.worker.alive,
                           "restarts": t.restarts, "calls": t.calls,
                           "last_failure": t.last_failure}
                    for name, t in sorted(self.tools.items())}

    def stop(self, name: str) -> None:
        with self._lock:
            tool = self.tools.pop(name, None)
        if tool is not None:
            tool.stop()

    def close(self) -> None:
        with self._lock:
            tools, self.tools = list(self.tools.values()), {}
        for tool in tools:
            tool.stop()


def _only(tool: HostedTool, invoke: Invoke | None) -> Invoke | None:
    """`invoke`, limited to the tools `tool` may call (its `invokes`)."""
    if invoke is None:
        return None
    caller = invoke

    def limited(name: str, params: dict[str, Any]) -> Any:
        if name not in tool.invokes:
            allowed = ", ".join(sorted(tool.invokes)) or "no tool"
            # (without this tool's own name: a retry tool must not take it for transient)
            raise PermissionError(f"this tool may not invoke {name[:100]!r}: the tool host "
                                  f"lets it call {allowed} only")
        return caller(name, params)
    return limited


def tool_result(details: Any, text: str) -> dict[str, Any]:
    """The agent-facing result: a text part (the JSON of details) and the details."""
    if not text:
        text = json.dumps(details, default=str, ensure_ascii=False)
    return {"content": [{"type": "text", "text": text}], "details": details}


# -- the process: JSON lines on stdio ----------------------------------------------------------
class LineServer:
    """Serves a ToolHost over JSON lines; calls of different tools run concurrently."""

    def __init__(self, host: ToolHost, out: Callable[[bytes], None], workers: int = 8) -> None:
        self.host = host
        self._out = out
        self._out_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="binloop-host")
        self._invokes: dict[tuple[str, int], queue.Queue[dict[str, Any]]] = {}
        self._invoke_lock = threading.Lock()
        self._next_invoke = 0

    def send(self, message: dict[str, Any]) -> None:
        line = orjson.dumps(message, default=str) + b"\n"
        with self._out_lock:
            self._out(line)

    def handle_line(self, line: bytes) -> None:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            self.send({"id": None, "ok": False, "error": "not a JSON line"})
            return
        if not isinstance(message, dict):
            self.send({"id": None, "ok": False, "error": "a request must be a JSON object"})
            return
        request_id = message.get("id")
        op = message.get("op")
        if op == "invoke_result":
            self._settle(message)
        elif op == "reload":
            self._pool.submit(self._reload, request_id)
        elif op == "status":
            self.send({"id": request_id, "ok": True, "tools": self.host.status()})
        elif op is not None:
            self.send({"id": request_id, "ok": False, "error": f"unknown op {str(op)[:40]!r}"})
        elif not isinstance(message.get("tool"), str):
            self.send({"id": request_id, "ok": False, "error": "a call needs a tool name"})
        elif not isinstance(message.get("params", {}), dict):
            self.send({"id": request_id, "ok": False, "error": "params must be an object"})
        else:
            self._pool.submit(self._call, message)

    def _reload(self, request_id: Any) -> None:
        try:
            names = self.host.reload()
        except Exception as exc:  # a damaged manifest is an answer, not the host's end
            self.send({"id": request_id, "ok": False, "error": f"reload failed: {exc}"[:500]})
            return
        reply: dict[str, Any] = {"id": request_id, "ok": True, "tools": names}
        if self.host.refused:
            reply["refused"] = self.host.refused
        self.send(reply)

    def _call(self, message: dict[str, Any]) -> None:
        request_id, name = message.get("id"), str(message["tool"])
        invoke = self._invoker(request_id) if message.get("invoke") else None
        try:
            details, text = self.host.call(name, dict(message.get("params") or {}), invoke)
        except KeyError:
            self.send({"id": request_id, "ok": False, "error": f"no active tool {name[:100]!r}"})
        except (ToolError, CallFailed) as exc:
            self.send({"id": request_id, "ok": False, "error": _one_line(str(exc))})
        except Exception as exc:  # never the host's end
            self.send({"id": request_id, "ok": False,
                       "error": _one_line(f"{type(exc).__name__}: {exc}")})
        else:
            self.send({"id": request_id, "ok": True, "result": tool_result(details, text)})

    def _invoker(self, request_id: Any) -> Invoke:
        def invoke(tool: str, params: dict[str, Any]) -> Any:
            with self._invoke_lock:
                self._next_invoke += 1
                number = self._next_invoke
                box: queue.Queue[dict[str, Any]] = queue.Queue(1)
                self._invokes[(str(request_id), number)] = box
            self.send({"id": request_id, "op": "invoke", "invoke_id": number, "tool": tool,
                       "params": params})
            try:
                reply = box.get(timeout=self.host.call_timeout_s)
            except queue.Empty:
                raise RuntimeError(f"the caller did not answer invoke of {tool}") from None
            finally:
                with self._invoke_lock:
                    self._invokes.pop((str(request_id), number), None)
            if reply.get("ok"):
                return reply.get("result")
            raise RuntimeError(str(reply.get("error") or "invoke failed"))
        return invoke

    def _settle(self, message: dict[str, Any]) -> None:
        number = message.get("invoke_id")
        if not isinstance(number, int):
            return
        with self._invoke_lock:
            box = self._invokes.get((str(message.get("id")), number))
        if box is not None:
            box.put(message)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.host.close()


def _one_line(text: str) -> str:
    return " ".join(text.split())[:1000]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline_runner.sandbox.host",
        description="Serve a library's gated tools, each in its own sandboxed worker, over "
                    "JSON lines on stdin/stdout.")
    parser.add_argument("--library", required=True, metavar="DIR")
    parser.add_argument("--target", choices=(*TARGETS, "all"), default="all")
    parser.add_argument("--call-timeout", type=float, default=CALL_TIMEOUT_S, metavar="SECONDS")
    parser.add_argument("--max-restarts", type=int, default=MAX_RESTARTS, metavar="N")
    parser.add_argument("--sandbox", choices=("strict", "unsafe"), default=default("sandbox"))
    args = parser.parse_args(argv)
    targets = TARGETS if args.target == "all" else (args.target,)
    try:
        require(args.sandbox)
    except Exception as exc:
        print(f"binloop tool host: {exc}", file=sys.stderr)
        return 1
    host = ToolHost(args.library, targets, args.call_timeout, args.max_restarts, args.sandbox)
    try:
        host.reload()
    except Exception as exc:
        print(f"binloop tool host: cannot read the library: {exc}", file=sys.stderr)
        return 1
    out = sys.stdout.buffer

    def write(data: bytes) -> None:
        out.write(data)
        out.flush()

    server = LineServer(host, write)
    try:
        for line in sys.stdin.buffer:
            if line.strip():
                server.handle_line(line)
    except KeyboardInterrupt:
        pass
    finally:
        with contextlib.suppress(Exception):
            server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())


