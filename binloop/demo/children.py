"""Child processes of the demo: started in their own session (so that Ctrl-C reaches
only the demo, which then stops them in order), output to a log file, stopped with
SIGTERM and killed when they do not exit in time."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

# BINLOOP_* settings that may reach the demo's children (where the TypeScript toolchain
# lives, sandbox sizes); every other BINLOOP_* variable is dropped so that the demo runs
# with the settings it prints.
PASSED_SETTINGS = ("BINLOOP_TOOLCHAIN_DIR", "BINLOOP_TYPESCRIPT_VERSION",
                   "BINLOOP_SANDBOX_MEMORY_MB", "BINLOOP_SANDBOX_PROCESSES")


def child_env(environ: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in environ.items()
           if not k.startswith("BINLOOP_") or k in PASSED_SETTINGS}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Child:
    """One `python -m <module> ...` process (or `argv`) with its output in `log_path`."""

    def __init__(self, name: str, module: str, args: list[str], log_path: Path,
                 env: Mapping[str, str], argv: list[str] | None = None) -> None:
        self.name = name
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        command = argv if argv is not None else [sys.executable, "-m", module, *args]
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(command, stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=dict(env), start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def stop(self, timeout: float) -> int:
        """SIGTERM, then SIGKILL (of its whole process group) after `timeout` seconds."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        code = self.proc.wait()
        self._kill_group()  # whatever it started and left behind (e.g. sandboxes)
        return code

    def _kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def kill(self) -> None:
        self._kill_group()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])
