"""binloop offline tool: flag calls likely to be refused for lack of permission (PERM)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._common import kind_of, values_at  # binloop:inline

NAME: str = "template"  # binloop:fill
DESCRIPTION: str = "template"  # binloop:fill
ANSWERS: dict[str, str] = {}  # binloop:fill
INPUT_SCHEMA: dict[str, Any] = {"type": "object"}  # binloop:fill
OUTPUT_SCHEMA: dict[str, Any] = {"type": "object"}  # binloop:fill
CONFIG: dict[str, Any] = {"tool": "", "denied": [], "message": ""}  # binloop:fill

Invoke = Callable[[str, dict[str, Any]], Any]


def run(params: dict[str, Any], invoke: Invoke | None = None) -> dict[str, Any]:
    """Check `params["args"]` against what was refused before, minus `params["granted"]`."""
    return evaluate(CONFIG, params)


def denied_by(rule: dict[str, Any], value: str) -> bool:
    if rule.get("prefix") and value.startswith(rule["prefix"]):
        return True
    if rule.get("value") is not None and value == rule["value"]:
        return True
    return bool(rule.get("kind")) and kind_of(value) == rule["kind"]


def evaluate(config: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    args, granted = params.get("args"), params.get("granted", [])
    if not isinstance(args, dict) or not isinstance(granted, list):
        problem = {"rule": "input", "path": "args",
                   "message": "give args (an object) and optionally granted (a list of prefixes)"}
        return {"ok": False, "repaired": False, "args": {}, "issues": [problem], "changes": [],
                "advice": "fix the input"}
    grants = [g for g in granted if isinstance(g, str) and g]
    issues: list[dict[str, Any]] = []
    for rule in config["denied"]:
        for path, value in values_at(args, rule["path"]):
            if not isinstance(value, str) or not denied_by(rule, value):
                continue
            if any(value.startswith(g) for g in grants):
                continue
            message = f"{config['tool']} refused {value} before: {config['message']}"
            issues.append({"rule": "permission", "path": path, "value": value,
                           "message": message})
    advice = "no known permission problem"
    if issues:
        advice = (f"{config['tool']} is likely to refuse this call: ask for the permission "
                  "first (then pass it in granted) or use another value")
    return {"ok": not issues, "repaired": not issues, "args": args, "issues": issues,
            "changes": [], "advice": advice}
