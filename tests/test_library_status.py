"""`binloop status --library`: tolerant reading of the tool library's manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from binloop.cli.commands.status import render
from binloop.library.status import library_status


def tool(name: str, status: str, version: int = 1, history: int = 0) -> dict[str, Any]:
    """An entry of `manifest.json` as the build runner writes it (format 1)."""
    version_fields = {"status": status, "status_reason": "", "target": "python",
                      "path": f"tools/{name}/v{version}", "entry": "tool.py", "files": {},
                      "created": "2024-05-01T00:00:00Z", "uses": {"ok": 2, "failed": 0},
                      "recent_use_ids": [], "event_id": "e" * 64, "arm_epoch": 0,
                      "designer": "offline", "description": "d"}
    return {"name": name, "version": version, **version_fields,
            "answers": {"tool": "book", "failure_mode": "ARGS.total"},
            "history": [{**version_fields, "version": v} for v in range(1, 1 + history)]}


def test_manifest_tools_by_status(tmp_path: Path) -> None:
    manifest = {"format": 1, "version": 7, "updated": "2024-05-01T00:00:00Z", "tools": {
        "fix_total": tool("fix_total", "stable", 2, history=1),
        "lookup": tool("lookup", "probationary"),
        "old": tool("old", "quarantined")}}
    (tmp_path / "manifest.json").write_bytes(orjson.dumps(manifest))
    status = library_status(tmp_path)
    assert status["state"] == "ok" and status["version"] == 7
    assert status["by_status"] == {"probationary": 1, "stable": 1, "quarantined": 1}
    fix = next(t for t in status["tools"] if t["name"] == "fix_total")
    assert (fix["version"], fix["versions"], fix["uses"]) == (2, 2, {"ok": 2, "failed": 0})
    lines = render({"nats": "n", "checked": 0.0, "telemetry": {"name": "T", "exists": False},
                    "events": {"name": "E", "exists": False},
                    "job": {"name": "j", "bucket": "B", "published": None}, "library": status})
    assert any("3 tools: 1 probationary, 1 stable, 1 quarantined" in line for line in lines)


def test_missing_empty_and_unreadable_libraries_are_reported(tmp_path: Path) -> None:
    assert library_status(tmp_path / "none")["state"] == "missing"
    assert library_status(tmp_path)["state"] == "empty"
    (tmp_path / "manifest.json").write_text("{not json")
    assert library_status(tmp_path)["state"] == "unreadable"
    (tmp_path / "manifest.json").write_text('{"format": 2, "tools": []}')
    assert library_status(tmp_path)["state"] == "unreadable"
