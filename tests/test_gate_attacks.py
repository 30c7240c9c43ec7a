"""Hostile designers against the real CLI (`binloop build --designer module:factory`),
as the current user and, when the suite runs as root, as `nobody` (tests/nonroot.py), for
both targets: a Python tool and a TypeScript plugin under node (as `nobody`, the
TypeScript toolchain is a read-only copy `nobody` can read: `nonroot_toolchain`).

Each test fails if the hostile action succeeds: a tool gated without its cases being
judged, a secret read, a file written outside the sandbox, a connection made, a process
left running, more memory or disk than the caps.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline_runner.sandbox import detect_isolation
from tests.nonroot import (
    REPO,
    NonRootUnavailable,
    as_user,
    binloop_cli,
    is_root,
    nonroot_toolchain,
    shared_dir,
)
from tests.test_runner import payment_event

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not detect_isolation().complete and os.environ.get("BINLOOP_REQUIRE_SANDBOX") != "1",
    reason="sandbox incomplete here: " + "; ".join(detect_isolation().missing))]
USERS = ["current", "nobody"] if is_root() else ["current"]


@pytest.fixture(params=USERS)
def user(request: pytest.FixtureRequest) -> str:
    if request.param == "nobody":
        try:
            binloop_cli(True)
        except NonRootUnavailable as exc:
            pytest.fail(f"cannot run the non-root half: {exc}")
    return str(request.param)


def build(designer: str, user: str, extra: list[str] = (),  # type: ignore[assignment]
          env: dict[str, str] | None = None, target: str = "python"
          ) -> tuple[int, dict[str, Any], dict[str, Any], Path]:
    """(exit code, result summary, audit record, library) of one real CLI build."""
    work = shared_dir("binloop-attack-")
    event = work / "event.json"
    event.write_bytes(orjson.dumps(payment_event()))
    if is_root():
        os.chown(event, 65534, 65534)
    library = work / "library"
    unprivileged = user == "nobody"
    spec = designer if designer == "offline" else f"tests.designers:{designer}"
    argv = as_user([*binloop_cli(unprivileged), "build", "--library", str(library), "--event",
                    str(event), "--designer", spec, "--target", target, "--json", *extra],
                   unprivileged)
    run_env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "PYTHONPATH": str(REPO),
               "BINLOOP_SECRET_API_KEY": "sk-BINLOOP_SECRET-0123456789abcdef", **(env or {})}
    if target == "typescript":
        run_env["BINLOOP_TOOLCHAIN_DIR"] = str(toolchain_for(user))
    done = subprocess.run(argv, cwd=REPO, env=run_env, capture_output=True, text=True,
                          timeout=600)
    try:
        summary = orjson.loads(done.stdout)
    except orjson.JSONDecodeError:
        raise AssertionError(f"no JSON result ({done.returncode}): {done.stdout[-800:]}\n"
                             f"{done.stderr[-2000:]}") from None
    audit = orjson.loads(Path(summary["audit"]).read_bytes())
    return done.returncode, summary, audit, library


def toolchain_for(user: str) -> Path:
    """The TypeScript toolchain cache `user` can read (skips where there is no node)."""
    from pipeline_runner.toolchain import ToolchainUnavailable, toolchain_dir

    try:
        return nonroot_toolchain() if user == "nobody" else toolchain_dir()
    except ToolchainUnavailable as exc:
        pytest.skip(f"TypeScript target unavailable: {exc}")


TARGETS = ["python", "typescript"]


@pytest.mark.parametrize("target", TARGETS)
def test_an_honest_build_passes_in_the_sandbox(user: str, target: str) -> None:
    code, summary, audit, _ = build("offline", user, target=target)
    assert code == 0 and summary["outcome"] == "gated", summary["reason"]
    assert audit["sandbox"]["mechanism"] == "bubblewrap user namespaces"
    assert audit["sandbox"]["mode"] == "strict" and audit["sandbox"]["missing"] == []
    assert audit["sandbox"]["runs_as_uid"] != 0
    assert audit["sandbox"]["memory"].startswith("rlimit_as+nproc+rss_watchdog")


@pytest.mark.parametrize("attack", ["exit_on_import", "forged_verdict", "exit_mid_run",
                                    "hang_mid_run"])
def test_a_tool_that_cheats_the_test_stage_rolls_back(user: str, attack: str) -> None:
    code, summary, audit, library = build(attack, user, ["--test-timeout", "20s"])
    assert code == 2 and summary["outcome"] == "rolled_back", summary
    failed = [s for s in audit["stages"] if s["outcome"] != "ok"]
    assert [s["stage"] for s in failed] == ["test"], summary["reason"]
    reason = summary["reason"]
    expected = {"exit_on_import": "before it was ready", "forged_verdict": "ready",
                "exit_mid_run": "exited", "hang_mid_run": "timed out"}[attack]
    assert expected in reason, reason
    assert "replies judged" in reason
    assert not (library / "manifest.json").exists()


@pytest.mark.parametrize("attack", ["exit_on_import", "exit_mid_run", "hang_mid_run"])
def test_a_plugin_that_cheats_the_test_stage_rolls_back(user: str, attack: str) -> None:
    code, summary, audit, _library = build(attack, user, ["--test-timeout", "20s"],
                                          target="typescript")
    assert code == 2 and summary["outcome"] == "rolled_back", summary
    assert [s["stage"] for s in audit["stages"] if s["outcome"] != "ok"] == ["test"]
    assert "replies judged" in summary["reason"]


def test_a_do_nothing_tool_with_a_made_up_reproduces_rolls_back(user: str) -> None:
    code, summary, _audit, library = build("do_nothing", user)
    assert code == 2 and summary["outcome"] == "rolled_back"
    assert "not an evidence record of this event" in summary["reason"]
    assert not (library / "manifest.json").exists()


def test_cases_a_null_tool_passes_roll_back(user: str) -> None:
    code, summary, _audit, library = build("null_passes", user)
    assert code == 2 and summary["outcome"] == "rolled_back"
    assert "acceptance cases do not distinguish the tool from doing nothing" in summary["reason"]
    assert not (library / "manifest.json").exists()


@pytest.mark.parametrize("target", TARGETS)
def test_the_parent_environment_is_invisible(user: str, target: str) -> None:
    _code, _summary, audit, _ = build("reads_env", user, target=target)
    assert "HOSTILE env found []" in stage_output(audit)  # the attack ran, and found nothing
    assert "sk-BINLOOP_SECRET" not in orjson.dumps(audit).decode()


@pytest.mark.parametrize("target", TARGETS)
def test_no_write_outside_and_no_loopback(user: str, target: str,
                                          listener: tuple[int, list[bytes]]) -> None:
    port, got = listener
    code, summary, audit, library = build("escapes", user, env={"BINLOOP_TEST_PORT": str(port)},
                                          target=target)
    assert code == 0, summary["reason"]  # contained, the honest part of the tool still works
    seen = stage_output(audit)
    assert "HOSTILE wrote /tmp/binloop-pwned" in seen  # (its own private /tmp: allowed)
    assert "HOSTILE connected" not in seen
    for outside in (library, REPO):
        # a checkout under /tmp is in the sandbox's private /tmp (bwrap makes the parents
        # of what it binds there): writing beside it is allowed; the host copy is checked below
        if not (outside == REPO and REPO.is_relative_to("/tmp")):
            assert f"HOSTILE wrote {outside}" not in seen
    assert got == []
    for path in (library / "pwned", library / "tools" / "pwned", REPO / "pwned",
                 Path("/tmp/binloop-pwned")):
        assert not path.exists(), path


def stage_output(audit: dict[str, Any]) -> str:
    """What the tool's process wrote during the test stage (its stderr, in the audit)."""
    stages = [s for s in audit["stages"] if s["stage"] == "test"]
    assert stages, [(s["stage"], s["reason"]) for s in audit["stages"]]
    return "\n".join(step["output"] for step in stages[0]["detail"].get("steps", []))


