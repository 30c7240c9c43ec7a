"""Serves one generated Python tool over a pipe, inside the sandbox (binloop's code).

Run as `python -I -S worker.py /work/tool.py` (standard library only: the project is
not visible in the sandbox). It speaks the same JSON-lines protocol as the node worker
(`pipeline_runner/targets/harness/serve_plugin.mjs`):

  worker -> parent  {"type": "ready", "name", "description", "input_schema", "output_schema"}
  parent -> worker  {"type": "execute", "id", "params", "invoke": bool}
  worker -> parent  {"type": "result", "id", "details"} | {"type": "error", "id", "message"}
  worker -> parent  {"type": "invoke", "id", "tool", "params"}   (the tool's invoke(...))
  parent -> worker  {"type": "invoke_result", "id", "result"} | {"type": "invoke_error", ...}
  parent -> worker  {"type": "reset", "invoke": bool} -> {"type": "reset_done"} (load the
                    tool afresh: each acceptance case starts from a new module)

Nothing here is a verdict: the parent judges every reply. The protocol uses a private
copy of stdout; the tool's own prints go to stderr. Calls run one at a time on the main
thread; a reader thread routes replies to `invoke` calls, which a tool may make from
its own threads (e.g. a background run).
"""

import json
import os
import queue
import sys
import threading
import traceback
import types
from typing import Any

_PROTOCOL = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr
_send_lock = threading.Lock()
_waiting: dict[int, "queue.Queue[dict[str, Any]]"] = {}
_waiting_lock = threading.Lock()
_calls: "queue.Queue[dict[str, Any] | None]" = queue.Queue()
_next_invoke = [0]


def send(message: dict[str, Any]) -> None:
    line = json.dumps(message, default=str)
    with _send_lock:
        _PROTOCOL.write(line + "\n")
        _PROTOCOL.flush()


def invoke(tool: str, params: dict[str, Any]) -> Any:
    """The host's invoke(tool, args), as the tool sees it."""
    box: queue.Queue[dict[str, Any]] = queue.Queue(1)
    with _waiting_lock:
        _next_invoke[0] += 1
        number = _next_invoke[0]
        _waiting[number] = box
    send({"type": "invoke", "id": number, "tool": tool, "params": params})
    reply = box.get()
    if reply.get("type") == "invoke_result":
        return reply.get("result")
    raise RuntimeError(str(reply.get("message", "invoke failed")))


def load(path: str) -> types.ModuleType:
    with open(path, "rb") as handle:
        source = handle.read()
    module = types.ModuleType("generated_tool")
    module.__file__ = path
    sys.modules["generated_tool"] = module
    exec(compile(source, path, "exec"), module.__dict__)
    return module


def read_lines() -> None:
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        kind = message.get("type") if isinstance(message, dict) else None
        if kind in ("invoke_result", "invoke_error"):
            with _waiting_lock:
                box = _waiting.pop(message.get("id"), None)
            if box is not None:
                box.put(message)
        elif kind in ("execute", "reset"):
            _calls.put(message)
    _calls.put(None)


def execute(module: types.ModuleType, message: dict[str, Any]) -> None:
    try:
        given = invoke if message.get("invoke", True) else None
        output = module.run(message.get("params") or {}, invoke=given)
        send({"type": "result", "id": message.get("id"), "details": output})
    except BaseException as exc:  # the tool's failure is a reply, not the worker's end
        if isinstance(exc, SystemExit | KeyboardInterrupt):
            raise
        where = traceback.format_exception_only(type(exc), exc)[-1].strip()
        send({"type": "error", "id": message.get("id"), "message": where[:2000]})


def main() -> None:
    path = sys.argv[1]
    module = load(path)
    run = getattr(module, "run", None)
    send({"type": "ready", "name": getattr(module, "NAME", None),
          "description": getattr(module, "DESCRIPTION", None),
          "input_schema": getattr(module, "INPUT_SCHEMA", None),
          "output_schema": getattr(module, "OUTPUT_SCHEMA", None),
          "callable": callable(run)})
    threading.Thread(target=read_lines, daemon=True).start()
    while True:
        message = _calls.get()
        if message is None:
            break
        if message.get("type") == "reset":
            module = load(path)
            send({"type": "reset_done"})
        else:
            execute(module, message)
    _PROTOCOL.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
