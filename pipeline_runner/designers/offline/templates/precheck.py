"""binloop offline tool: check the resources a call needs against their state (CONFLICT)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from ._common import is_number, kind_of, set_at, values_at  # binloop:inline

NAME: str = "template"  # binloop:fill
DESCRIPTION: str = "template"  # binloop:fill
ANSWERS: dict[str, str] = {}  # binloop:fill
INPUT_SCHEMA: dict[str, Any] = {"type": "object"}  # binloop:fill
OUTPUT_SCHEMA: dict[str, Any] = {"type": "object"}  # binloop:fill
CONFIG: dict[str, Any] = {"paths": [], "message": ""}  # binloop:fill

Invoke = Callable[[str, dict[str, Any]], Any]


def run(params: dict[str, Any], invoke: Invoke | None = None) -> dict[str, Any]:
    """Find the resources in `params["args"]` that `params["state"]` says are not available."""
    return evaluate(CONFIG, params)


def available(entry: Any, need: float) -> bool:
    """A state entry: true/false, a remaining amount, or {available, remaining}."""
    if isinstance(entry, bool):
        return entry
    if is_number(entry):
        return bool(entry >= need)
    if isinstance(entry, dict):
        remaining: Any = entry.get("remaining")
        enough = not is_number(remaining) or remaining >= need
        return entry.get("available", True) is not False and enough
    return True


def evaluate(config: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    args, state, need = params.get("args"), params.get("state"), params.get("need", 1)
    if not isinstance(args, dict) or not isinstance(state, dict) or not is_number(need):
        message = ("give args (an object), state (resource id -> true/false, a remaining "
                   "amount, or {available, remaining}) and optionally need (a number)")
        return {"ok": False, "repaired": False, "args": args if isinstance(args, dict) else {},
                "issues": [{"rule": "input", "path": "state", "message": message}],
                "changes": [], "unchecked": []}
    fixed = copy.deepcopy(args)
    issues: list[dict[str, Any]] = []
    changes: list[dict[str, Any]] = []
    unchecked: list[str] = []
    unresolved = 0
    used = {v for g in config["paths"] for _, v in values_at(args, g) if isinstance(v, str)}
    for generic in config["paths"]:
        for path, value in values_at(args, generic):
            if not isinstance(value, str):
                continue
            if value not in state:
                unchecked.append(path)
                continue
            if available(state[value], need):
                continue
            issues.append({"rule": "conflict", "path": path, "value": value,
                           "message": f"{value} is not available: {config['message']}"})
            alternative = pick_alternative(value, state, need, used)
            if alternative is None:
                unresolved += 1
                continue
            used.add(alternative)
            fixed = set_at(fixed, path, alternative)
            changes.append({"path": path, "from": value, "to": alternative})
    return {"ok": not issues, "repaired": unresolved == 0, "args": fixed, "issues": issues,
            "changes": changes, "unchecked": unchecked}


def pick_alternative(value: str, state: dict[str, Any], need: float, used: set[str]
                     ) -> str | None:
    kind = kind_of(value)
    for key in sorted(state):
        if key not in used and kind_of(key) == kind and available(state[key], need):
            return key
    return None
