"""The parent's side of one sandboxed tool worker: start it, call it, see it die.

A :class:`ToolWorker` starts the tool's worker (Python: `worker.py`; TypeScript: node
with `serve_plugin.mjs`) in the :class:`~pipeline_runner.sandbox.Sandbox`, with only the
tool's files and binloop's worker scripts in view, waits for its `ready` line and then
makes calls one at a time, answering the tool's `invoke` requests with the caller's
`invoke`. Every way the worker can misbehave ends in :class:`WorkerFailed` with a
one-line reason: it exited (on import, or during a call), it did not answer in time,
it broke the protocol, or the watchdog killed it at a limit.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import time
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any, Final, Literal

import orjson

from pipeline_runner.sandbox.launch import TRUSTED, WORK, Limits, Sandbox, exit_reason
from pipeline_runner.sandbox.launch import trusted_script as _sandbox_script

Invoke = Callable[[str, dict[str, Any]], Any]
TargetName = Literal["python", "typescript"]
LINE_MAX: Final = 8 << 20


class WorkerFailed(Exception):
    """The worker process failed (not the tool's own error reply); `kind` says how."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind  # exited | timeout | protocol | limit | start


class ToolError(Exception):
    """The tool answered a call with an error (it raised, or its promise rejected)."""


def worker_files(target: TargetName) -> dict[str, bytes]:
    """binloop's trusted scripts the worker needs at /binloop."""
    if target == "python":
        return {"worker.py": _sandbox_script("worker.py")}
    harness = resources.files("pipeline_runner.targets.harness")
    return {name: harness.joinpath(name).read_bytes()
            for name in ("serve_plugin.mjs", "plugin_host.mjs")}


def worker_argv(target: TargetName, sandbox: Sandbox, entry: str, node: str | None) -> list[str]:
    if target == "python":
        return [sandbox.python, "-I", "-S", f"{TRUSTED}/worker.py", f"{WORK}/{entry}"]
    assert node is not None
    return [node, "--disable-warning=ExperimentalWarning", "--max-old-space-size=512",
            f"{TRUSTED}/serve_plugin.mjs", f"{WORK}/{entry}"]


class ToolWorker:
    """One sandboxed worker of one tool version."""

    def __init__(self, sandbox: Sandbox, target: TargetName, files: Mapping[str, bytes],
                 entry: str, limits: Limits, start_timeout_s: float = 30.0,
                 node: str | None = None) -> None:
        self.target = target
        self.replies = 0
        self._buffer = b""
        env = {"NODE_DISABLE_COLORS": "1"} if target == "typescript" else {}
        self._process = sandbox.spawn(worker_argv(target, sandbox, entry, node), dict(files),
                                      limits, env, worker_files(target))
        self._next_id = 0
        self._selector = selectors.DefaultSelector()
        assert self._process.proc.stdout is not None
        self._fd = self._process.proc.stdout.fileno()
        self._selector.register(self._fd, selectors.EVENT_READ)
        try:
            ready = self._read(time.monotonic() + start_timeout_s, "before it was ready "
                               "(on import or registration)")
        except WorkerFailed:
            self.close()
            raise
        if ready.get("type") != "ready":
            self.close()
            raise WorkerFailed("protocol", f"the worker's first line was not ready: "
                               f"{str(ready)[:200]}")
        self.ready: dict[str, Any] = ready
        self.started_s = time.perf_counter() - self._process.started

    @property
    def alive(self) -> bool:
        return self._process.proc.poll() is None

    def call(self, params: dict[str, Any], invoke: Invoke | None, timeout_s: float,
             what: str = "the call") -> tuple[Any, str]:
        """(details, text) of one call; raises ToolError or WorkerFailed."""
        self._next_id += 1
        call_id = self._next_id
        self._send({"type": "execute", "id": call_id, "params": params,
                    "invoke": invoke is not None}, what)
        deadline = time.monotonic() + timeout_s
        while True:
            message = self._read(deadline, f"during {what}")
            kind = message.get("type")
            if kind == "invoke":
                self._answer(message, invoke)
            elif kind == "result" and message.get("id") == call_id:
                self.replies += 1
                return message.get("details"), str(message.get("text") or "")
            elif kind == "error" and message.get("id") == call_id:
                self.replies += 1
                raise ToolError(str(message.get("message"))[:2000])
            elif kind == "error" and message.get("id") is None:
                raise WorkerFailed("protocol", f"the worker refused a line: "
                                   f"{message.get('message')}")

    def reset(self, with_invoke: bool = True, timeout_s: float = 10.0) -> None:
        """Load the tool afresh (given an invoke, or none: as a host without one)."""
        self._send({"type": "reset", "invoke": with_invoke}, "reset")
        deadline = time.monotonic() + timeout_s
        while True:
            message = self._read(deadline, "while loading the tool afresh")
            if message.get("type") == "reset_done":
                return
            if message.get("type") == "invoke":
                self._answer(message, None)

    def _answer(self, message: dict[str, Any], invoke: Invoke | None) -> None:
        reply: dict[str, Any] = {"id": message.get("id")}
        try:
            if invoke is None:
                raise RuntimeError("this host gives the tool no invoke")
            reply.update(type="invoke_result",
                         result=invoke(str(message.get("tool")), dict(message.get("params") or {})))
        except Exception as exc:  # the tool sees the failure as its invoke raising
            reply.update(type="invoke_error", message=str(exc)[:2000])
        self._send(reply, "an invoke reply")

    def _send(self, message: dict[str, Any], what: str) -> None:
        stdin = self._process.proc.stdin
        if stdin is None or not self.alive:
            raise self._exited(f"before {what}")
        try:
            stdin.write(orjson.dumps(message, default=str) + b"\n")
            stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._exited(f"before {what}") from None

    def _read(self, deadline: float, when: str) -> dict[str, Any]:
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise WorkerFailed("timeout", f"timed out: the tool's process gave no reply "
                                   f"{when} within the time limit")
            if not self._selector.select(left):
                continue
            chunk = os.read(self._fd, 1 << 16)
            if not chunk:
                raise self._exited(when)
            self._buffer += chunk
            if len(self._buffer) > LINE_MAX:
                self.close()
                raise WorkerFailed("protocol", f"a reply line over {LINE_MAX >> 20} MiB {when}")
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            self.close()
            raise WorkerFailed("protocol", f"not a protocol line {when}: {line[:120]!r}") \
                from None
        if not isinstance(message, dict):
            self.close()
            raise WorkerFailed("protocol", f"not a protocol message {when}: {line[:120]!r}")
        return message

    def _exited(self, when: str) -> WorkerFailed:
        code = self.close()
        limit = self._process.limit
        if limit:
            return WorkerFailed("limit", f"the tool's process was killed {when}: {limit}")
        tail = self._process.stderr_tail(600).strip().splitlines()[-3:]
        detail = (": " + " | ".join(tail)) if tail else ""
        return WorkerFailed("exited", f"the tool's process exited ({exit_reason(code)}) "
                            f"{when}{detail}"[:1500])

    def stderr_tail(self, keep: int = 2000) -> str:
        return self._process.stderr_tail(keep)

    def close(self) -> int:
        with contextlib.suppress(Exception):
            self._selector.close()
        return self._process.close()
