"""The sandbox every generated thing runs in (lint, type-check, tests, use)."""

from pipeline_runner.sandbox.isolation import Isolation, SandboxMode, SandboxUnavailable
from pipeline_runner.sandbox.probe import detect_isolation, require
from pipeline_runner.sandbox.runner import Limits, Sandbox, SandboxProcess, SandboxResult, scrub_env

__all__ = ["Isolation", "Limits", "Sandbox", "SandboxMode", "SandboxProcess", "SandboxResult",
           "SandboxUnavailable", "detect_isolation", "require", "scrub_env"]
