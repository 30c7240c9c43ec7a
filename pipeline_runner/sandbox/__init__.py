"""The sandbox every generated thing runs in (lint, type-check, tests, use)."""

from pipeline_runner.sandbox.isolation import Isolation, SandboxMode, SandboxUnavailable
from pipeline_runner.sandbox.launch import Limits, Sandbox, SandboxProcess, SandboxResult, scrub_env
from pipeline_runner.sandbox.probe import detect_isolation, require

__all__ = ["Isolation", "Limits", "Sandbox", "SandboxMode", "SandboxProcess", "SandboxResult",
           "SandboxUnavailable", "detect_isolation", "require", "scrub_env"]
