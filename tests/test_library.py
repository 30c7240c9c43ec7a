"""Tool library: atomic commit, revert, crash recovery, statuses, rollback, uses."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from binloop.core.fsutil import write_tree
from binloop.core.names import UnsafeName, check_relpath, check_tool_name, tool_name_for
from binloop.library import manifest as mf
from binloop.library.store import ToolLibrary
from pipeline_runner.lifecycle import Policy, apply_telemetry
from tests.buildkit import use

ANSWERS: mf.Answers = {"tool": "book", "failure_mode": "ARGS.total"}


def version_of(name: str, number: int, event_id: str = "e1") -> mf.ToolVersion:
    return {"version": number, "status": "probationary", "status_reason": "gated",
            "target": "python", "path": f"tools/{name}/v{number}", "entry": "tool.py",
            "files": {"tool.py": "x"}, "created": mf.iso_now(), "uses": {"ok": 0, "failed": 0},
            "recent_use_ids": [], "event_id": event_id, "arm_epoch": 0, "designer": "test",
            "description": "a tool"}


def gate(library: ToolLibrary, name: str = "book_check", event_id: str = "e1",
         body: bytes = b"print(1)\n") -> mf.Manifest:
    with library.staging(f"build-{event_id}") as staging:
        write_tree(staging / "tool", {"tool.py": body})
        commit = library.commit(staging / "tool", name, ANSWERS,
                                lambda n: version_of(name, n, event_id))
    return commit.manifest


def test_commit_writes_files_and_manifest(tmp_path: Path) -> None:
    library = ToolLibrary(tmp_path / "lib")
    manifest = gate(library)
    entry = manifest["tools"]["book_check"]
    assert (manifest["version"], entry["version"], entry["status"]) == (1, 1, "probationary")
    assert (library.root / "tools/book_check/v1/tool.py").read_bytes() == b"print(1)\n"
    assert library.read() == manifest
    assert not list((library.root / ".state/staging").iterdir())


def test_second_version_keeps_history_and_rollback_restores(tmp_path: Path) -> None:
    library = ToolLibrary(tmp_path / "lib")
    gate(library, event_id="e1")
    library.set_status("book_check", "quarantined", "regressed")
    second = gate(library, event_id="e2", body=b"print(2)\n")
    entry = second["tools"]["book_check"]
    assert entry["version"] == 2 and [v["version"] for v in entry["history"]] == [1]
    rolled = library.rollback("book_check")
    assert rolled is not None
    restored = rolled["tools"]["book_check"]
    assert restored["version"] == 1
    assert restored["status"] == "probationary"  # a quarantined version comes back on probation
    assert [v["version"] for v in restored["history"]] == [2]
    with pytest.raises(mf.ManifestError):
        library.rollback("book_check", to_version=7)


def test_a_name_cannot_answer_two_keys(tmp_path: Path) -> None:
    library = ToolLibrary(tmp_path / "lib")
    gate(library)
    with library.staging("other") as staging, pytest.raises(mf.ManifestError):
        write_tree(staging / "tool", {"tool.py": b""})
        library.commit(staging / "tool", "book_check", {"tool": "x", "failure_mode": "ARGS"},
                       lambda n: version_of("book_check", n))


def test_revert_is_byte_exact(tmp_path: Path) -> None:
    library = ToolLibrary(tmp_path / "lib")
    gate(library, event_id="e1")
    before = library.content_digest()
    with library.staging("b2") as staging:
        write_tree(staging / "tool", {"tool.py": b"2"})
        commit = library.commit(staging / "tool", "other_tool", ANSWERS,
                                lambda n: version_of("other_tool", n))
    assert library.content_digest() != before
    library.revert(commit)
    assert library.content_digest() == before


def test_revert_of_first_commit_leaves_empty_library(tmp_path: Path) -> None:
    library = ToolLibrary(tmp_path / "lib")
    library.root.mkdir()
    with library.staging("b1") as staging:
        write_tree(staging / "tool", {"tool.py": b"1"})
        commit = library.commit(staging / "tool", "first_tool", ANSWERS,
                                lambda n: version_of("first_tool", n))
    library.revert(commit)
    assert library.content_digest() == {}
    assert not (library.root / "tools").exists()


CRASH_CHILD = textwrap.dedent("""
    import os, signal, sys
    from binloop.library import store as lib_module
    from binloop.core.fsutil import write_tree
    from tests.test_library import version_of
    library = lib_module.ToolLibrary(sys.argv[1])
    where = sys.argv[2]
    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)
    if where == "before-manifest":
        lib_module.atomic_write_json = die
    with library.staging("crashing-build") as staging:
        write_tree(staging / "tool", {"tool.py": b"half"})
        if where == "staging":
            die()
        library.commit(staging / "tool", "crash_tool", {"tool": "book", "failure_mode": "ARGS"},
                       lambda n: version_of("crash_tool", n))
