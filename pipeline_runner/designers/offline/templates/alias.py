"""binloop offline tool: a missing tool, answered by the existing tool it stands for (TOOL_GAP)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

NAME: str = "template"  # binloop:fill
DESCRIPTION: str = "template"  # binloop:fill
ANSWERS: dict[str, str] = {}  # binloop:fill
INPUT_SCHEMA: dict[str, Any] = {"type": "object"}  # binloop:fill
OUTPUT_SCHEMA: dict[str, Any] = {"type": "object"}  # binloop:fill
CONFIG: dict[str, Any] = {"tool": "", "alias": ""}  # binloop:fill

Invoke = Callable[[str, dict[str, Any]], Any]


def run(params: dict[str, Any], invoke: Invoke | None = None) -> dict[str, Any]:
    """Forward the call (its params are the missing tool's arguments) to the existing tool."""
    return evaluate(CONFIG, params, invoke)


def evaluate(config: dict[str, Any], params: dict[str, Any], invoke: Invoke | None
             ) -> dict[str, Any]:
    if invoke is None:
        return {"ok": False, "via": config["alias"],
                "error": f"no invoker: the host must let this tool call {config['alias']}"}
    try:
        result = invoke(config["alias"], params)
    except Exception as exc:  # the aliased tool's failure is this tool's result
        return {"ok": False, "via": config["alias"], "error": str(exc)[:1000]}
    return {"ok": True, "via": config["alias"], "result": result}
