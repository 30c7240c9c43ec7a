"""The benches compile binloop's bytecode first: a process they start then reads it even
where PYTHONDONTWRITEBYTECODE forbids writing it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bytecode import PACKAGES, compile_packages


def _package(root: Path, name: str, source: str = "VALUE = 1\n") -> None:
    (root / name).mkdir()
    (root / name / "__init__.py").write_text(source)


def test_a_process_reads_the_compiled_bytecode(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    _package(tmp_path, "flows")
    note = compile_packages(tmp_path)
    assert "compiled" in note and "PYTHONDONTWRITEBYTECODE is set" in note
    assert list((tmp_path / "flows" / "__pycache__").glob("__init__.*.pyc"))
    run = subprocess.run([sys.executable, "-v", "-c", "import flows"], cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)},
                         capture_output=True, text=True, check=True)
    assert "code object from" in run.stderr and "flows/__pycache__" in run.stderr


def test_without_the_variable_the_note_says_so(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    _package(tmp_path, "sinks")
    assert "is set" not in compile_packages(tmp_path)


def test_a_source_that_does_not_compile_is_reported(tmp_path: Path) -> None:
    _package(tmp_path, "sinks", "def broken(:\n")
    assert "could not be compiled or written" in compile_packages(tmp_path)


def test_only_binloops_packages_are_compiled(tmp_path: Path) -> None:
    _package(tmp_path, "other")
    compile_packages(tmp_path)
    assert not (tmp_path / "other" / "__pycache__").exists()
    assert "binloop" in PACKAGES and "other" not in PACKAGES


def test_the_checkout_itself_compiles() -> None:
    assert "could not" not in compile_packages()
