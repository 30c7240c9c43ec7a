"""Run a gated Hanzo bot plugin (the `typescript` target) from a Python agent.

The plugin runs in a node process hosted by binloop's trusted harness
(`pipeline_runner/targets/harness/serve_plugin.mjs`, which registers the plugin with
the same `plugin_host.mjs` as its acceptance tests). The two talk JSON lines over
stdio (the protocol is in serve_plugin.mjs): `execute(params, invoke)` sends one call
and answers the calls the plugin makes of other tools (through its `binloopHost` invoker)
with `invoke` until the result
arrives. Node gets a scrubbed environment (no credentials of the agent).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

Invoke = Callable[[str, dict[str, Any]], Any]


class PluginHostError(RuntimeError):
    """The node host did not start, broke the protocol, or timed out."""


def harness_script() -> Path:
    """serve_plugin.mjs of the installed package (beside plugin_host.mjs)."""
    return Path(str(resources.files("pipeline_runner.targets.harness")
                    .joinpath("serve_plugin.mjs")))


class NodePluginHost:
    """One node process serving one plugin; calls are made one at a time."""

    def __init__(self, entry: Path, node: Path, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s
        env = {"PATH": str(node.parent), "NODE_DISABLE_COLORS": "1"}
        self._proc = subprocess.Popen(
            [str(node), "--disable-warning=ExperimentalWarning", str(harness_script()),
             str(entry)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
            cwd=entry.parent)
        self._buffer = b""
        self._last_id = 0
        ready = self._read(time.monotonic() + timeout_s)
        if ready.get("type") != "ready":
            self.close()
            raise PluginHostError(f"the plugin host did not start: {ready}")
        self.tool: dict[str, Any] = ready

    def execute(self, params: dict[str, Any], invoke: Invoke | None = None) -> Any:
        """The plugin tool's `details` for `params` (raises PluginHostError on its error)."""
        self._last_id += 1
        call_id = self._last_id
        self._send({"type": "execute", "id": call_id, "params": params})
        deadline = time.monotonic() + self.timeout_s
        while True:
            message = self._read(deadline)
            kind = message.get("type")
            if kind == "invoke":
                self._answer_invoke(message, invoke)
            elif message.get("id") == call_id and kind == "result":
                return message.get("details")
            elif message.get("id") in (call_id, None) and kind == "error":
                raise PluginHostError(str(message.get("message")))

    def _answer_invoke(self, message: dict[str, Any], invoke: Invoke | None) -> None:
        reply: dict[str, Any] = {"id": message.get("id")}
        try:
            if invoke is None:
                raise RuntimeError("this host lets the plugin call no other tool")
            reply.update(type="invoke_result",
                         result=invoke(str(message.get("tool")), dict(message.get("params") or {})))
        except Exception as exc:  # the plugin sees the failure as a rejected promise
            reply.update(type="invoke_error", message=str(exc))
        self._send(reply)

    def _send(self, message: dict[str, Any]) -> None:
        if self._proc.stdin is None or self._proc.poll() is not None:
            raise PluginHostError("the plugin host has exited")
        self._proc.stdin.write(orjson.dumps(message, default=str) + b"\n")
        self._proc.stdin.flush()

    def _read(self, deadline: float) -> dict[str, Any]:
        """The next protocol line, waiting until `deadline`."""
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.close()
                    raise PluginHostError(f"the plugin did not answer within {self.timeout_s}s")
                if not selector.select(left):
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise PluginHostError(f"the plugin host exited ({self._proc.wait()})")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise PluginHostError(f"not a protocol line: {line[:200]!r}") from None
        if not isinstance(message, dict):
            raise PluginHostError(f"not a protocol message: {line[:200]!r}")
        return message

    def close(self) -> None:
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
