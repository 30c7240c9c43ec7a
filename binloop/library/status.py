"""What a tool library holds, read from its `manifest.json` (the format of
`binloop.library.manifest`), for `binloop status`.

Tolerant by design: a missing directory or manifest, or one of another shape, is
reported as such, never raised, so `binloop status --library DIR` works before the
first build and across manifest format changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from binloop.library.manifest import STATUSES


def library_status(root: str | Path) -> dict[str, Any]:
    """{"path", "state": ok | empty | missing | unreadable, "version", "updated",
    "by_status": {status: n}, "tools": [...], "error"?}."""
    path = Path(root)
    out: dict[str, Any] = {"path": str(path), "version": None, "updated": None,
                           "by_status": dict.fromkeys(STATUSES, 0), "tools": []}
    manifest_path = path / "manifest.json"
    if not path.is_dir():
        return {**out, "state": "missing", "error": "no such directory"}
    try:
        manifest = orjson.loads(manifest_path.read_bytes())
    except FileNotFoundError:
        return {**out, "state": "empty"}
    except (OSError, orjson.JSONDecodeError) as exc:
        return {**out, "state": "unreadable", "error": str(exc)}
    tools = manifest.get("tools") if isinstance(manifest, dict) else None
    if not isinstance(tools, dict):
        return {**out, "state": "unreadable", "error": "manifest.json has no 'tools' object"}
    out.update(state="ok", version=manifest.get("version"), updated=manifest.get("updated"),
               format=manifest.get("format"), unsafe_builds=_unsafe_builds(path))
    for name, entry in sorted(tools.items()):
        if not isinstance(entry, dict):
            continue
        tool = _tool(name, entry)
        out["tools"].append(tool)
        out["by_status"][tool["status"]] = out["by_status"].get(tool["status"], 0) + 1
    return out


def _tool(name: str, entry: dict[str, Any]) -> dict[str, Any]:
    answers = _mapping(entry.get("answers"))
    uses = _mapping(entry.get("uses"))
    history = entry.get("history")
    return {"name": name, "version": entry.get("version"),
            "status": str(entry.get("status", "unknown")), "target": entry.get("target"),
            "answers": {"tool": answers.get("tool"), "failure_mode": answers.get("failure_mode")},
            "uses": {"ok": uses.get("ok", 0), "failed": uses.get("failed", 0)},
            "created": entry.get("created"),
            "versions": 1 + (len(history) if isinstance(history, list) else 0)}


def _unsafe_builds(root: Path) -> list[dict[str, Any]]:
    """Tool versions gated by builds that ran with `--sandbox unsafe` (pipeline_runner)."""
    try:
        lines = (root / ".state" / "unsafe-builds.jsonl").read_bytes().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(item, dict):
            found.append({"tool": item.get("tool"), "version": item.get("version")})
    return found


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
