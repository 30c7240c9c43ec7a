"""The pause/resume protocol: pause the session whose failures fired, announce the registry
update, resume it.

The build runner talks to agents only through :class:`AgentControl`, so the transport
is pluggable: :class:`LogControl` (Phase 1, no agent channel: it appends each request
to a JSONL control log that an agent may tail, and answers pauses itself) and the NATS
one (`bin.control.{session_id}.pause|resume`, `bin.registry.updated`). The runner
writes the task state it gets back to a checkpoint file and hands that file's content
to `resume`; a control that does not answer in time returns `None` and the build
goes on (an unresponsive agent never holds a build up).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import orjson

from binloop.core.fsutil import atomic_write_json
from binloop.core.schema import SessionId
from binloop.replay.jsonl import JsonlFileWriter

TaskState = dict[str, Any]


@runtime_checkable
class AgentControl(Protocol):
    def pause(self, session_id: SessionId, reason: dict[str, Any]) -> TaskState | None:
        """Ask the session's agent to pause; returns its task state, or None (no answer)."""

    def registry_updated(self, manifest_version: int, tool: dict[str, Any] | None) -> None:
        """Tell agents that the library's manifest moved to `manifest_version`."""

    def resume(self, session_id: SessionId, checkpoint: dict[str, Any]) -> None:
        """Let the session go on from `checkpoint`."""


class LogControl:
    """No agent channel: requests go to a JSONL log; a pause is answered locally."""

    def __init__(self, log_path: Path | None = None) -> None:
        self._writer = JsonlFileWriter(log_path) if log_path is not None else None

    def _log(self, kind: str, **fields: Any) -> None:
        if self._writer is not None:
            self._writer.write([orjson.dumps({"type": kind, "ts": int(time.time() * 1000),
                                              **fields}, default=str)])

    def pause(self, session_id: SessionId, reason: dict[str, Any]) -> TaskState | None:
        self._log("pause", session_id=session_id, reason=reason)
        return {"session_id": session_id, "status": "paused", "agent": "no control channel",
                "paused_ms": int(time.time() * 1000)}

    def registry_updated(self, manifest_version: int, tool: dict[str, Any] | None) -> None:
        self._log("registry.updated", version=manifest_version, tool=tool)

    def resume(self, session_id: SessionId, checkpoint: dict[str, Any]) -> None:
        self._log("resume", session_id=session_id, checkpoint=checkpoint)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def write_checkpoint(directory: Path, build_id: str, session_id: SessionId,
                     state: TaskState | None) -> dict[str, Any]:
    """Persist the paused task's state; returns the checkpoint handed to `resume`."""
    checkpoint = {"build_id": build_id, "session_id": session_id,
                  "state": state, "answered": state is not None,
                  "written_ms": int(time.time() * 1000)}
    path = directory / f"{build_id}.json"
    atomic_write_json(path, checkpoint)
    return {**checkpoint, "path": str(path)}
