"""Acceptance tests of a generated binloop tool (written by binloop, not by the designer).

Each case of cases.json runs its steps against `run(params, invoke=...)` of ../tool.py
and matches the output against the expected pattern (see pipeline_runner.design).
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import time
from types import ModuleType
from typing import Any

import pytest

HERE = pathlib.Path(__file__).resolve().parent
CASES: list[dict[str, Any]] = json.loads((HERE / "cases.json").read_text())
TYPES = {"string": str, "boolean": bool, "object": dict, "array": list, "null": type(None)}


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generated_tool", HERE.parent / "tool.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class ScriptedInvoke:
    """The host's invoke(tool, args): replays the case's scripted responses."""

    def __init__(self, script: list[dict[str, Any]]) -> None:
        self.script = script
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, tool: str, args: dict[str, Any]) -> Any:
        index = len(self.calls)
        self.calls.append((tool, args))
        if index >= len(self.script):
            raise RuntimeError(f"invoke called {index + 1} times; the script has "
                               f"{len(self.script)} responses")
        entry = self.script[index]
        if entry.get("delay_ms"):
            time.sleep(entry["delay_ms"] / 1000)
        if "error" in entry:
            raise RuntimeError(entry["error"])
        return entry["result"]


def is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, TYPES[name])


def matches(expected: Any, actual: Any, where: str = "output") -> list[str]:
    """Mismatches of `actual` against the pattern `expected` (empty when it matches)."""
    if isinstance(expected, dict) and any(k.startswith("$") for k in expected):
        return operator_mismatches(expected, actual, where)
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where}: expected an object, got {actual!r:.200}"]
        out: list[str] = []
        for key, value in expected.items():
            if key not in actual:
                out.append(f"{where}.{key}: missing")
            else:
                out.extend(matches(value, actual[key], f"{where}.{key}"))
        return out
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{where}: expected {len(expected)} items, got {actual!r:.200}"]
        return [m for i, (e, a) in enumerate(zip(expected, actual, strict=True))
                for m in matches(e, a, f"{where}[{i}]")]
    if isinstance(expected, bool) or isinstance(actual, bool):
        same = expected is actual
    elif isinstance(expected, int | float) and isinstance(actual, int | float):
        same = abs(expected - actual) <= 1e-9 * max(1.0, abs(expected))
    else:
        same = expected == actual
    return [] if same else [f"{where}: expected {expected!r:.200}, got {actual!r:.200}"]


def operator_mismatches(pattern: dict[str, Any], actual: Any, where: str) -> list[str]:
    out: list[str] = []
    for op, arg in pattern.items():
        if op == "$contains":
            ok = isinstance(actual, str) and str(arg) in actual
        elif op == "$type":
            ok = is_type(actual, arg)
        elif op == "$len":
            ok = isinstance(actual, list | str | dict) and len(actual) == arg
        elif op == "$some":
            ok = isinstance(actual, list) and any(not matches(arg, a) for a in actual)
        elif op == "$gte":
            ok = isinstance(actual, int | float) and actual >= arg
        elif op == "$lte":
            ok = isinstance(actual, int | float) and actual <= arg
        else:
            ok = False
        if not ok:
            out.append(f"{where}: {op} {arg!r:.200} does not hold for {actual!r:.200}")
    return out


def substitute(value: Any, previous: dict[str, Any] | None) -> Any:
    if isinstance(value, str) and value.startswith("$prev."):
        assert previous is not None, "a first step cannot refer to $prev"
        return previous.get(value[len("$prev."):])
    if isinstance(value, dict):
        return {k: substitute(v, previous) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, previous) for v in value]
    return value


def test_declares_the_contract() -> None:
    tool = load_tool()
    assert isinstance(tool.NAME, str) and tool.NAME
    assert isinstance(tool.DESCRIPTION, str) and tool.DESCRIPTION
    assert tool.INPUT_SCHEMA.get("type") == "object"
    assert tool.OUTPUT_SCHEMA.get("type") == "object"
    assert callable(tool.run)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(case: dict[str, Any]) -> None:
    tool = load_tool()
    invoke = ScriptedInvoke(case["invoke"]) if case.get("invoke") is not None else None
    previous: dict[str, Any] | None = None
    for number, step in enumerate(case["steps"], 1):
        if step.get("sleep_ms"):
            time.sleep(step["sleep_ms"] / 1000)
        params = substitute(step["params"], previous)
        output = tool.run(params, invoke=invoke)
        assert isinstance(output, dict), f"step {number}: run() must return an object"
        json.dumps(output)
        expected = dict(step["expect"])
        calls = expected.pop("$calls", None)
        problems = matches(expected, output, f"step {number}")
        if calls is not None and (invoke is None or len(invoke.calls) != calls):
            problems.append(f"step {number}: expected {calls} invoke calls, got "
                            f"{0 if invoke is None else len(invoke.calls)}")
        missing = [k for k in tool.OUTPUT_SCHEMA.get("required", []) if k not in output]
        if missing:
            problems.append(f"step {number}: output lacks required keys {missing}")
        assert not problems, "\n".join(problems)
        previous = output
