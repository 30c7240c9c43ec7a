"""The `python` target: a module with a declared schema and `run(params, invoke=None)`.

Tool directory: `tool.py` (NAME, DESCRIPTION, ANSWERS, INPUT_SCHEMA, OUTPUT_SCHEMA,
`run`), `tool.json` (metadata) and `acceptance/cases.json`. Checks: `ruff check` and
`mypy --strict` in the sandbox (which may read this interpreter and its venv). Tests:
the tool runs alone in a sandboxed worker (`pipeline_runner/sandbox/worker.py`, the
base interpreter's standard library only, no cases in view) and binloop's parent
process judges each reply (:mod:`pipeline_runner.targets.acceptance`).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any, Final

from binloop.core.config import default
from pipeline_runner.design import Design
from pipeline_runner.sandbox import Limits, Sandbox, SandboxMode, require
from pipeline_runner.sandbox.client import ToolWorker
from pipeline_runner.targets import (
    StageRun,
    cases_file,
    checked_sources,
    metadata,
    run_steps,
    tool_files,
)
from pipeline_runner.targets.acceptance import acceptance_stage

RUFF_RULES: Final = ("--select", "E,F,W,B", "--ignore", "E501")


def ruff_binary() -> str:
    try:
        from ruff.__main__ import find_ruff_bin

        return str(find_ruff_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("ruff") or shutil.which("ruff", path=str(Path(sys.executable).parent))
        if found is None:
            raise FileNotFoundError("ruff is not installed (pip install ruff)") from None
        return found


class PythonTarget:
    name = "python"
    entry = "tool.py"

    def __init__(self, check_limits: Limits | None = None,
                 test_limits: Limits | None = None, sandbox_mode: SandboxMode = "strict") -> None:
        self.sandbox_mode: SandboxMode = sandbox_mode
        self.check_limits = check_limits or Limits.for_stage(default("check_timeout"))
        self.test_limits = test_limits or Limits.for_stage(default("test_timeout"))

    @property
    def sandbox(self) -> Sandbox:
        """Where ruff and mypy run: they may read this interpreter and its venv."""
        readable = {Path(sys.prefix), Path(sys.base_prefix),
                    Path(sys.executable).resolve().parent}
        return Sandbox(readable=sorted(readable), path_dirs=[str(Path(sys.executable).parent)],
                       isolation=require(self.sandbox_mode))

    @property
    def run_sandbox(self) -> Sandbox:
        """Where the tool runs: the base interpreter only (no venv, no project)."""
        return Sandbox(readable=[Path(sys.base_prefix)], isolation=require(self.sandbox_mode))

    def package(self, design: Design, sources: dict[str, str]) -> dict[str, bytes]:
        source = checked_sources(sources, self.entry)
        return {
            "tool.py": source.encode(),
            "tool.json": metadata(design, self.name, self.entry),
            "acceptance/cases.json": cases_file(design),
        }

    def check(self, tool_dir: Path) -> StageRun:
        ruff = [ruff_binary(), "check", "--isolated", "--no-cache", *RUFF_RULES,
                "--target-version", "py310", "tool.py"]
        mypy = [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                "--cache-dir", "/dev/null", "--no-error-summary", "tool.py"]
        sandbox = self.sandbox
        return run_steps([
            ("ruff", lambda: sandbox.run(ruff, tool_dir, self.check_limits)),
            ("mypy", lambda: sandbox.run(mypy, tool_dir, self.check_limits)),
        ])

    def test(self, tool_dir: Path) -> StageRun:
        cases, meta, files = tool_files(tool_dir)
        sandbox = self.run_sandbox

        def start() -> ToolWorker:
            return ToolWorker(sandbox, "python", files, self.entry, self.test_limits,
                              start_timeout_s=min(30.0, self.test_limits.wall_s))

        return acceptance_stage(start, cases, meta, self.test_limits.wall_s, False,
                                lambda ready: python_contract(ready, meta))


def python_contract(ready: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """What the tool's module must declare (read from its worker's ready line)."""
    problems = []
    if ready.get("name") != meta.get("name"):
        problems.append(f"NAME is {ready.get('name')!r}, the design's is {meta.get('name')!r}")
    if not isinstance(ready.get("description"), str) or not ready.get("description"):
        problems.append("DESCRIPTION must be a non-empty string")
    for key in ("input_schema", "output_schema"):
        schema = ready.get(key)
        if not isinstance(schema, dict) or schema.get("type") != "object":
            problems.append(f"{key.upper()} must be an object schema")
    if not ready.get("callable"):
        problems.append("run must be a function")
    return problems
