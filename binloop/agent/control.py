"""Deprecated alias: the agent's control listener is `binloop.agent.control_listener`.

Kept so that agents written against the old path keep working; it will be removed in a
later release.
"""

import warnings

from binloop.agent.control_listener import ControlChannel, ControlHandlers, PauseGate

__all__ = ["ControlChannel", "ControlHandlers", "PauseGate"]

warnings.warn("binloop.agent.control moved to binloop.agent.control_listener",
              DeprecationWarning, stacklevel=2)
