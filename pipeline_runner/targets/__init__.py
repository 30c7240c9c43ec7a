"""Build targets: package a design's sources, check them, run their acceptance tests.

A target turns the designer's source files into a complete tool directory (source,
metadata, acceptance cases and the trusted test harness), then runs its checks and
tests in the sandbox. Nothing generated is imported or executed in this process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import orjson

from binloop.core.names import check_relpath
from pipeline_runner.design import Design, InvalidDesign, invoked_tool
from pipeline_runner.sandbox import SandboxResult

SOURCE_MAX_BYTES: Final = 256 * 1024


@dataclass
class StepRun:
    """One sandboxed command of a stage (e.g. ruff, mypy, pytest)."""

    name: str
    ok: bool
    reason: str
    duration_s: float
    output: str


@dataclass
class StageRun:
    ok: bool
    reason: str = ""
    steps: list[StepRun] = field(default_factory=list)

    def detail(self) -> dict[str, Any]:
        return {"steps": [{"name": s.name, "ok": s.ok, "reason": s.reason,
                           "duration_s": round(s.duration_s, 3), "output": s.output[-1500:]}
                          for s in self.steps]}


def step_of(name: str, result: SandboxResult) -> StepRun:
    return StepRun(name, result.ok, "" if result.ok else f"{name}: {result.reason()}",
                   result.duration_s, result.tail(4000))


def run_steps(steps: list[tuple[str, Any]]) -> StageRun:
    """Run (name, thunk returning SandboxResult) in order; stop at the first failure."""
    stage = StageRun(True)
    for name, thunk in steps:
        step = step_of(name, thunk())
        stage.steps.append(step)
        if not step.ok:
            tail = step.output.strip().splitlines()[-12:]
            return StageRun(False, step.reason + ("\n" + "\n".join(tail) if tail else ""),
                            stage.steps)
    return stage


class Target(Protocol):
    name: str
    entry: str

    def package(self, design: Design, sources: dict[str, str]) -> dict[str, bytes]: ...

    def check(self, tool_dir: Path) -> StageRun: ...

    def test(self, tool_dir: Path) -> StageRun: ...


def checked_sources(sources: dict[str, str], entry: str) -> str:
    """The entry file's text, after checking the designer returned exactly that file."""
    if not isinstance(sources, dict) or set(sources) != {entry}:
        got = sorted(map(str, sources)) if isinstance(sources, dict) else type(sources).__name__
        raise InvalidDesign(f"implementation must be exactly one file {entry!r}, got {got}")
    text = sources[entry]
    check_relpath(entry)
    if not isinstance(text, str) or not text.strip():
        raise InvalidDesign(f"{entry} is empty")
    if len(text.encode()) > SOURCE_MAX_BYTES:
        raise InvalidDesign(f"{entry} is over {SOURCE_MAX_BYTES} bytes")
    return text


def metadata(design: Design, target: str, entry: str) -> bytes:
    return orjson.dumps({
        "name": design.name, "description": design.description, "answers": design.answers,
        "target": target, "entry": entry, "behaviour": design.behaviour,
        "designer": design.designer, "input_schema": design.input_schema,
        "output_schema": design.output_schema, "sketch": design.sketch,
        # what the tool host lets it call (and nothing else): see invoked_tool
        "invokes": [name] if (name := invoked_tool(design)) else [],
    }, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def cases_file(design: Design) -> bytes:
    return orjson.dumps(design.cases_json(), option=orjson.OPT_INDENT_2) + b"\n"


def tool_files(tool_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, bytes]]:
    """(cases, metadata, the files the tool's worker gets) of a packaged tool directory.

    The worker never sees `acceptance/` (the expected outputs) nor `tool.json`."""
    from pipeline_runner.sandbox.launch import read_tree

    files = read_tree(tool_dir)
    cases = orjson.loads(files["acceptance/cases.json"])
    meta = orjson.loads(files["tool.json"])
    runnable = {rel: data for rel, data in files.items()
                if not rel.startswith("acceptance/") and rel != "tool.json"}
    return cases, meta, runnable


def load_target(name: str, **options: Any) -> Target:
    if name == "python":
        from pipeline_runner.targets.python import PythonTarget
        return PythonTarget(**options)
    if name == "typescript":
        from pipeline_runner.targets.typescript import TypeScriptTarget
        return TypeScriptTarget(**options)
    raise ValueError(f"unknown target {name!r} (python or typescript)")
