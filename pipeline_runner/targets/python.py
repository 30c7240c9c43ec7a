"""The `python` target: a module with a declared schema and `run(params, invoke=None)`.

Tool directory: `tool.py` (NAME, DESCRIPTION, ANSWERS, INPUT_SCHEMA, OUTPUT_SCHEMA,
`run`), `tool.json` (metadata), `acceptance/cases.json` and the harness
`acceptance/test_acceptance.py`. Checks: `ruff check` and `mypy --strict`; tests:
pytest. All three run in the sandbox with this interpreter.
"""

from __future__ import annotations

import shutil
import sys
from importlib import resources
from pathlib import Path
from typing import Final

from pipeline_runner.design import Design
from pipeline_runner.sandbox import Limits, Sandbox
from pipeline_runner.targets import (
    StageRun,
    cases_file,
    checked_sources,
    metadata,
    run_steps,
)

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
                 test_limits: Limits | None = None) -> None:
        readable = {Path(sys.prefix), Path(sys.base_prefix),
                    Path(sys.executable).resolve().parent}
        self.sandbox = Sandbox(readable=sorted(readable),
                               path_dirs=[str(Path(sys.executable).parent)])
        self.check_limits = check_limits or Limits(wall_s=120, cpu_s=120)
        self.test_limits = test_limits or Limits(wall_s=120, cpu_s=60)

    def package(self, design: Design, sources: dict[str, str]) -> dict[str, bytes]:
        source = checked_sources(sources, self.entry)
        harness = resources.files("pipeline_runner.targets.harness")
        return {
            "tool.py": source.encode(),
            "tool.json": metadata(design, self.name, self.entry),
            "acceptance/cases.json": cases_file(design),
            "acceptance/test_acceptance.py": harness.joinpath("test_acceptance.py").read_bytes(),
        }

    def check(self, tool_dir: Path) -> StageRun:
        ruff = [ruff_binary(), "check", "--isolated", "--no-cache", *RUFF_RULES,
                "--target-version", "py310", "tool.py"]
        mypy = [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                "--cache-dir", ".mypy_cache", "--no-error-summary", "tool.py"]
        return run_steps([
            ("ruff", lambda: self.sandbox.run(ruff, tool_dir, self.check_limits)),
            ("mypy", lambda: self.sandbox.run(mypy, tool_dir, self.check_limits)),
        ])

    def test(self, tool_dir: Path) -> StageRun:
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o",
                  "addopts=", "--rootdir", ".", "acceptance/test_acceptance.py"]
        env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        return run_steps([
            ("pytest", lambda: self.sandbox.run(pytest, tool_dir, self.test_limits, env)),
        ])
