"""Instruction counts of a Python module run under valgrind's callgrind, for the
benchmarks that count instructions rather than time them (the neighbours' load on a
shared machine moves timings, not counts)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys


def require_valgrind() -> None:
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")


def instructions(module: str, *args: str) -> int:
    """Instructions of `python -m module args...`, start to exit. One hash seed: set and
    dict layouts, so the counts, are the same run after run."""
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                           sys.executable, "-m", module, *args], capture_output=True,
                          text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    found = re.search(r"refs:\s*([\d,]+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count from valgrind: {done.stderr[-500:]}")
    return int(found.group(1).replace(",", ""))


def added_instructions(module: str, command: str, case: str, count: int) -> int:
    """What `count` units of `case` add: `python -m module command case count` less the
    same run with none (start-up, imports and set-up cancel out)."""
    return (instructions(module, command, case, str(count))
            - instructions(module, command, case, "0"))
