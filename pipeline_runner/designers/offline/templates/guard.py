"""binloop offline tool: call a tool behind a guard that knows its crashes (RUNTIME)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._common import normalize  # binloop:inline

NAME: str = "template"  # binloop:fill
DESCRIPTION: str = "template"  # binloop:fill
ANSWERS: dict[str, str] = {}  # binloop:fill
INPUT_SCHEMA: dict[str, Any] = {"type": "object"}  # binloop:fill
OUTPUT_SCHEMA: dict[str, Any] = {"type": "object"}  # binloop:fill
CONFIG: dict[str, Any] = {"tool": "", "signatures": [], "crashing": []}  # binloop:fill

Invoke = Callable[[str, dict[str, Any]], Any]


def run(params: dict[str, Any], invoke: Invoke | None = None) -> dict[str, Any]:
    """Call the guarded tool with `params["args"]` unless those args are known to crash it;
    a failure comes back as a classified result instead of an exception."""
    return evaluate(CONFIG, params, invoke)


def evaluate(config: dict[str, Any], params: dict[str, Any], invoke: Invoke | None
             ) -> dict[str, Any]:
    args = params.get("args")
    base = {"ok": False, "known_failure": False, "skipped": True}
    if not isinstance(args, dict):
        return {**base, "error": "args must be an object"}
    if invoke is None:
        return {**base, "error": f"no invoker: the host must let this tool call {config['tool']}"}
    for known in config["crashing"]:
        if known["args"] == args:
            return {**base, "known_failure": True, "signature": known["signature"],
                    "error": f"these arguments made {config['tool']} fail before",
                    "advice": advice(config, known["signature"])}
    try:
        result = invoke(config["tool"], args)
    except Exception as exc:  # the guarded tool's failure is this tool's result
        signature = normalize(str(exc))
        known_failure = signature in config["signatures"]
        return {"ok": False, "known_failure": known_failure, "skipped": False,
                "signature": signature, "error": str(exc)[:1000],
                "advice": advice(config, signature) if known_failure else "a new failure"}
    return {"ok": True, "known_failure": False, "skipped": False, "result": result}


def advice(config: dict[str, Any], signature: str) -> str:
    return (f"{config['tool']} fails this way ({signature}) on such input; change the "
            "arguments rather than retrying")
