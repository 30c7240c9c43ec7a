"""The non-root half: tests/test_sandbox.py again, run as `nobody` when the suite runs as
root (with the Debian-python venv of tests/nonroot.py); an incomplete sandbox is a
failure there, not a skip."""

from __future__ import annotations

import subprocess

import pytest

from tests.nonroot import REPO, NonRootUnavailable, as_user, is_root, nonroot_venv, shared_dir

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not is_root(), reason="already unprivileged: "
                                 "tests/test_sandbox.py itself is the non-root run")]


def test_the_sandbox_tests_pass_as_nobody() -> None:
    try:
        python = nonroot_venv()
    except NonRootUnavailable as exc:
        pytest.fail(f"cannot run the non-root half: {exc}")
    home = shared_dir("binloop-nobody-home-")
    done = subprocess.run(
        as_user([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 "tests/test_sandbox.py"], True),
        cwd=REPO, capture_output=True, text=True, timeout=900,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "BINLOOP_REQUIRE_SANDBOX": "1",
             "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-1000:]
