"""Names a build may create, and how names from outside are shown.

Names from telemetry or an LLM (a record's `tool`, a failure mode, a designed tool
name) are data: they may hold NUL, control characters, separators, `..` or any
Unicode. Two functions turn them into something safe, and nothing else does:

* :func:`slug` — the one way from a name to an identifier or a path segment: the
  lower-case ASCII words `[a-z0-9]+` of the name joined by `_` (everything else,
  NUL and control characters included, is a separator). :func:`tool_name_for` builds
  tool names from slugs; a tool name becomes a library directory, a Python module
  and a plugin id, so it is held to `[a-z][a-z0-9_]{1,63}` (:func:`check_tool_name`).
* :func:`escape_name` — the one way to show a name in a listing, a log line or an
  error message: printable characters as they are, `\\` doubled, and every control,
  format (bidi overrides, zero-width) or surrogate character as `\\xNN`/`\\uNNNN`/
  `\\UNNNNNNNN`, so a listing is one line per name and cannot be spoofed.
  :func:`source_literal` is the same for generated source: a JSON string literal,
  which is a valid Python and TypeScript string literal.

The original name is kept as data (the manifest's `answers`, the design's config),
never as a path. File paths inside a tool are relative, of safe segments only, and
are resolved and checked to stay inside their root before anything is written.
Identifiers that arrive already made (a BINEvent's `event_id`) are checked by
:func:`check_event_id` before any path or file name is derived from them.
"""

from __future__ import annotations

import hashlib
import keyword
import re
import unicodedata
from pathlib import Path, PurePosixPath
from typing import Final

TOOL_NAME: Final = re.compile(r"[a-z][a-z0-9_]{1,63}")
_SEGMENT: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,99}")
_RESERVED: Final = frozenset({"tools", "audit", "state", "manifest", "test", "tests"})
MAX_TOOL_NAME: Final = 64
EVENT_ID: Final = re.compile(r"[0-9a-f]{64}")
# Categories never printed raw: control, format (bidi, zero-width), surrogate,
# private use, unassigned, line/paragraph separators.
_HIDDEN_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


class UnsafeName(ValueError):
    """A generated name that could escape the library or break a target."""


def check_tool_name(name: object) -> str:
    """Return `name` if it is a safe tool name, else raise :class:`UnsafeName`."""
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        raise UnsafeName(f"tool name {name!r:.80} must match {TOOL_NAME.pattern}")
    if keyword.iskeyword(name) or name in _RESERVED or "__" in name:
        raise UnsafeName(f"tool name {name!r} is reserved")
    return name


def check_event_id(value: object) -> str:
    """`value` if it is an event id (64 lower-case hex characters), else UnsafeName."""
    if not isinstance(value, str) or not EVENT_ID.fullmatch(value):
        raise UnsafeName(f"event_id {escape_name(str(value))[:80]!r} must be 64 lower-case "
                         "hex characters")
    return value


def slug(text: str) -> str:
    """Lower-case `[a-z0-9]` words of `text` joined by `_` (may be empty).

    ASCII only, by design: `str.lower()` and `isalnum()` accept non-ASCII letters and
    digits, which must not reach a module name or a path.
    """
    words = re.findall(r"[a-z0-9]+", text.lower())
    return "_".join(words)


def escape_name(name: str) -> str:
    """`name` as one printable line: hidden characters escaped, backslash doubled."""
    out: list[str] = []
    for char in name:
        if char == "\\":
            out.append("\\\\")
        elif unicodedata.category(char) in _HIDDEN_CATEGORIES:
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else
                       f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(char)
    return "".join(out)


def source_literal(name: str) -> str:
    """`name` as a double-quoted string literal that means the same in Python and in
    TypeScript: hidden characters of the BMP (and lone surrogates) as `\\uNNNN`, which
    both languages read alike; printable characters as they are. Astral characters stay
    raw: `\\U...` is Python only and a surrogate-pair escape would be two characters in
    Python."""
    out = ['"']
    for char in name:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif code < 0x10000 and (unicodedata.category(char) in _HIDDEN_CATEGORIES
                                 or (code > 0x7e and not char.isprintable())):
            out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


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
