"""Bytecode of binloop's own packages, compiled before a bench starts its processes.

An installed package has its bytecode (pip compiles it at install); a checkout run with
`PYTHONDONTWRITEBYTECODE=1` set (as on some CI and sandbox machines) has none, and then
every process a bench starts compiles binloop's sources again: 0.11 CPU-s of each 1-worker
replay on the machine of 2026-12-03 (docs/benchmarks.md), a cost no user who installed
binloop pays, and that the anchors (one script, libraries from site-packages) do not pay
either. `compileall` writes the bytecode whatever that variable says; Python reads
bytecode even when told not to write it.
"""

from __future__ import annotations

import compileall
import os
from pathlib import Path
from typing import Final

import binloop

PACKAGES: Final = ("binloop", "flows", "sinks", "pipeline_runner", "benchmarks")


def compile_packages(root: Path | None = None) -> str:
    """Compile the bytecode of binloop's packages under `root` (default: where binloop is
    imported from); a one-line note of what was done, for the bench's report."""
    base = root if root is not None else Path(binloop.__file__).resolve().parent.parent
    found = [base / name for name in PACKAGES if (base / name / "__init__.py").is_file()]
    try:
        compiled = all([compileall.compile_dir(str(d), quiet=2) for d in found])
    except OSError:  # a read-only install: its bytecode is whatever the install left
        compiled = False
    written = "bytecode of binloop's packages compiled before the runs, as an install does"
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        written += " (PYTHONDONTWRITEBYTECODE is set here: otherwise each process compiles them)"
    return written if compiled else written + "; some could not be compiled or written"


__all__ = ["PACKAGES", "compile_packages"]
