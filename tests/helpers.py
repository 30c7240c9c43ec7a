"""Small builders for records in tests."""

from __future__ import annotations

from typing import Any

from binloop.core.schema import ToolInvocation, validate_record


def rec(ts: int, tool: str = "t", mode: str | None = "ARGS.x", session: int | str = 1,
        outcome: str = "failure", **extra: Any) -> ToolInvocation:
    """A valid record; its id is the content hash, so equal fields mean a duplicate."""
    fields: dict[str, Any] = {"ts": ts, "tool": tool, "failure_mode": mode, "session_id": session,
                              "outcome": outcome, "args": extra.pop("args", {}), **extra}
    return validate_record(fields)
