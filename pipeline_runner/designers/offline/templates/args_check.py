"""binloop offline tool: check (and where possible repair) a tool's arguments (ARGS)."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

from ._common import is_number, kind_of, set_at, values_at  # binloop:inline

NAME: str = "template"  # binloop:fill
DESCRIPTION: str = "template"  # binloop:fill
ANSWERS: dict[str, str] = {}  # binloop:fill
INPUT_SCHEMA: dict[str, Any] = {"type": "object"}  # binloop:fill
OUTPUT_SCHEMA: dict[str, Any] = {"type": "object"}  # binloop:fill
CONFIG: dict[str, Any] = {"rules": []}  # binloop:fill

Invoke = Callable[[str, dict[str, Any]], Any]
Issue = dict[str, Any]
_TYPES = {"string": str, "boolean": bool, "object": dict, "array": list}


def run(params: dict[str, Any], invoke: Invoke | None = None) -> dict[str, Any]:
    """Check `params["args"]` against the learned rules; returns issues and repaired args."""
    return evaluate(CONFIG, params)


def evaluate(config: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    args = params.get("args")
    if not isinstance(args, dict):
        problem = {"rule": "input", "path": "args", "message": "args must be an object"}
        return {"ok": False, "repaired": False, "args": {}, "issues": [problem], "changes": []}
    issues, fixed, changes = check(config["rules"], args, params)
    remaining = check(config["rules"], fixed, params)[0] if changes else issues
    return {"ok": not issues, "repaired": not remaining, "args": fixed, "issues": issues,
            "changes": changes}


def check(rules: list[dict[str, Any]], args: dict[str, Any], params: dict[str, Any]
          ) -> tuple[list[Issue], dict[str, Any], list[dict[str, Any]]]:
    issues: list[Issue] = []
    changes: list[dict[str, Any]] = []
    fixed = copy.deepcopy(args)
    for rule in rules:
        for issue, change in apply_rule(rule, args, params):
            issues.append(issue)
            if change is not None:
                fixed = set_at(fixed, change["path"], change["to"])
                changes.append(change)
    return issues, fixed, changes


def apply_rule(rule: dict[str, Any], args: dict[str, Any], params: dict[str, Any]
               ) -> list[tuple[Issue, dict[str, Any] | None]]:
    kind = rule["kind"]
    if kind == "sum_equals":
        return sum_equals(rule, args, params)
    if kind == "required":
        missing = not has_path(args, rule["path"])
        return [(issue(rule, rule["path"], f"{rule['path']} is required"), None)] if missing else []
    found: list[tuple[Issue, dict[str, Any] | None]] = []
    for path, value in values_at(args, rule["path"]):
        problem = value_problem(rule, value)
        if problem is not None:
            found.append((issue(rule, path, problem), repair(rule, path, value, params)))
    return found


def issue(rule: dict[str, Any], path: str, message: str) -> Issue:
    return {"rule": rule["kind"], "path": path, "message": message}


def has_path(args: dict[str, Any], path: str) -> bool:
    node: Any = args
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def sum_equals(rule: dict[str, Any], args: dict[str, Any], params: dict[str, Any]
               ) -> list[tuple[Issue, dict[str, Any] | None]]:
    items, field, expected = args.get(rule["list"]), rule["field"], params.get(rule["param"])
    where = f"{rule['list']}[].{field}"
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        return [(issue(rule, rule["list"], f"{rule['list']} must be a list of objects"), None)]
    amounts = [item.get(field) for item in items]
    if not all(is_number(a) for a in amounts):
        return [(issue(rule, where, f"every {where} must be a number"), None)]
    if not is_number(expected):
        return [(issue(rule, where, f"give {rule['param']} to check that {where} adds up"), None)]
    total = sum(amounts)
    if abs(total - expected) <= 1e-6:
        return []
    problem = issue(rule, where,
                    f"{where} adds up to {total}, expected {expected}: {rule['message']}")
    if not items:
        return [(problem, None)]
    last = len(items) - 1
    new_amount = amounts[last] + (expected - total)
    if new_amount < 0:
        return [(problem, None)]
    path = f"{rule['list']}[{last}].{field}"
    return [(problem, {"path": path, "from": amounts[last], "to": new_amount})]


def value_problem(rule: dict[str, Any], value: Any) -> str | None:
    kind = rule["kind"]
    if kind == "forbidden_kind" and isinstance(value, str) and kind_of(value) == rule["value_kind"]:
        return f"{rule['value_kind']} values are not accepted here: {rule['message']}"
    if kind == "forbidden_value" and value == rule["value"]:
        return f"{value!s} is not accepted here: {rule['message']}"
    if kind == "type" and not has_type(value, rule["type"]):
        return f"must be {rule['type']}"
    if kind == "enum" and value not in rule["values"]:
        return f"must be one of {', '.join(str(v) for v in rule['values'])}"
    return None


def has_type(value: Any, name: str) -> bool:
    if name == "integer":
        return is_number(value) and float(value).is_integer()
    if name == "number":
        return is_number(value)
    return isinstance(value, _TYPES.get(name, object))


def repair(rule: dict[str, Any], path: str, value: Any, params: dict[str, Any]
           ) -> dict[str, Any] | None:
    kind = rule["kind"]
    fixed: Any = None
    if kind == "type":
        fixed = coerce(value, rule["type"])
    elif kind == "enum" and isinstance(value, str):
        fixed = next((v for v in rule["values"] if isinstance(v, str)
                      and v.lower() == value.lower()), None)
    elif kind in ("forbidden_kind", "forbidden_value"):
        alternatives = params.get("alternatives")
        if isinstance(alternatives, list):
            fixed = next((a for a in alternatives if isinstance(a, str) and a != value
                          and value_problem(rule, a) is None), None)
    return None if fixed is None else {"path": path, "from": value, "to": fixed}


def coerce(value: Any, name: str) -> Any:
    if isinstance(value, str) and name in ("integer", "number"):
        text = value.strip()
        try:
            number = float(text)
        except ValueError:
            return None
        if not math.isfinite(number) or (name == "integer" and not number.is_integer()):
            return None
        return int(number) if number.is_integer() and "." not in text else number
    if isinstance(value, str) and name == "boolean" and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if is_number(value) and name == "string":
        return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(value)
    return None
