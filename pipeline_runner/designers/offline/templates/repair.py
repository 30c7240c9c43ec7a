"""binloop offline tool: repair malformed text arguments (JSON, expressions, text) (SYNTAX)."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

from ._common import set_at, values_at  # binloop:inline

NAME: str = "template"  # binloop:fill
DESCRIPTION: str = "template"  # binloop:fill
ANSWERS: dict[str, str] = {}  # binloop:fill
INPUT_SCHEMA: dict[str, Any] = {"type": "object"}  # binloop:fill
OUTPUT_SCHEMA: dict[str, Any] = {"type": "object"}  # binloop:fill
CONFIG: dict[str, Any] = {"fields": []}  # binloop:fill

Invoke = Callable[[str, dict[str, Any]], Any]
_EXPRESSION = re.compile(r"^[0-9+\-*/().%\s]+$")
_CLOSERS = {"{": "}", "[": "]"}


def run(params: dict[str, Any], invoke: Invoke | None = None) -> dict[str, Any]:
    """Validate the learned text fields of `params["args"]` and repair the malformed ones."""
    return evaluate(CONFIG, params)


def evaluate(config: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    args = params.get("args")
    if not isinstance(args, dict):
        problem = {"rule": "input", "path": "args", "message": "args must be an object"}
        return {"ok": False, "repaired": False, "args": {}, "issues": [problem], "changes": []}
    fixed = copy.deepcopy(args)
    issues: list[dict[str, Any]] = []
    changes: list[dict[str, Any]] = []
    unresolved = 0
    for field in config["fields"]:
        kind = field["kind"]
        for path, value in values_at(args, field["path"]):
            if not isinstance(value, str) or is_valid(kind, value):
                continue
            issues.append({"rule": "syntax", "path": path,
                           "message": f"{path} is not valid {kind}"})
            repaired = repair_text(kind, value)
            if repaired != value:
                fixed = set_at(fixed, path, repaired)
                changes.append({"path": path, "from": value, "to": repaired})
            if not is_valid(kind, repaired):
                unresolved += 1
    return {"ok": not issues, "repaired": unresolved == 0, "args": fixed, "issues": issues,
            "changes": changes}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def is_valid(kind: str, text: str) -> bool:
    if kind == "json":
        try:
            json.loads(text, parse_constant=_reject_constant)
        except ValueError:
            return False
        return True
    if kind == "expression":
        return bool(_EXPRESSION.match(text)) and balanced(text) and not re.search(
            r"[+\-*/%.]\s*$", text) and bool(text.strip())
    return not re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f]", text)


def balanced(text: str) -> bool:
    depth = 0
    for char in text:
        depth += 1 if char == "(" else -1 if char == ")" else 0
        if depth < 0:
            return False
    return depth == 0


def repair_text(kind: str, text: str) -> str:
    if kind == "json":
        return repair_json(text)
    if kind == "expression":
        return repair_expression(text)
    return re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f]", "", text).strip()


def repair_json(text: str) -> str:
    text = re.sub(r"^```[A-Za-z]*\s*|\s*```$", "", text.strip())
    text = text.replace("\u201c", '"').replace("\u201d", '"')
    text = text.replace("\u2018", "'").replace("\u2019", "'")
    if '"' not in text:
        text = text.replace("'", '"')
    text = re.sub(r"\bTrue\b", "true", text)
    text = re.sub(r"\bFalse\b", "false", text)
    text = re.sub(r"\bNone\b", "null", text)
    text = re.sub(r"([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)\s*:", r'\1"\2":', text)
    text = re.sub(r",\s*([}\]])", r"\1", text)
    return close_brackets(text)


def close_brackets(text: str) -> str:
    stack: list[str] = []
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in _CLOSERS:
            stack.append(_CLOSERS[char])
        elif stack and char == stack[-1]:
            stack.pop()
    return text + ('"' if in_string else "") + "".join(reversed(stack))


def repair_expression(text: str) -> str:
    text = text.replace("\u00d7", "*").replace("\u00f7", "/").replace("\u2212", "-")
    text = re.sub(r"[+\-*/%.\s]+$", "", text.strip())
    out: list[str] = []
    depth = 0
    for char in text:
        if char == ")" and depth == 0:
            continue
        depth += 1 if char == "(" else -1 if char == ")" else 0
        out.append(char)
    return "".join(out) + ")" * depth
