"""Deprecated alias: the pause/resume protocol is `pipeline_runner.pause_resume`.

Kept so that transports written against the old path keep working; it will be removed in a
later release.
"""

import warnings

from pipeline_runner.pause_resume import AgentControl, LogControl, TaskState, write_checkpoint

__all__ = ["AgentControl", "LogControl", "TaskState", "write_checkpoint"]

warnings.warn("pipeline_runner.control moved to pipeline_runner.pause_resume",
              DeprecationWarning, stacklevel=2)
