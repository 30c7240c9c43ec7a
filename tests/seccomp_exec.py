"""Run a command under a seccomp profile in the Docker/OCI JSON format, loaded with
libseccomp (ctypes, stdlib only, so that Debian's /usr/bin/python3 can run it as an
unprivileged user): `python3 seccomp_exec.py PROFILE.json [--drop NAME,...] -- CMD...`.

This is how a container runtime applies a `Localhost` profile (it too hands the JSON
to libseccomp); it lets the tests check here, without a cluster, that the profile the
StatefulSet names lets the build sandbox start and refuses calls outside it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import sys

ACT_ALLOW = 0x7FFF0000
ACT_ERRNO = 0x00050000
CMP = {"SCMP_CMP_NE": 1, "SCMP_CMP_LT": 2, "SCMP_CMP_LE": 3, "SCMP_CMP_EQ": 4,
       "SCMP_CMP_GE": 5, "SCMP_CMP_GT": 6, "SCMP_CMP_MASKED_EQ": 7}
ARCH = {"SCMP_ARCH_X86_64": b"x86_64", "SCMP_ARCH_X86": b"x86", "SCMP_ARCH_X32": b"x32",
        "SCMP_ARCH_AARCH64": b"aarch64", "SCMP_ARCH_ARM": b"arm"}


class ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


def library() -> ctypes.CDLL:
    lib = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2", use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_arch_resolve_name.restype = ctypes.c_uint32
    lib.seccomp_arch_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_arch_native.restype = ctypes.c_uint32
    lib.seccomp_arch_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(ArgCmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    return lib


def action(name: str, errno_ret: int) -> int:
    if name == "SCMP_ACT_ALLOW":
        return ACT_ALLOW
    if name == "SCMP_ACT_ERRNO":
        return ACT_ERRNO | (errno_ret & 0xFFFF)
    raise ValueError(f"unsupported action {name}")


def unknown_names(profile: dict[str, object]) -> list[str]:
    """Syscall names libseccomp does not know (a typo in the profile)."""
    lib = library()
    return [name for rule in profile["syscalls"] for name in rule["names"]  # type: ignore[attr-defined]
            if lib.seccomp_syscall_resolve_name(name.encode()) == -1]


def load(profile: dict[str, object], drop: set[str]) -> None:
    lib = library()
    default_errno = int(profile.get("defaultErrnoRet", 1))  # type: ignore[arg-type]
    ctx = lib.seccomp_init(action(str(profile["defaultAction"]), default_errno))
    if not ctx:
        raise OSError("seccomp_init failed")
    native = lib.seccomp_arch_native()
    for entry in profile.get("archMap", []):  # type: ignore[attr-defined]
        for arch in [entry["architecture"], *entry.get("subArchitectures", [])]:
            token = lib.seccomp_arch_resolve_name(ARCH[arch])
            if token and token != native:
                lib.seccomp_arch_add(ctx, token)  # fails harmlessly for foreign arches
    for rule in profile["syscalls"]:  # type: ignore[attr-defined]
        act = action(rule["action"], int(rule.get("errnoRet", default_errno)))
        args = rule.get("args") or []
        array = (ArgCmp * max(1, len(args)))(*[ArgCmp(a["index"], CMP[a["op"]], a["value"],
                                                     a.get("valueTwo", 0)) for a in args])
        for name in rule["names"]:
            if name in drop:
                continue
            number = lib.seccomp_syscall_resolve_name(name.encode())
            if number == -1:
                raise ValueError(f"unknown syscall {name}")
            rc = lib.seccomp_rule_add_array(ctx, act, number, len(args), array)
            if rc < 0 and rc != -17:  # EEXIST: the same rule twice
                raise OSError(-rc, f"seccomp_rule_add {name}: {os.strerror(-rc)}")
    rc = lib.seccomp_load(ctx)
    if rc < 0:
        raise OSError(-rc, f"seccomp_load: {os.strerror(-rc)}")


def main(argv: list[str]) -> int:
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]
    with open(options[0]) as handle:
        profile = json.load(handle)
    drop: set[str] = set()
    if len(options) > 2 and options[1] == "--drop":
        drop = set(options[2].split(","))
    load(profile, drop)
    os.execvp(command[0], command)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
