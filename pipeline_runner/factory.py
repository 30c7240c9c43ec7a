"""Build a :class:`BuildRunner` (and its parts) from the job's `Config`."""

from __future__ import annotations

from pathlib import Path

from binloop.core.config import Config
from binloop.library.store import ToolLibrary
from pipeline_runner.designers import load_designer
from pipeline_runner.lifecycle import Policy
from pipeline_runner.pause_resume import AgentControl, LogControl
from pipeline_runner.runner import BuildRunner, StageTimeouts
from pipeline_runner.sandbox import Limits
from pipeline_runner.targets import Target, load_target


def library_of(config: Config) -> ToolLibrary:
    if not config.library:
        raise ValueError("--library is required (the tool library directory)")
    return ToolLibrary(config.library)


def policy_of(config: Config) -> Policy:
    return Policy(config.promote_after, config.quarantine_after)


def target_of(config: Config) -> Target:
    check = Limits.for_stage(config.check_timeout, config.sandbox_memory_mb,
                             config.sandbox_processes)
    test = Limits.for_stage(config.test_timeout, config.sandbox_memory_mb,
                            config.sandbox_processes)
    if config.target == "typescript":
        cache = Path(config.toolchain_dir) if config.toolchain_dir else None
        return load_target("typescript", cache_dir=cache, typescript=config.typescript_version,
                           check_limits=check, test_limits=test, sandbox_mode=config.sandbox)
    return load_target("python", check_limits=check, test_limits=test,
                       sandbox_mode=config.sandbox)


def timeouts_of(config: Config) -> StageTimeouts:
    pause = config.pause_timeout / 1000
    design = config.design_timeout / 1000
    return StageTimeouts(pause=pause, design=design, build=design, reload=pause, resume=pause)


def make_runner(config: Config, control: AgentControl | None = None) -> BuildRunner:
    library = library_of(config)
    if control is None:
        control = LogControl(Path(config.control_log) if config.control_log else None)
    return BuildRunner(library, load_designer(config.designer, config), target_of(config),
                       control, timeouts_of(config))
