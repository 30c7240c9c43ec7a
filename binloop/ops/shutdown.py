"""The process-wide stop request of a live job: set by SIGINT/SIGTERM, read by every source.

Sources finish their in-flight telemetry (and a last snapshot) once `stop_requested` is set;
a second signal interrupts at once.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Any

stop_requested = threading.Event()

Handlers = dict[int, Any]


def install_stop_handlers() -> Handlers:
    """SIGINT and SIGTERM end the sources cleanly (a second signal interrupts at once);
    returns the handlers they replace."""
    stop_requested.clear()
    if threading.current_thread() is not threading.main_thread():
        return {}

    def handler(signum: int, frame: FrameType | None) -> None:
        if stop_requested.is_set():
            raise KeyboardInterrupt
        logging.getLogger("binloop").info("stopping (signal %d): finishing in-flight "
                                          "telemetry", signum)
        stop_requested.set()

    return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}


def restore_handlers(previous: Handlers) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)
