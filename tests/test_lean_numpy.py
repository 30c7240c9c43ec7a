"""numpy is imported for byte scans without OpenBLAS's thread pool (`binloop.core.lean_numpy`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import os, sys
from binloop.replay.readers import newline_offsets
newline_offsets(b"{}\\n{}")  # imports numpy
print(len(os.listdir("/proc/self/task")), os.environ.get("OPENBLAS_NUM_THREADS"))
"""


def threads_and_variable(env: dict[str, str]) -> tuple[int, str]:
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    return int(out[0]), out[1]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_a_replay_process_starts_no_blas_threads_and_keeps_its_environment() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    assert threads_and_variable(env) == (1, "None")


def test_a_variable_the_user_set_is_left_as_it_is() -> None:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2"}
    _, variable = threads_and_variable(env)
    assert variable == "2"