""")


@pytest.mark.parametrize("where", ["staging", "before-manifest"])
def test_a_killed_build_leaves_no_half_written_library(tmp_path: Path, where: str) -> None:
    library = ToolLibrary(tmp_path / "lib")
    gate(library)
    manifest_bytes = library.manifest_path.read_bytes()
    before = library.content_digest()
    repo = Path(__file__).resolve().parents[1]
    child = subprocess.run([sys.executable, "-c", CRASH_CHILD, str(library.root), where],
                           cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)}, check=False)
    assert child.returncode == -9
    assert library.manifest_path.read_bytes() == manifest_bytes  # readers never saw the build
    assert library.read()["tools"].keys() == {"book_check"}
    removed = library.recover()
    assert removed  # the crashed build's staging or orphan version directory
    assert library.content_digest() == before
    assert not list((library.root / ".state/staging").iterdir())


def test_recover_keeps_a_live_build_staging(tmp_path: Path) -> None:
    library = ToolLibrary(tmp_path / "lib")
    with library.staging("live-build") as staging:
        write_tree(staging / "tool", {"tool.py": b"x"})
        assert library.recover() == []
        assert staging.is_dir()


def test_uses_promote_after_two_successes(tmp_path: Path) -> None:
    library = ToolLibrary(tmp_path / "lib")
    gate(library)
    first = use("book_check", "success", 1)
    assert apply_telemetry(library, [first, use("other", "success", 2)]) == []
    assert apply_telemetry(library, [first]) == []  # the same record again counts once
    assert library.entry("book_check")["uses"] == {"ok": 1, "failed": 0}
    changes = apply_telemetry(library, [use("book_check", "success", 3)])
    assert [(c.name, c.old, c.new) for c in changes] == [("book_check", "probationary", "stable")]
    assert changes[0].manifest_version == library.read()["version"]
    assert library.entry("book_check")["status"] == "stable"
    assert apply_telemetry(library, [use("book_check", "failure", 4),
                                     use("book_check", "failure", 5)]) == []
    assert library.entry("book_check")["status"] == "stable"  # only probation quarantines


def test_failed_uses_on_probation_quarantine(tmp_path: Path) -> None:
    library = ToolLibrary(tmp_path / "lib")
    gate(library)
    changes = apply_telemetry(library, [use("book_check", "failure", 1, error="wrong total"),
                                        use("book_check", "cancelled", 2),
                                        use("book_check", "timeout", 3)], Policy(2, 2))
    assert [(c.old, c.new) for c in changes] == [("probationary", "quarantined")]
    entry = library.entry("book_check")
    assert entry["uses"] == {"ok": 0, "failed": 2}
    assert "failed uses on probation" in entry["status_reason"]
    assert mf.answered_keys(library.read()) == set()


def test_tool_names_cannot_escape_the_library() -> None:
    for bad in ("../x", "a/b", "Tool", "x", "tools", "a__b", "class", "", "a" * 65, "é_tool"):
        with pytest.raises(UnsafeName):
            check_tool_name(bad)
    for bad in ("/etc/passwd", "../up", "a/../../b", ".hidden", "a/" * 5 + "b", ""):
        with pytest.raises(UnsafeName):
            check_relpath(bad)
    assert tool_name_for("../../Book Flight!", "ARGS.x", "check") == "book_flight_args_x_check"
    assert len(tool_name_for("t" * 300)) <= 64
    assert tool_name_for("9lives") == "t_9lives"


def test_manifest_on_disk_is_checked(tmp_path: Path) -> None:
    library = ToolLibrary(tmp_path / "lib")
    library.root.mkdir()
    library.manifest_path.write_bytes(orjson.dumps({"format": 99}))
    with pytest.raises(mf.ManifestError):
        library.read()
