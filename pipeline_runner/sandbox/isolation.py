"""What isolation this machine allows the sandbox, detected once per process.

Full isolation needs root (or CAP_SYS_ADMIN) and util-linux `unshare`: new network,
mount and pid namespaces (no network at all, a private /tmp, no view of other
processes) and an unprivileged uid. Without them the sandbox still scrubs the
environment and applies resource limits and a wall-clock timeout, and says what it
could not do in :attr:`Isolation.notes` (which the audit record carries).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Final

SANDBOX_UID: Final = 65534  # nobody
SANDBOX_GID: Final = 65534
UNSHARE_FLAGS: Final = ("--net", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc")


@dataclass(frozen=True)
class Isolation:
    namespaces: bool
    network_isolated: bool
    drops_privileges: bool
    unshare: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def describe(self) -> dict[str, object]:
        return {"namespaces": self.namespaces, "network_isolated": self.network_isolated,
                "drops_privileges": self.drops_privileges, "notes": list(self.notes)}


@functools.cache
def detect_isolation() -> Isolation:
    unshare = shutil.which("unshare")
    if os.geteuid() != 0:
        return Isolation(False, False, False, None, (
            "not running as root: no network/mount/pid namespaces; the network is NOT "
            "isolated and generated code runs as the current user",))
    if unshare is None:
        return Isolation(False, False, False, None, (
            "util-linux unshare not found: the network is NOT isolated; generated code "
            "runs as root without a private filesystem view",))
    probe = subprocess.run([unshare, *UNSHARE_FLAGS, "true"], capture_output=True, timeout=30,
                           check=False)
    if probe.returncode != 0:
        reason = probe.stderr.decode(errors="replace").strip()[:200]
        return Isolation(False, False, False, None, (
            f"unshare refused namespaces ({reason}): the network is NOT isolated; generated "
            "code runs as root without a private filesystem view",))
    return Isolation(True, True, True, unshare, ())
