"""Run an untrusted command in a throw-away directory under limits (see `isolation`).

Guarantees of :meth:`Sandbox.run`, whatever the command does:
* it starts in a fresh temporary directory holding a copy of the given files, with an
  environment of only PATH, HOME, TMPDIR, LANG and the caller's non-secret extras;
* CPU seconds, address space, file size, open files and (as the sandbox uid) process
  count are capped by `setrlimit`; the wall clock by a timeout that kills the whole
  process group (and, with namespaces, the whole pid namespace);
* with namespaces: no network interface but a down loopback, a private /tmp, no other
  processes visible, the uid `nobody`, and only the given directories readable under
  otherwise hidden ancestors such as /root;
* its output is captured to files (bounded by the file-size limit) and only the tail
  is kept; the directory is removed afterwards.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import orjson

from pipeline_runner.sandbox.isolation import (
    SANDBOX_GID,
    SANDBOX_UID,
    UNSHARE_FLAGS,
    Isolation,
    detect_isolation,
)

_INIT: Final = Path(__file__).with_name("_init.py")
_WORLD_WRITABLE: Final = ("/tmp", "/var/tmp", "/run/lock", "/dev/shm", "/dev/mqueue")
_SECRET_ENV: Final = re.compile(r"(?i)(key|token|secret|passw|credential|auth|cookie|session)")
_BASE_PATH: Final = ("/usr/local/bin", "/usr/bin", "/bin")


@dataclass(frozen=True)
class Limits:
    """Resource caps of one sandboxed command."""

    wall_s: float = 120.0
    cpu_s: int = 120
    memory_mb: int = 4096
    file_mb: int = 64
    open_files: int = 256
    processes: int = 128
    output_kb: int = 64
    # Builds run beside the detector: at a lower CPU priority, so detection keeps its pace.
    nice: int = 10

    def rlimits(self) -> dict[str, tuple[int, int]]:
        mib = 1 << 20
        return {
            "RLIMIT_CPU": (self.cpu_s, self.cpu_s + 1),
            "RLIMIT_AS": (self.memory_mb * mib, self.memory_mb * mib),
            "RLIMIT_FSIZE": (self.file_mb * mib, self.file_mb * mib),
            "RLIMIT_NOFILE": (self.open_files, self.open_files),
            "RLIMIT_CORE": (0, 0),
        }


@dataclass
class SandboxResult:
    argv: list[str]
    returncode: int
    timed_out: bool
    duration_s: float
    stdout: str
    stderr: str
    isolation: dict[str, object] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def reason(self) -> str:
        """One line saying why the command did not succeed."""
        if self.timed_out:
            return f"timed out after {self.duration_s:.1f}s (wall-clock limit)"
        if self.returncode > 128:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(self.returncode - 128).name}"
        if self.returncode < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-self.returncode).name}"
        return f"exit code {self.returncode}"

    def tail(self, chars: int = 2000) -> str:
        text = (self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr).strip()
        return text[-chars:]


def scrub_env(extra: Mapping[str, str] | None, path_dirs: Iterable[str],
              home: str) -> dict[str, str]:
    """The whole environment of a sandboxed command; secret-looking extras are refused."""
    env = {"PATH": ":".join([*path_dirs, *_BASE_PATH]), "HOME": home, "TMPDIR": home,
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONHASHSEED": "0", "NO_COLOR": "1"}
    for name, value in (extra or {}).items():
        if _SECRET_ENV.search(name):
            raise ValueError(f"refusing to pass {name} into the sandbox")
        env[name] = value
    return env


def _traversable(path: Path, uid: int, gid: int) -> bool:
    st = path.stat()
    if st.st_uid == uid:
        return bool(st.st_mode & 0o100)
    if st.st_gid == gid:
        return bool(st.st_mode & 0o010)
    return bool(st.st_mode & 0o001)


def plan_mounts(readable: Iterable[Path], workdir: Path, uid: int, gid: int
                ) -> tuple[list[str], list[str], list[str]]:
    """(tmpfs over world-writable dirs, ancestors to hide, dirs to bind back readable)."""
    tmpfs = [d for d in _WORLD_WRITABLE if os.path.isdir(d) and not os.path.islink(d)]
    hide: set[str] = set()
    binds: list[str] = []
    for path in [*(p.resolve() for p in readable), workdir.resolve()]:
        for ancestor in reversed(path.parents):
            if str(ancestor) == "/":
                continue
            if str(ancestor) in tmpfs or not _traversable(ancestor, uid, gid):
                if str(ancestor) not in tmpfs:
                    hide.add(str(ancestor))
                break
        if path != workdir.resolve():
            binds.append(str(path))
    hidden = sorted(h for h in hide if not any(h.startswith(t + "/") for t in tmpfs))
    return tmpfs, hidden, sorted(set(binds))


class Sandbox:
    """Runs commands under :class:`Limits`; `readable` are the directories they may read."""

    def __init__(self, limits: Limits | None = None, readable: Iterable[str | Path] = (),
                 path_dirs: Iterable[str] = (), isolation: Isolation | None = None) -> None:
        self.limits = limits or Limits()
        self.readable = [Path(p) for p in readable if Path(p).exists()]
        self.path_dirs = list(path_dirs)
        self.isolation = isolation or detect_isolation()

    def run(self, argv: list[str], files: Path | Mapping[str, bytes] | None = None,
            limits: Limits | None = None, env: Mapping[str, str] | None = None,
            collect: Callable[[Path], None] | None = None) -> SandboxResult:
        """Run `argv` in a fresh directory holding `files`; `collect` may read it after."""
        limits = limits or self.limits
        with tempfile.TemporaryDirectory(prefix="binloop-sbx-") as tmp:
            control, workdir = Path(tmp) / "control", Path(tmp) / "work"
            control.mkdir()
            _populate(workdir, files)
            result = self._run_in(argv, workdir, control, limits,
                                  scrub_env(env, self.path_dirs, str(workdir)))
            if collect is not None:
                collect(workdir)
            return result

    def _run_in(self, argv: list[str], workdir: Path, control: Path, limits: Limits,
                env: dict[str, str]) -> SandboxResult:
        out_path, err_path = control / "stdout", control / "stderr"
        if self.isolation.namespaces:
            launch, preexec = self._namespaced(argv, workdir, control, limits, env), None
        else:
            launch, preexec = argv, _fallback_preexec(limits)
        started = time.perf_counter()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(launch, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, start_new_session=True,
                                    preexec_fn=preexec, close_fds=True)
            timed_out = _wait(proc, limits.wall_s)
        duration = time.perf_counter() - started
        keep = limits.output_kb * 1024
        return SandboxResult(argv, proc.returncode, timed_out, duration,
                             _tail(out_path, keep), _tail(err_path, keep),
                             self.isolation.describe())

    def _namespaced(self, argv: list[str], workdir: Path, control: Path, limits: Limits,
                    env: dict[str, str]) -> list[str]:
        _chown_tree(workdir, SANDBOX_UID, SANDBOX_GID)
        tmpfs, hide, readable = plan_mounts(self.readable, workdir, SANDBOX_UID, SANDBOX_GID)
        rlimits = limits.rlimits()
        rlimits["RLIMIT_NPROC"] = (limits.processes, limits.processes)
        spec = {"workdir": str(workdir.resolve()), "readable": readable, "hide": hide,
                "tmpfs": tmpfs, "tmpfs_bytes": limits.file_mb << 20, "rlimits": rlimits,
                "uid": SANDBOX_UID, "gid": SANDBOX_GID, "argv": argv, "env": env,
                "nice": limits.nice}
        spec_path = control / "spec.json"
        spec_path.write_bytes(orjson.dumps(spec))
        assert self.isolation.unshare is not None
        return [self.isolation.unshare, *UNSHARE_FLAGS, "--", sys.executable, "-I", "-S",
                str(_INIT), str(spec_path)]


def _populate(workdir: Path, files: Path | Mapping[str, bytes] | None) -> None:
    if isinstance(files, Path):
        shutil.copytree(files, workdir, symlinks=False)
        return
    workdir.mkdir()
    for rel, data in (files or {}).items():
        target = workdir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    os.chown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)


def _fallback_preexec(limits: Limits) -> Callable[[], None]:
    rlimits = limits.rlimits()

    def preexec() -> None:
        os.nice(limits.nice)
        for name, value in rlimits.items():
            resource.setrlimit(getattr(resource, name), value)

    return preexec


def _wait(proc: subprocess.Popen[bytes], wall_s: float) -> bool:
    try:
        proc.wait(timeout=wall_s)
        return False
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return True


def _tail(path: Path, keep: int) -> str:
    size = path.stat().st_size
    with open(path, "rb") as handle:
        handle.seek(max(0, size - keep))
        data = handle.read()
    prefix = f"[...{size - keep} bytes cut]\n" if size > keep else ""
    return prefix + data.decode("utf-8", errors="replace")
