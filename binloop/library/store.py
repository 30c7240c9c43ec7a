"""The tool library on disk: manifest, generated files, audit records, staging.

Layout of a library directory::

    manifest.json            the truth: which tool versions exist and their status
    tools/<name>/v<N>/       the files of one tool version (never changed once written)
    audit/<time>-<build>.json one record per build
    .state/                  staging, checkpoints and the lock (not library content)

Crash safety: a build writes its files into `.state/staging/<build>/` while it runs.
To gate a tool, :meth:`ToolLibrary.commit` takes the library lock, renames the staged
directory to `tools/<name>/v<N>/` and then replaces `manifest.json` in one atomic
rename. A crash before the manifest rename leaves the manifest as it was and at most
an unreferenced version directory, which :meth:`ToolLibrary.recover` removes (it runs
before every commit). Readers only follow the manifest, so they never see a
half-written tool.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import orjson

from binloop.core.fsutil import (
    atomic_write_bytes,
    atomic_write_json,
    exclusive_lock,
    fsync_dir,
    sha256_file,
    tree_digest,
)
from binloop.core.names import check_tool_name
from binloop.library import manifest as mf

STATE_DIR: Final = ".state"
NOT_CONTENT: Final = (STATE_DIR, "audit", "hanzo-plugins")  # the last one is derived
BUILD_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]{0,99}")


@dataclass(frozen=True)
class Commit:
    """What a gate changed, so that a failing later stage can undo it."""

    manifest: mf.Manifest
    previous: bytes | None
    version_dir: Path
    name: str
    version: int


class ToolLibrary:
    """One library directory. Safe for several processes (an advisory file lock)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        self.manifest_path = self.root / "manifest.json"
        self.tools_dir = self.root / "tools"
        self.audit_dir = self.root / "audit"
        self.state_dir = self.root / STATE_DIR
        self.checkpoint_dir = self.state_dir / "checkpoints"
        self._staging_dir = self.state_dir / "staging"
        self._lock_path = self.state_dir / "lock"
        self._build_lock_path = self.state_dir / "build.lock"

    # -- reading -----------------------------------------------------------------------
    def read(self) -> mf.Manifest:
        """The current manifest (an empty one when the library is new)."""
        try:
            data = self.manifest_path.read_bytes()
        except FileNotFoundError:
            return mf.empty_manifest()
        return mf.check_manifest(orjson.loads(data))

    def entry(self, name: str) -> mf.ToolEntry:
        tools = self.read()["tools"]
        if name not in tools:
            raise KeyError(f"no tool {name!r} in {self.root}")
        return tools[name]

    def tool_dir(self, version: mf.ToolVersion) -> Path:
        return self.root / version["path"]

    def verify(self, name: str) -> list[str]:
        """Files of the active version of `name` whose hash differs from the manifest."""
        entry = self.entry(name)
        base = self.tool_dir(mf.active_version(entry))
        return [rel for rel, digest in entry["files"].items()
                if not (base / rel).is_file() or sha256_file(base / rel) != digest]

    def content_digest(self) -> dict[str, str]:
        """sha256 of every library file that is content (not audit records or state)."""
        return tree_digest(self.root, exclude=NOT_CONTENT)

    @contextlib.contextmanager
    def build_lock(self) -> Iterator[None]:
        """Held for a whole build (design to gate): builds into one library run one at a
        time, whichever process or thread runs them, so N concurrent builds give the
        library N serial ones would (a design reads the manifest it will be gated into)."""
        with exclusive_lock(self._build_lock_path):
            yield

    # -- staging -----------------------------------------------------------------------
    @contextlib.contextmanager
    def staging(self, build_id: str) -> Iterator[Path]:
        """A private directory for one build; removed on exit unless committed."""
        if not BUILD_ID.fullmatch(build_id):
            raise ValueError(f"build id {build_id!r:.80} must match {BUILD_ID.pattern}")
        path = self._staging_dir / build_id
        path.mkdir(parents=True, exist_ok=False)
        fd = os.open(self._staging_dir / f"{build_id}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._staging_dir / f"{build_id}.lock")
            os.close(fd)

    # -- changing ----------------------------------------------------------------------
    def commit(self, staged: Path, name: str, answers: mf.Answers,
               version_of: Callable[[int], mf.ToolVersion]) -> Commit:
        """Gate a staged tool: move its files into place, then switch the manifest."""
        check_tool_name(name)
        with exclusive_lock(self._lock_path):
            self._recover_locked()
            previous = self.manifest_path.read_bytes() if self.manifest_path.exists() else None
            manifest = self.read()
            version = version_of(mf.next_version(manifest, name))
            final = self.root / version["path"]
            if final.parent != self.tools_dir / name:
                raise mf.ManifestError(f"version path {version['path']!r} is not under tools/")
            # The manifest change is made (and may refuse) before any file moves, so a
            # refused commit leaves no version directory behind.
            mf.add_version(manifest, name, answers, version)
            mf.bump(manifest)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.rename(staged, final)
            fsync_dir(final.parent)
            atomic_write_json(self.manifest_path, manifest)
            self._changed(manifest)
            return Commit(manifest, previous, final, name, version["version"])

    def revert(self, commit: Commit) -> None:
        """Undo a commit. Byte-exact when nothing else changed the manifest since;
        otherwise the committed version is quarantined instead."""
        with exclusive_lock(self._lock_path):
            current = self.read()
            if current["version"] == commit.manifest["version"]:
                if commit.previous is None:
                    self.manifest_path.unlink()
                    fsync_dir(self.root)
                else:
                    atomic_write_bytes(self.manifest_path, commit.previous)
                shutil.rmtree(commit.version_dir, ignore_errors=True)
                _remove_empty(commit.version_dir.parent, self.tools_dir)
                self._changed(self.read())
                return
            entry = current["tools"].get(commit.name)
            if entry is not None and entry["version"] == commit.version:
                mf.set_status(entry, "quarantined", "reverted: a later build stage failed")
                mf.bump(current)
                atomic_write_json(self.manifest_path, current)
                self._changed(current)

    def update(self, change: Callable[[mf.Manifest], bool]) -> mf.Manifest | None:
        """Apply `change` under the lock; writes (and bumps the version) when it returns True."""
        with exclusive_lock(self._lock_path):
            manifest = self.read()
            if not change(manifest):
                return None
            mf.bump(manifest)
            atomic_write_json(self.manifest_path, manifest)
            self._changed(manifest)
            return manifest

    def set_status(self, name: str, status: mf.Status, reason: str) -> mf.Manifest | None:
        def change(manifest: mf.Manifest) -> bool:
            return mf.set_status(_entry_of(manifest, name), status, reason)
        return self.update(change)

    def rollback(self, name: str, to_version: int | None = None) -> mf.Manifest | None:
        def change(manifest: mf.Manifest) -> bool:
            mf.rollback(_entry_of(manifest, name), to_version)
            return True
        return self.update(change)

    def _changed(self, manifest: mf.Manifest) -> None:
        """After a manifest write (under the lock): derived views follow it."""
        from binloop.library.hanzo_load_path import sync_if_present

        sync_if_present(self.root, manifest)

    def recover(self) -> list[str]:
        """Remove what crashed builds left behind; returns the removed paths."""
        with exclusive_lock(self._lock_path):
            return self._recover_locked()

    def _recover_locked(self) -> list[str]:
        removed = self._stale_staging()
        referenced = {v["path"] for e in self.read()["tools"].values() for v in mf.all_versions(e)}
        if self.tools_dir.is_dir():
            for tool in self.tools_dir.iterdir():
                for version_dir in (tool.iterdir() if tool.is_dir() else ()):
                    rel = version_dir.relative_to(self.root).as_posix()
                    if rel not in referenced:
                        shutil.rmtree(version_dir, ignore_errors=True)
                        removed.append(rel)
                _remove_empty(tool)
        return removed

    def _stale_staging(self) -> list[str]:
        removed: list[str] = []
        if not self._staging_dir.is_dir():
            return removed
        for path in self._staging_dir.iterdir():
            if path.suffix == ".lock" or not path.is_dir():
                continue
            lock = self._staging_dir / f"{path.name}.lock"
            if _is_held(lock):
                continue
            shutil.rmtree(path, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock)
            removed.append(path.relative_to(self.root).as_posix())
        return removed


def _remove_empty(*directories: Path) -> None:
    for directory in directories:
        with contextlib.suppress(OSError):
            directory.rmdir()


def _entry_of(manifest: mf.Manifest, name: str) -> mf.ToolEntry:
    if name not in manifest["tools"]:
        raise KeyError(f"no tool {name!r} in the library")
    return manifest["tools"][name]


def _is_held(lock: Path) -> bool:
    """True when a live process holds the staging lock of a build."""
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
