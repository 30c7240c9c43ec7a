"""Modules renamed so that names do not collide keep their old public path, with a warning."""

from __future__ import annotations

import importlib
import sys

import pytest

MOVED = [
    ("pipeline_runner.control", "pipeline_runner.pause_resume",
     ["AgentControl", "LogControl", "TaskState", "write_checkpoint"]),
    ("binloop.agent.control", "binloop.agent.control_listener",
     ["ControlChannel", "ControlHandlers", "PauseGate"]),
]


@pytest.mark.parametrize(("old", "new", "names"), MOVED)
def test_the_old_path_still_works_and_says_where_it_moved(old: str, new: str,
                                                          names: list[str]) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        old_module = importlib.import_module(old)
    new_module = importlib.import_module(new)
    for name in names:
        assert getattr(old_module, name) is getattr(new_module, name), name
