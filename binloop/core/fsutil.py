"""Crash-safe file operations: atomic writes, directory fsync, hashing, an exclusive lock.

Everything the tool library changes goes through these: a new file is written to a
temporary name beside its target, flushed and fsynced, then renamed over the target,
and the directory is fsynced so the rename itself survives a power cut.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink in `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace `path` with `data` in one rename: readers see the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def atomic_write_json(path: Path, value: Any) -> None:
    """Pretty, sorted JSON (stable bytes for the same value) written atomically."""
    data = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    atomic_write_bytes(path, data)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    """Write `files` (relative paths, already validated) under `root`, fsynced."""
    for rel, data in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    for directory in {(root / rel).parent for rel in files} | {root}:
        fsync_dir(directory)


def tree_digest(root: Path, exclude: tuple[str, ...] = ()) -> dict[str, str]:
    """sha256 of every file under `root` by relative path (`exclude`: top-level names)."""
    digests: dict[str, str] = {}
    if not root.exists():
        return digests
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] in exclude or not path.is_file():
            continue
        digests[rel.as_posix()] = sha256_file(path)
    return digests


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """An advisory lock held across processes (released when the holder dies)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
