"""Run an untrusted command under bubblewrap, with limits on its whole process tree.

What a sandboxed command gets (see :mod:`pipeline_runner.sandbox.isolation` for how it
is probed, and docs/sandbox.md):

* new user, pid, network, mount, IPC and UTS namespaces; no network (its loopback is
  its own), nested user namespaces disabled, a new session, no capabilities;
* a read-only view of /usr, the interpreter/toolchain directories it is given
  (`readable`), its own files and binloop's trusted helper scripts (at /sandbox/work
  and /sandbox/binloop, both copied in from memory: the host's copy is never mounted,
  and nothing is written to the host's /tmp), a fresh /proc and /dev; nothing else of
  the host: no home directory, no project, no library, no other tool;
* one writable place, a private tmpfs at /tmp capped at `Limits.tmpfs_mb` (also HOME);
* an environment of PATH, HOME, TMPDIR, LANG and the caller's non-secret extras;
* RLIMIT_NPROC (counted inside its user namespace), RLIMIT_AS, RLIMIT_CPU, RLIMIT_FSIZE,
  RLIMIT_NOFILE per process; the total RSS and CPU time of the whole tree by the
  :mod:`watchdog`; a wall-clock limit; when the command ends, bwrap's init ends and the
  kernel kills every process left in the pid namespace (no daemon survives).

Unsafe mode (`--sandbox unsafe`, the user's explicit choice where bwrap cannot work)
runs the command directly, with the scrubbed environment and the per-process limits
only, in a directory `binloop-sbx-<pid>-*` of the system temp dir that a later run
removes if this process was killed before it could.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import IO, Final

import orjson

from binloop.core.config import default
from pipeline_runner.sandbox.isolation import SANDBOX_GID, Isolation
from pipeline_runner.sandbox.watchdog import Watchdog, Watched, kill_tree

WORK: Final = "/sandbox/work"
TRUSTED: Final = "/sandbox/binloop"
TMP: Final = "/tmp"
UNSAFE_PREFIX: Final = "binloop-sbx-"
_SECRET_ENV: Final = re.compile(r"(?i)(key|token|secret|passw|credential|auth|cookie|session)")
_BASE_PATH: Final = ("/usr/local/bin", "/usr/bin", "/bin")
_ROOT_LINKS: Final = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
Files = Path | Mapping[str, bytes] | None


@dataclass(frozen=True)
class Limits:
    """Resource caps of one sandboxed command (memory and CPU: of its whole tree)."""

    wall_s: float = default("test_timeout") / 1000
    cpu_s: int = default("test_timeout") // 1000
    memory_mb: int = default("sandbox_memory_mb")
    address_space_mb: int | None = None  # per process; default memory_mb
    tmpfs_mb: int = 64
    open_files: int = 256
    processes: int = default("sandbox_processes")
    output_kb: int = 64
    # Builds run beside the detector: at a lower CPU priority, so detection keeps its pace.
    nice: int = 10

    @classmethod
    def for_stage(cls, timeout_ms: int, memory_mb: int = default("sandbox_memory_mb"),
                  processes: int = default("sandbox_processes")) -> Limits:
        """The caps of a check or test stage whose wall-clock limit is `timeout_ms` (its
        CPU time may be as long: a stage that computes the whole time is not cut short)."""
        return cls(wall_s=timeout_ms / 1000, cpu_s=max(1, timeout_ms // 1000),
                   memory_mb=memory_mb, processes=processes)

    def rlimits(self) -> dict[str, int]:
        mib = 1 << 20
        return {"RLIMIT_CPU": self.cpu_s,
                "RLIMIT_AS": (self.address_space_mb or self.memory_mb) * mib,
                "RLIMIT_FSIZE": self.tmpfs_mb * mib, "RLIMIT_NOFILE": self.open_files,
                "RLIMIT_CORE": 0, "RLIMIT_NPROC": self.processes}

    def describe(self) -> dict[str, object]:
        return {"wall_s": self.wall_s, "cpu_s": self.cpu_s, "memory_mb": self.memory_mb,
                "address_space_mb": self.address_space_mb or self.memory_mb,
                "tmpfs_mb": self.tmpfs_mb, "processes": self.processes}


@dataclass
class SandboxResult:
    argv: list[str]
    returncode: int
    timed_out: bool
    duration_s: float
    stdout: str
    stderr: str
    isolation: dict[str, object] = field(default_factory=dict)
    limit: str = ""  # the watchdog's verdict, when it killed the tree

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.limit

    def reason(self) -> str:
        """One line saying why the command did not succeed."""
        if self.limit:
            return self.limit
        if self.timed_out:
            return f"timed out after {self.duration_s:.1f}s (wall-clock limit)"
        return exit_reason(self.returncode)

    def tail(self, chars: int = 2000) -> str:
        text = (self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr).strip()
        return text[-chars:]


def exit_reason(returncode: int) -> str:
    if returncode > 128:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(returncode - 128).name}"
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-returncode).name}"
    return f"exit code {returncode}"


def scrub_env(extra: Mapping[str, str] | None, path_dirs: Iterable[str],
              home: str = TMP) -> dict[str, str]:
    """The whole environment of a sandboxed command; secret-looking extras are refused."""
    env = {"PATH": ":".join([*path_dirs, *_BASE_PATH]), "HOME": home, "TMPDIR": home,
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONHASHSEED": "0", "NO_COLOR": "1"}
    for name, value in (extra or {}).items():
        if _SECRET_ENV.search(name):
            raise ValueError(f"refusing to pass {name} into the sandbox")
        env[name] = value
    return env


def trusted_script(name: str) -> bytes:
    """A helper script of this package that runs inside the sandbox (stdlib only)."""
    return resources.files("pipeline_runner.sandbox").joinpath(name).read_bytes()


def read_tree(root: Path) -> dict[str, bytes]:
    """Every regular file under `root` (symlinks are not followed), by relative path."""
    files: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            files[path.relative_to(root).as_posix()] = path.read_bytes()
    return files


def _traversable(path: Path, uid: int, gid: int) -> bool:
    st = path.stat()
    if st.st_uid == uid:
        return bool(st.st_mode & 0o100)
    if st.st_gid == gid:
        return bool(st.st_mode & 0o010)
    return bool(st.st_mode & 0o001)


def hidden_ancestors(paths: Iterable[Path], uid: int, gid: int) -> tuple[list[str], list[str]]:
    """(ancestors `uid` cannot traverse, the paths below them) for the root launcher."""
    hide: set[str] = set()
    binds: list[str] = []
    for path in paths:
        for ancestor in reversed(path.parents):
            if str(ancestor) != "/" and not _traversable(ancestor, uid, gid):
                hide.add(str(ancestor))
                binds.append(str(path))
                break
    return sorted(hide), sorted(set(binds))


class SandboxProcess:
    """A running sandboxed command (pipes as requested); :meth:`kill` ends its tree."""

    def __init__(self, proc: subprocess.Popen[bytes], watched: Watched, cleanup: list[object],
                 stderr: IO[bytes] | None, started: float) -> None:
        self.proc = proc
        self.watched = watched
        self._cleanup = cleanup
        self._stderr = stderr
        self.started = started
        self._closed = threading.Lock()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def limit(self) -> str:
        return self.watched.verdict

    def kill(self) -> None:
        kill_tree(self.proc.pid)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)

    def stderr_tail(self, keep: int = 4000) -> str:
        if self._stderr is None:
            return ""
        return _tail(self._stderr, keep)

    def close(self) -> int:
        """Kill what is left, reap, release the watchdog and temporary state."""
        if not self._closed.acquire(blocking=False):
            return self.proc.returncode if self.proc.returncode is not None else -9
        if self.proc.poll() is None:
            self.kill()
        code = self.proc.wait()
        Watchdog.get().unwatch(self.watched)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        for item in self._cleanup:
            if isinstance(item, int):
                with contextlib.suppress(OSError):
                    os.close(item)
            elif isinstance(item, Path):
                shutil.rmtree(item, ignore_errors=True)
        return code


class Sandbox:
    """Runs commands under :class:`Limits`; `readable` are the directories they may read."""

    def __init__(self, limits: Limits | None = None, readable: Iterable[str | Path] = (),
                 path_dirs: Iterable[str] = (), *, isolation: Isolation) -> None:
        self.limits = limits or Limits()
        # (the base interpreter is always there: limits_exec.py sets the limits inside)
        wanted = [*readable, sys.base_prefix]
        self.readable = sorted({Path(p).resolve() for p in wanted if Path(p).exists()})
        self.path_dirs = list(path_dirs)
        self.isolation = isolation  # (probe.require() says which; this module only obeys)
        if not self.isolation.confined:
            _remove_stale_dirs()

    @property
    def python(self) -> str:
        """The base interpreter (the venv's site-packages only where made readable)."""
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        candidate = Path(sys.base_prefix) / "bin" / version
        return str(candidate if candidate.exists() else Path(sys.executable).resolve())

    def run(self, argv: list[str], files: Files = None, limits: Limits | None = None,
            env: Mapping[str, str] | None = None,
            trusted: Mapping[str, bytes] | None = None) -> SandboxResult:
        """Run `argv` (cwd WORK holding `files`) to its end or its limits."""
        limits = limits or self.limits
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            started = time.perf_counter()
            process = self.spawn(argv, files, limits, env, trusted, stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=err)
            timed_out = False
            try:
                process.wait(limits.wall_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                code = process.close()
            keep = limits.output_kb * 1024
            return SandboxResult(argv, code, timed_out, time.perf_counter() - started,
                                 _tail(out, keep), _tail(err, keep), self.isolation.describe(),
                                 process.limit)

    def spawn(self, argv: list[str], files: Files = None, limits: Limits | None = None,
              env: Mapping[str, str] | None = None, trusted: Mapping[str, bytes] | None = None,
              stdin: int | IO[bytes] | None = subprocess.PIPE,
              stdout: int | IO[bytes] | None = subprocess.PIPE,
              stderr: int | IO[bytes] | None = None) -> SandboxProcess:
        """Start `argv` in the sandbox; the caller talks to it and must `close()` it."""
        limits = limits or self.limits
        tool_files = read_tree(files) if isinstance(files, Path) else dict(files or {})
        helpers = {"limits_exec.py": trusted_script("limits_exec.py"), **(trusted or {})}
        own_err: IO[bytes] | None = None
        if stderr is None:
            own_err = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the process)
            stderr = own_err
        started = time.perf_counter()
        cleanup: list[object] = []
        if self.isolation.confined:
            launch, pass_fds = self._bwrap_argv(argv, tool_files, helpers, limits, env, cleanup)
            cwd, popen_env = "/", {"PATH": "/usr/bin:/bin"}
        else:
            launch, cwd, popen_env = self._unsafe_argv(argv, tool_files, helpers, limits, env,
                                                       cleanup)
            pass_fds = ()
        try:
            proc = subprocess.Popen(launch, cwd=cwd, env=popen_env, stdin=stdin, stdout=stdout,
                                    stderr=stderr, pass_fds=pass_fds, close_fds=True,
                                    start_new_session=True)
        except OSError:
            for item in cleanup:
                if isinstance(item, int):
                    os.close(item)
            raise
        for fd in [i for i in cleanup if isinstance(i, int)]:
            os.close(fd)  # the child holds its copies (bwrap reads them at start)
        # (own_err stays readable after close(): its tail is read for reasons; it is an
        # unnamed file, closed when this handle is collected)
        cleanup = [i for i in cleanup if not isinstance(i, int)]

        watched = Watchdog.get().watch(proc.pid, limits.memory_mb << 20, float(limits.cpu_s),
                                       lambda: kill_tree(proc.pid))
        handle = SandboxProcess(proc, watched, cleanup, own_err or _as_file(stderr), started)
        return handle

    # -- launch lines ---------------------------------------------------------------------
    def _bwrap_argv(self, argv: list[str], files: dict[str, bytes], helpers: dict[str, bytes],
                    limits: Limits, env: Mapping[str, str] | None, fds: list[object]
                    ) -> tuple[list[str], tuple[int, ...]]:
        assert self.isolation.bwrap is not None
        line = [self.isolation.bwrap, "--unshare-all", "--unshare-user", "--disable-userns",
                "--die-with-parent", "--new-session", "--clearenv"]
        for name, value in scrub_env(env, self.path_dirs).items():
            line += ["--setenv", name, value]
        line += ["--ro-bind", "/usr", "/usr"]
        for link in _ROOT_LINKS:
            if os.path.islink(link):
                line += ["--symlink", os.readlink(link), link]
        if os.path.exists("/etc/ld.so.cache"):
            line += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
        readable = [p for p in self.readable if not p.is_relative_to("/usr")]
        # (a directory under /tmp, e.g. a venv there, is bound after the private tmpfs is
        # mounted over /tmp: bound before, the tmpfs would hide it)
        in_tmp = [p for p in readable if p != Path(TMP) and p.is_relative_to(TMP)]
        for path in readable:
            if path not in in_tmp:
                line += ["--ro-bind", str(path), str(path)]
        line += ["--proc", "/proc", "--dev", "/dev", "--perms", "0000", "--tmpfs", "/dev/shm",
                 "--remount-ro", "/dev/shm",
                 "--perms", "1777", "--size", str(limits.tmpfs_mb << 20), "--tmpfs", TMP]
        for path in in_tmp:
            line += ["--ro-bind", str(path), str(path)]
        line += ["--dir", WORK, "--dir", TRUSTED]
        pass_fds: list[int] = []
        for base, group in ((WORK, files), (TRUSTED, helpers)):
            for rel, data in sorted(group.items()):
                fd = _memfd(rel, data)
                fds.append(fd)
                pass_fds.append(fd)
                line += ["--ro-bind-data", str(fd), f"{base}/{rel}"]
        command = [self.python, "-I", "-S", f"{TRUSTED}/limits_exec.py",
                   orjson.dumps({"rlimits": limits.rlimits(), "nice": limits.nice}).decode(),
                   *argv]
        line += ["--remount-ro", "/", "--chdir", WORK, "--", *command]
        if self.isolation.drop_to is None:
            return line, tuple(pass_fds)
        hide, binds = hidden_ancestors(readable, self.isolation.drop_to, SANDBOX_GID)
        spec = {"hide": hide, "binds": binds, "uid": self.isolation.drop_to, "gid": SANDBOX_GID,
                "argv": line}
        launcher = str(Path(__file__).with_name("rootlaunch.py"))
        return [sys.executable, "-I", "-S", launcher, orjson.dumps(spec).decode()], \
            tuple(pass_fds)

    def _unsafe_argv(self, argv: list[str], files: dict[str, bytes], helpers: dict[str, bytes],
                     limits: Limits, env: Mapping[str, str] | None, cleanup: list[object]
                     ) -> tuple[list[str], str, dict[str, str]]:
        root = Path(tempfile.mkdtemp(prefix=f"{UNSAFE_PREFIX}{os.getpid()}-"))
        cleanup.append(root)
        for base, group in (("work", files), ("binloop", helpers), ("tmp", {})):
            (root / base).mkdir()
            for rel, data in group.items():
                target = root / base / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)

        def local(arg: str) -> str:
            for inside, outside in ((WORK, "work"), (TRUSTED, "binloop")):
                if arg == inside or arg.startswith(inside + "/"):
                    return str(root / outside) + arg[len(inside):]
            return arg

        command = [sys.executable, "-I", "-S", str(root / "binloop" / "limits_exec.py"),
                   orjson.dumps({"rlimits": {k: v for k, v in limits.rlimits().items()
                                             if k != "RLIMIT_NPROC"},
                                 "nice": limits.nice}).decode(), *map(local, argv)]
        return command, str(root / "work"), scrub_env(env, self.path_dirs, str(root / "tmp"))


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name.replace("/", "_")[:200], 0)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _as_file(stream: object) -> IO[bytes] | None:
    return stream if hasattr(stream, "seek") else None  # type: ignore[return-value]


def _tail(handle: IO[bytes], keep: int) -> str:
    handle.flush()
    size = handle.seek(0, os.SEEK_END)
    handle.seek(max(0, size - keep))
    data = handle.read()
    prefix = f"[...{size - keep} bytes cut]\n" if size > keep else ""
    return prefix + data.decode("utf-8", errors="replace")


def _remove_stale_dirs() -> None:
    """Unsafe-mode directories of processes that no longer exist (killed with -9)."""
    for path in Path(tempfile.gettempdir()).glob(f"{UNSAFE_PREFIX}*"):
        parts = path.name[len(UNSAFE_PREFIX):].split("-", 1)
        if not parts[0].isdigit():
            shutil.rmtree(path, ignore_errors=True)  # the old layout's directories
            continue
        try:
            os.kill(int(parts[0]), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:
            pass
