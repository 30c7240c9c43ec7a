"""Inputs to the build runner are checked (issue 11, point 6) and the offline designer
builds from evidence whose errors differ only by a suffix (issue 11's last bullet).

Attacks: an `event_id` that is a path, tool names with NUL and control characters,
concurrent builds into one library, near-duplicate evidence. Each test fails if the
hostile input succeeds (a file outside the library, a crash, an orphan directory).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from binloop.core.errors import EX_DATAERR
from binloop.core.events import dumps_event
from binloop.library.store import ToolLibrary
from pipeline_runner.event_input import InvalidEvent
from pipeline_runner.queue import BuildQueue
from pipeline_runner.rearm import RearmScheduler
from pipeline_runner.runner import BuildResult
from tests.buildkit import event_of, failing_calls, runner_for
from tests.nonroot import as_user, binloop_cli, is_root, shared_dir

REPO = Path(__file__).resolve().parents[1]
PAYMENT = [({"payment_methods": [{"payment_id": "gift_card_1", "amount": 10}]},
            "Error: payment amount does not add up, total price is 20, but paid 10")] * 2
TRAVERSALS = ["/../../../..", "../../../../tmp/x", "a" * 63 + "/", "A" * 64, "\x00" * 64]


def payment_event(tool: str = "book_reservation") -> dict[str, Any]:
    return dict(event_of(failing_calls(tool, "ARGS.payment_total_mismatch", PAYMENT)))


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "binloop.cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def tree(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


@pytest.mark.parametrize("event_id", TRAVERSALS)
def test_an_event_id_that_is_a_path_writes_nothing_anywhere(tmp_path: Path,
                                                            event_id: str) -> None:
    """The CLI refuses it (exit 1, one line); the runner, the queue and the re-arm
    scheduler refuse it too, before any file name is made from it."""
    work = tmp_path / "work"
    library = work / "a" / "b" / "c" / "lib"
    library.mkdir(parents=True)
    event = {**payment_event(), "event_id": event_id}
    event_file = tmp_path / "event.json"
    event_file.write_bytes(orjson.dumps(event))
    before = tree(tmp_path)
    run = cli("build", "--event", str(event_file), "--library", str(library))
    assert run.returncode == EX_DATAERR, run.stderr
    assert "event_id" in run.stderr and "64 lower-case hex" in run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    with pytest.raises(InvalidEvent, match="64 lower-case hex"):
        runner_for(library).build(event)  # type: ignore[arg-type]
    queue = BuildQueue(work / "queue", lambda e: BuildResult("", "", "gated"))
    assert queue.submit(event) == "invalid"
    rearms = RearmScheduler(work / "rearm", lambda record: None)
    with pytest.raises(ValueError, match="64 lower-case hex"):
        rearms.schedule(event, BuildResult("", event_id, "rolled_back"))  # type: ignore[arg-type]
    after = tree(tmp_path)
    assert after - before <= {"work/queue", "work/queue/pending", "work/queue/done",
                              "work/rearm"}, sorted(after - before)
    assert not list(tmp_path.rglob("*.json")) or {p.name for p in tmp_path.rglob("*.json")} == {
        "event.json"}


def test_a_build_id_that_is_a_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidEvent, match="build id"):
        runner_for(tmp_path / "lib").build(payment_event(), build_id="../../../escape")  # type: ignore[arg-type]
    assert not (tmp_path / "escape.json").exists() and not list(tmp_path.rglob("*.json"))


def test_a_tool_name_with_nul_and_control_characters_builds(tmp_path: Path) -> None:
    """The name is data: kept byte for byte in the manifest and the audit, escaped in
    the generated source (which compiles), never part of a path or identifier."""
    hostile = "book\x00flight\n# injected\r\u2028\x1b[31m/../../etc"
    result = runner_for(tmp_path / "lib").build(payment_event(hostile))  # type: ignore[arg-type]
    assert result.outcome == "gated", result.reason
    assert result.tool is not None
    name = result.tool["name"]
    assert name.isidentifier() and name.isascii()
    assert result.tool["path"] == f"tools/{name}/v1"
    library = ToolLibrary(tmp_path / "lib")
    assert library.read()["tools"][name]["answers"]["tool"] == hostile
    source = (library.root / result.tool["path"] / "tool.py").read_text()
    compile(source, "tool.py", "exec")
    assert "\x00" not in source and "\x1b" not in source and "\u2028" not in source
    assert "\n# injected" not in source.replace("\n# # injected", "")
    for path in library.root.rglob("*"):
        assert "\x00" not in path.name and path.resolve().is_relative_to(library.root)


def test_errors_that_differ_only_by_a_suffix_build(tmp_path: Path) -> None:
    """Two errors of one kind, the second with a suffix: one rule, a gated tool (the
    offline designer used to roll back with "acceptance case names must be unique")."""
    error = "Error: gift card payments are not accepted for this fare"
    calls = [({"payment_id": "gift_card_7"}, error),
             ({"payment_id": "gift_card_9"}, error + " (code 2)"),
             ({"payment_id": "gift_card_11"}, error + " (code 2) (code 2)")]
    event = event_of(failing_calls("book_reservation", "ARGS.payment_method", calls))
    result = runner_for(tmp_path / "lib").build(event)
    assert result.outcome == "gated", result.reason
    assert result.tool is not None
    cases_path = tmp_path / "lib" / result.tool["path"] / "acceptance" / "cases.json"
    names = [c["name"] for c in orjson.loads(cases_path.read_bytes())]
    assert len(names) == len(set(names)) and "flags_failure_2" in names


def test_repeated_case_names_are_numbered() -> None:
    from pipeline_runner.design import AcceptanceCase, Step
    from pipeline_runner.designers.offline.plans import unique_case_names

    cases = [AcceptanceCase(n, [Step({}, {"ok": True})]) for n in ("a", "a", "b", "a", "a_2")]
    assert [c.name for c in unique_case_names(cases)] == ["a", "a_2", "b", "a_3", "a_2_2"]


# -- concurrent builds into one library ------------------------------------------------
SAME_NAME_TOOLS = ["book flight", "book-flight", "Book_Flight", "book\x00flight"]


def _library_shape(root: Path) -> dict[str, Any]:
    """What must not depend on how the builds were interleaved: the tools, what each
    answers, their status and version numbers, the version directories on disk."""
    manifest = ToolLibrary(root).read()
    tools = {name: (entry["version"], entry["status"]) for name, entry in
             manifest["tools"].items()}
    answered = sorted(entry["answers"]["tool"] for entry in manifest["tools"].values())
    dirs = sorted(p.relative_to(root).as_posix() for p in (root / "tools").glob("*/v*"))
    return {"tools": tools, "answered": answered, "dirs": dirs,
            "manifest_version": manifest["version"]}


def _events_file(tmp_path: Path) -> list[Path]:
    paths = []
    for number, tool in enumerate(SAME_NAME_TOOLS):
        path = tmp_path / f"event{number}.json"
        path.write_bytes(dumps_event(payment_event(tool)))  # type: ignore[arg-type]
        if is_root():
            os.chown(path, 65534, 65534)  # (readable by `nobody` too)
        paths.append(path)
    return paths


NONROOT_USERS = ["current", "nobody"] if is_root() else ["current"]


def _build_as(user: str, event: Path, library: Path) -> subprocess.Popen[bytes]:
    """`binloop build` of `event` into `library`, as `user` (tests/nonroot.py)."""
    unprivileged = user == "nobody"
    argv = as_user([*binloop_cli(unprivileged), "build", "--event", str(event), "--library",
                    str(library)], unprivileged)
    env = ({"PATH": "/usr/bin:/bin", "HOME": str(library.parent), "PYTHONPATH": str(REPO)}
           if unprivileged else {**os.environ, "PYTHONPATH": str(REPO)})
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
                            env=env)


@pytest.mark.slow
@pytest.mark.parametrize("user", NONROOT_USERS)
def test_four_concurrent_builds_give_the_library_four_serial_ones_give(user: str) -> None:
    """Four `binloop build` processes at once, for four keys whose tools get the same
    name, twice over; then the same four one after another. Every build gates, no
    process crashes, no orphan version directory, and the libraries are alike. As root
    and as `nobody` (the library lock must hold for an unprivileged user too)."""
    work = shared_dir("binloop-concurrent-")
    try:
        events = _events_file(work)
        serial = work / "serial"
        for path in events:
            proc = _build_as(user, path, serial)
            _, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, err.decode()
        expected = _library_shape(serial)
        assert len(expected["tools"]) == 4 and expected["manifest_version"] == 4
        for round_number in range(2):
            library = work / f"concurrent{round_number}"
            procs = [_build_as(user, path, library) for path in events]
            outputs = [proc.communicate(timeout=600) for proc in procs]
            for proc, (_, err) in zip(procs, outputs, strict=True):
                assert proc.returncode == 0, err.decode()
            assert _library_shape(library) == expected
            assert ToolLibrary(library).recover() == []
            if user == "nobody":
                assert library.stat().st_uid == 65534  # really built by `nobody`
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.slow
def test_four_concurrent_builds_of_one_event_gate_one_tool(tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_bytes(dumps_event(payment_event()))  # type: ignore[arg-type]
    library = tmp_path / "lib"
    procs = [subprocess.Popen(
        [sys.executable, "-m", "binloop.cli", "build", "--event", str(event), "--library",
         str(library), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)}) for _ in range(4)]
    results = [orjson.loads(proc.communicate(timeout=600)[0]) for proc in procs]
    assert all(proc.returncode == 0 for proc in procs)
    assert sorted(r["reason"] for r in results) == ["", *["already built from this event"] * 3]
    shape = _library_shape(library)
    assert len(shape["tools"]) == 1 and shape["dirs"] == [f"tools/{next(iter(shape['tools']))}/v1"]


# -- the non-root half: the real CLI as `nobody` (tests/nonroot.py, issue 11's fixture) --


@pytest.mark.slow
@pytest.mark.parametrize("user", NONROOT_USERS)
def test_hostile_names_and_ids_through_the_cli_as_each_user(user: str) -> None:
    """`binloop build` run by root and by `nobody`: an event_id that is a path is refused
    and writes nothing; a tool name with NUL and control characters builds."""
    unprivileged = user == "nobody"
    work = shared_dir("binloop-c2-inputs-")
    try:
        library = work / "lib"
        bad = work / "bad.json"
        bad.write_bytes(orjson.dumps({**payment_event(), "event_id": "/../../../.."}))
        good = work / "good.json"
        good.write_bytes(dumps_event(payment_event("book\x00flight\n#x")))  # type: ignore[arg-type]
        if is_root():
            os.chown(bad, 65534, 65534)
            os.chown(good, 65534, 65534)
        before = tree(work)
        cli_argv = binloop_cli(unprivileged)
        refused = subprocess.run(as_user([*cli_argv, "build", "--event", str(bad), "--library",
                                          str(library)], unprivileged),
                                 capture_output=True, text=True, timeout=300, cwd=work)
        assert refused.returncode == EX_DATAERR, refused.stderr
        assert "64 lower-case hex" in refused.stderr, refused.stderr
        assert tree(work) == before
        built = subprocess.run(as_user([*cli_argv, "build", "--event", str(good), "--library",
                                        str(library), "--json"], unprivileged),
                               capture_output=True, text=True, timeout=600, cwd=work)
        assert built.returncode == 0, built.stdout + built.stderr
        result = orjson.loads(built.stdout)
        assert result["outcome"] == "gated" and result["tool"]["answers"]["tool"] == \
            "book\x00flight\n#x"
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.parametrize("change", [
    {"name": "../../escape"}, {"path": "tools/../../../etc/v1"}, {"path": "/etc/passwd"},
    {"path": "tools/other/v1"}, {"name": "x\x00y"}])
def test_a_tampered_manifest_is_refused_before_any_path_is_made(tmp_path: Path,
                                                                change: dict[str, str]) -> None:
    from binloop.library.manifest import ManifestError

    result = runner_for(tmp_path / "lib").build(payment_event())  # type: ignore[arg-type]
    assert result.outcome == "gated" and result.tool is not None
    path = tmp_path / "lib" / "manifest.json"
    manifest = orjson.loads(path.read_bytes())
    [entry] = manifest["tools"].values()
    if "name" in change:
        entry["name"] = change["name"]
        manifest["tools"] = {change["name"]: entry}
    else:
        entry["path"] = change["path"]
    path.write_bytes(orjson.dumps(manifest))
    with pytest.raises(ManifestError):
        ToolLibrary(tmp_path / "lib").read()
