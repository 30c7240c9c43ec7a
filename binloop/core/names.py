"""Names a build may create: tool names and the relative paths of generated files.

A tool name becomes a directory of the library, a Python module name and a plugin
id, so it is held to `[a-z][a-z0-9_]{1,63}`: no separators, dots or `..` can reach
the filesystem. File paths inside a tool are relative, of safe segments only, and
are resolved and checked to stay inside their root before anything is written.
"""

from __future__ import annotations

import hashlib
import keyword
import re
from pathlib import Path, PurePosixPath
from typing import Final

TOOL_NAME: Final = re.compile(r"[a-z][a-z0-9_]{1,63}")
_SEGMENT: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,99}")
_RESERVED: Final = frozenset({"tools", "audit", "state", "manifest", "test", "tests"})
MAX_TOOL_NAME: Final = 64


class UnsafeName(ValueError):
    """A generated name that could escape the library or break a target."""


def check_tool_name(name: object) -> str:
    """Return `name` if it is a safe tool name, else raise :class:`UnsafeName`."""
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        raise UnsafeName(f"tool name {name!r:.80} must match {TOOL_NAME.pattern}")
    if keyword.iskeyword(name) or name in _RESERVED or "__" in name:
        raise UnsafeName(f"tool name {name!r} is reserved")
    return name


def slug(text: str) -> str:
    """Lower-case `[a-z0-9_]` words of `text` joined by `_` (may be empty)."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return "_".join(words)


def tool_name_for(*parts: str) -> str:
    """A safe tool name built from free text (tool names, failure modes, a verb)."""
    base = "_".join(p for p in (slug(part) for part in parts) if p) or "tool"
    if not base[0].isalpha():
        base = "t_" + base
    if len(base) > MAX_TOOL_NAME:
        digest = hashlib.sha256(base.encode()).hexdigest()[:8]
        base = base[: MAX_TOOL_NAME - 9].rstrip("_") + "_" + digest
    return check_tool_name(base.replace("__", "_"))


def check_relpath(rel: str) -> str:
    """A relative POSIX path of safe segments (no absolute path, `..`, or hidden names)."""
    path = PurePosixPath(rel)
    if path.is_absolute() or not path.parts or len(path.parts) > 4:
        raise UnsafeName(f"file path {rel!r:.80} must be relative, at most 4 levels")
    for part in path.parts:
        if not _SEGMENT.fullmatch(part) or part in (".", ".."):
            raise UnsafeName(f"file path {rel!r:.80} has an unsafe segment {part!r:.40}")
    return path.as_posix()


def inside(root: Path, rel: str) -> Path:
    """`root / rel`, checked to resolve inside `root` (symlinks included)."""
    target = (root / check_relpath(rel)).resolve()
    if not target.is_relative_to(root.resolve()):
        raise UnsafeName(f"{rel!r} resolves outside {root}")
    return target
