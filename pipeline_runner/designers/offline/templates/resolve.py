"""binloop offline tool: resolve identifiers that do not exist to ones that do (NOTFOUND)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from ._common import distance, kind_of, set_at, values_at  # binloop:inline

NAME: str = "template"  # binloop:fill
DESCRIPTION: str = "template"  # binloop:fill
ANSWERS: dict[str, str] = {}  # binloop:fill
INPUT_SCHEMA: dict[str, Any] = {"type": "object"}  # binloop:fill
OUTPUT_SCHEMA: dict[str, Any] = {"type": "object"}  # binloop:fill
CONFIG: dict[str, Any] = {"paths": [], "noun": "identifier"}  # binloop:fill

Invoke = Callable[[str, dict[str, Any]], Any]


def run(params: dict[str, Any], invoke: Invoke | None = None) -> dict[str, Any]:
    """Look each reference in `params["args"]` up in `params["known"]`; resolve the missing."""
    return evaluate(CONFIG, params)


def evaluate(config: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    args, known = params.get("args"), params.get("known")
    if not isinstance(args, dict) or not isinstance(known, list) or not all(
            isinstance(k, str) for k in known):
        message = (f"give args (an object) and known (the {config['noun']} identifiers that "
                   "exist, e.g. from a lookup tool)")
        return {"ok": False, "repaired": False, "args": args if isinstance(args, dict) else {},
                "issues": [{"rule": "input", "path": "known", "message": message}],
                "changes": [], "unresolved": []}
    known_set = set(known)
    fixed = copy.deepcopy(args)
    issues: list[dict[str, Any]] = []
    changes: list[dict[str, Any]] = []
    unresolved: list[dict[str, Any]] = []
    for generic in config["paths"]:
        for path, value in values_at(args, generic):
            if not isinstance(value, str) or value in known_set:
                continue
            issues.append({"rule": "not_found", "path": path,
                           "message": f"{config['noun']} {value} does not exist"})
            target, how = resolve(value, known)
            if target is None:
                unresolved.append({"path": path, "value": value,
                                   "suggestions": nearest(value, known, 3)})
            else:
                fixed = set_at(fixed, path, target)
                changes.append({"path": path, "from": value, "to": target, "how": how})
    return {"ok": not issues, "repaired": not unresolved, "args": fixed, "issues": issues,
            "changes": changes, "unresolved": unresolved}


def resolve(value: str, known: list[str]) -> tuple[str | None, str]:
    """The one known identifier `value` most likely meant, and how it was chosen."""
    same_case = [k for k in known if k.lower() == value.lower()]
    if len(same_case) == 1:
        return same_case[0], "case"
    kind = kind_of(value)
    same_kind = [k for k in known if kind and kind_of(k) == kind]
    if len(same_kind) == 1:
        return same_kind[0], "only one of its kind"
    pool, how, limit = same_kind, "closest of its kind", len(value)
    if not same_kind:
        pool, how, limit = known, "closest", max(2, len(value) // 4)
    ranked = sorted((distance(value, k), k) for k in pool)
    if ranked and ranked[0][0] <= limit and (len(ranked) == 1 or ranked[1][0] > ranked[0][0]):
        return ranked[0][1], how
    return None, ""


def nearest(value: str, known: list[str], count: int) -> list[str]:
    return [k for _, k in sorted((distance(value, k), k) for k in known)[:count]]
