"""Runs inside the sandbox's new namespaces, as root, before the untrusted command.

Started as `python -I -S _init.py SPEC.json` by `unshare --net --mount --pid --fork
--kill-child --mount-proc`. It only uses the standard library (it must not import the
project), and it:

1. opens the directories the command may read (interpreters, toolchains) and the
   work directory, before anything is mounted over them;
2. mounts a fresh tmpfs over each world-writable directory (/tmp, /var/tmp, ...) and
   over each ancestor the sandbox user could not traverse (e.g. /root), so the
   command sees none of their content;
3. binds the readable directories back read-only and the work directory read-write;
4. forks: the child drops to the unprivileged uid/gid, sets the resource limits and
   execs the command; this process (pid 1 of the new pid namespace) reaps children
   and exits with the command's status. When it exits, the kernel kills every other
   process of the namespace.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import sys
from typing import Any

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1, 2, 4, 32, 4096, 16384, 1 << 18)
_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    def enc(text: str | None) -> bytes | None:
        return None if text is None else text.encode()
    if _libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} on {target}: {os.strerror(errno)}")


def _setup_mounts(spec: dict[str, Any]) -> None:
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    keep = spec["readable"] + [spec["workdir"]]
    fds = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in keep}
    for path in spec["tmpfs"]:
        _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV,
               f"mode=1777,size={spec['tmpfs_bytes']}")
    for path in spec["hide"]:
        _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for path in spec["readable"]:
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{fds[path]}", path, None, MS_BIND | MS_REC)
        _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)
    workdir = spec["workdir"]
    os.makedirs(workdir, exist_ok=True)
    _mount(f"/proc/self/fd/{fds[workdir]}", workdir, None, MS_BIND)
    for fd in fds.values():
        os.close(fd)


def _exec_command(spec: dict[str, Any]) -> None:
    os.chdir(spec["workdir"])
    os.nice(spec.get("nice", 0))
    for name, (soft, hard) in spec["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    os.setgroups([])
    os.setgid(spec["gid"])
    os.setuid(spec["uid"])
    os.execve(spec["argv"][0], spec["argv"], spec["env"])


def main() -> int:
    with open(sys.argv[1]) as handle:
        spec = json.load(handle)
    try:
        _setup_mounts(spec)
    except OSError as exc:
        print(f"sandbox setup failed: {exc}", file=sys.stderr)
        return 125
    child = os.fork()
    if child == 0:
        try:
            _exec_command(spec)
        except BaseException as exc:  # report, then leave the child
            print(f"sandbox exec failed: {exc}", file=sys.stderr)
        os._exit(126)
    status = 125
    while True:
        try:
            pid, wait_status = os.wait()
        except ChildProcessError:
            break
        if pid == child:
            code = os.waitstatus_to_exitcode(wait_status)
            status = code if code >= 0 else 128 - code
            break
    return status


if __name__ == "__main__":
    sys.exit(main())
