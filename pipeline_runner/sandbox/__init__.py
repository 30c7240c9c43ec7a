"""The sandbox every generated thing runs in (lint, type-check, tests)."""

from pipeline_runner.sandbox.isolation import Isolation, detect_isolation
from pipeline_runner.sandbox.runner import Limits, Sandbox, SandboxResult, scrub_env

__all__ = ["Isolation", "Limits", "Sandbox", "SandboxResult", "detect_isolation", "scrub_env"]