def _marked(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
            except OSError:
                pass
    return found


@pytest.mark.parametrize(("target", "attack"), [("python", "fork_bomb"), ("python", "daemon"),
                                                ("typescript", "daemon")])
def test_nothing_survives_the_build(user: str, target: str, attack: str) -> None:
    marker = f"binloop-{attack}-{os.getpid()}-{time.monotonic_ns()}"
    _code, _summary, audit, _ = build(attack, user, ["--sandbox-processes", "64"],
                                    env={"BINLOOP_TEST_MARKER": marker}, target=target)
    if target == "typescript":  # the daemon was started (so the check below means something)
        assert "HOSTILE spawned a daemon" in stage_output(audit)
    deadline = time.monotonic() + 10  # (killed processes may take a moment to go)
    while _marked(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _marked(marker) == [], "processes survived the build"
    if attack == "fork_bomb":
        text = stage_output(audit)
        if "HOSTILE forked " in text:  # (or the bomb took the worker down with it)
            assert int(text.split("HOSTILE forked ")[1].split()[0]) < 64


def test_memory_is_capped_for_the_whole_tree(user: str) -> None:
    code, summary, audit, _ = build("memory_hog", user, ["--sandbox-memory-mb", "1024"])
    assert "HOSTILE all children allocated" not in stage_output(audit)
    assert code == 2 and "memory limit" in summary["reason"], summary["reason"]


@pytest.mark.parametrize("target", TARGETS)
def test_disk_is_capped(user: str, target: str) -> None:
    _code, _summary, audit, _ = build("disk_filler", user, target=target)
    text = stage_output(audit)
    assert "HOSTILE wrote" in text, text[-1500:]
    written = int(text.split("HOSTILE wrote ")[1].split()[0])
    assert written * 60 <= 64, f"{written} x 60 MB written past a 64 MB cap"


def test_a_build_killed_with_9_leaves_nothing_behind(user: str) -> None:
    """kill -9 of `binloop build` while the tool runs: its sandbox dies with it (bwrap
    --die-with-parent, the pid namespace with bwrap) and nothing is left in /tmp."""
    import signal

    marker = f"binloop-killed-{os.getpid()}-{time.monotonic_ns()}"
    work = shared_dir("binloop-attack-")
    private_tmp = work / "tmp"  # the build's temp dir: other sessions' files stay out of it
    private_tmp.mkdir()
    if is_root():
        os.chown(private_tmp, 65534, 65534)
    event = work / "event.json"
    event.write_bytes(orjson.dumps(payment_event()))
    unprivileged = user == "nobody"
    argv = as_user([*binloop_cli(unprivileged), "build", "--library", str(work / "library"),
                    "--event", str(event), "--designer", "tests.designers:daemon_then_hang"],
                   unprivileged)
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={"PATH": "/usr/bin:/bin", "HOME": str(work),
                                 "TMPDIR": str(private_tmp), "PYTHONPATH": str(REPO),
                                 "BINLOOP_TEST_MARKER": marker})
    deadline = time.monotonic() + 120
    while not _marked(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _marked(marker), "the hostile tool never started"
    os.kill(proc.pid, signal.SIGKILL)  # (setpriv execs: this is the CLI itself)
    proc.wait(10)
    deadline = time.monotonic() + 10
    while _marked(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _marked(marker) == [], "sandboxed processes outlived the killed build"
    assert list(private_tmp.glob("binloop-sbx-*")) == []
