"""As root: give bwrap a view it can reach as `nobody`, drop to `nobody`, exec bwrap.

Run as `python -I -S rootlaunch.py SPEC_JSON` (standard library only). Root must not
start the sandbox itself: the kernel does not apply RLIMIT_NPROC to processes whose real
uid is root, even inside a user namespace. But `nobody` cannot traverse /root (0700),
where this interpreter and caches may live. So, in a private mount namespace that only
this process (and then bwrap) sees: open each needed directory, mount a small tmpfs over
each ancestor `nobody` cannot traverse, bind the directories back at their own paths,
then drop every privilege and exec bwrap as `nobody` (bwrap then builds the sandbox's own
view from these paths). Nothing is written to the host's filesystem.
"""

import ctypes
import json
import os
import sys

CLONE_NEWNS = 0x00020000
MS_BIND, MS_REC, MS_PRIVATE, MS_NOSUID, MS_NODEV = 4096, 16384, 1 << 18, 2, 4
PR_SET_NO_NEW_PRIVS = 38
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        print(f"sandbox launch: {what}: {os.strerror(errno)}", file=sys.stderr)
        sys.exit(125)


def _enc(text: "str | None") -> "bytes | None":
    return None if text is None else text.encode()


def _mount(source: "str | None", target: str, fstype: "str | None", flags: int,
           data: "str | None" = None) -> None:
    enc = _enc
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)),
           f"mount {target}")


def main() -> None:
    spec = json.loads(sys.argv[1])
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    # (opened in the new namespace: a bind source must be a mount of the caller's own)
    fds = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in spec["binds"]}
    for path in spec["hide"]:
        _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
    for path, fd in fds.items():
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        os.close(fd)
    os.setgroups([])
    os.setresgid(spec["gid"], spec["gid"], spec["gid"])
    os.setresuid(spec["uid"], spec["uid"], spec["uid"])
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    os.execv(spec["argv"][0], spec["argv"])


if __name__ == "__main__":
    main()
