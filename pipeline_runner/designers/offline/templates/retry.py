"""binloop offline tool: call a tool with retries and exponential back-off (NETWORK)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ._common import is_number, normalize  # binloop:inline

NAME: str = "template"  # binloop:fill
DESCRIPTION: str = "template"  # binloop:fill
ANSWERS: dict[str, str] = {}  # binloop:fill
INPUT_SCHEMA: dict[str, Any] = {"type": "object"}  # binloop:fill
OUTPUT_SCHEMA: dict[str, Any] = {"type": "object"}  # binloop:fill
CONFIG: dict[str, Any] = {"tool": "", "transient": [], "max_attempts": 4,  # binloop:fill
                          "base_delay_ms": 200, "max_delay_ms": 5000}

Invoke = Callable[[str, dict[str, Any]], Any]


def run(params: dict[str, Any], invoke: Invoke | None = None) -> dict[str, Any]:
    """Call the tool with `params["args"]`, retrying transient network failures."""
    return evaluate(CONFIG, params, invoke)


def transient(config: dict[str, Any], message: str) -> bool:
    text = normalize(message)
    return any(pattern in text for pattern in config["transient"])


def setting(params: dict[str, Any], config: dict[str, Any], name: str, low: int, high: int
            ) -> int:
    value = params.get(name, config[name])
    return int(min(max(value, low), high)) if is_number(value) else int(config[name])


def evaluate(config: dict[str, Any], params: dict[str, Any], invoke: Invoke | None
             ) -> dict[str, Any]:
    args = params.get("args")
    if not isinstance(args, dict):
        return {"ok": False, "attempts": 0, "retryable": False, "error": "args must be an object"}
    if invoke is None:
        return {"ok": False, "attempts": 0, "retryable": False,
                "error": f"no invoker: the host must let this tool call {config['tool']}"}
    attempts = setting(params, config, "max_attempts", 1, 10)
    delay = setting(params, config, "base_delay_ms", 0, 60_000)
    error = ""
    for attempt in range(1, attempts + 1):
        try:
            return {"ok": True, "attempts": attempt, "result": invoke(config["tool"], args)}
        except Exception as exc:  # the call's failure decides whether to retry
            error = str(exc)[:1000]
            if not transient(config, error):
                return {"ok": False, "attempts": attempt, "retryable": False, "error": error}
        if attempt < attempts:
            time.sleep(min(config["max_delay_ms"], delay * 2 ** (attempt - 1)) / 1000)
    return {"ok": False, "attempts": attempts, "retryable": True, "error": error}
