"""The tool library's `manifest.json`: what it holds, and pure functions that change it.

Layout::

    {"format": 1, "version": 7, "updated": "2026-...Z",
     "tools": {"<name>": {<active version's fields>, "name": ..., "answers": {...},
                           "history": [<earlier or rolled-back versions>]}}}

A version's fields: `version`, `status` (probationary | stable | quarantined),
`status_reason`, `target`, `path` (its directory, relative to the library), `entry`
(the file a loader imports), `files` (relative path -> sha256), `created`,
`uses` ({"ok", "failed"}), `event_id` and `arm_epoch` of the BINEvent it was built
from, `designer`, `description`. The manifest
`version` goes up by one on every change; agents reload when it moves.
"""

from __future__ import annotations

import copy
import time
from typing import Any, Final, Literal, TypedDict, cast

from binloop.core.names import UnsafeName, check_tool_name, escape_name

FORMAT: Final = 1
Status = Literal["probationary", "stable", "quarantined"]
STATUSES: Final = ("probationary", "stable", "quarantined")
RECENT_USES: Final = 32


class Uses(TypedDict):
    ok: int
    failed: int


class Answers(TypedDict):
    tool: str
    failure_mode: str


class ToolVersion(TypedDict):
    version: int
    status: Status
    status_reason: str
    target: str
    path: str
    entry: str
    files: dict[str, str]
    created: str
    uses: Uses
    recent_use_ids: list[str]
    event_id: str
    arm_epoch: int
    designer: str
    description: str


class ToolEntry(ToolVersion):
    name: str
    answers: Answers
    history: list[ToolVersion]


class Manifest(TypedDict):
    format: int
    version: int
    updated: str
    tools: dict[str, ToolEntry]


class ManifestError(ValueError):
    """The manifest does not have the expected shape, or a change is not allowed."""


VERSION_FIELDS: Final = tuple(ToolVersion.__annotations__)


def empty_manifest() -> Manifest:
    return {"format": FORMAT, "version": 0, "updated": iso_now(), "tools": {}}


def iso_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def check_manifest(value: Any) -> Manifest:
    """Shape check of a manifest read from disk."""
    if not isinstance(value, dict) or value.get("format") != FORMAT:
        raise ManifestError(f"not a format-{FORMAT} tool-library manifest")
    if not isinstance(value.get("version"), int) or not isinstance(value.get("tools"), dict):
        raise ManifestError("manifest needs an integer 'version' and a 'tools' object")
    for name, entry in value["tools"].items():
        if not isinstance(entry, dict) or entry.get("name") != name:
            raise ManifestError(f"manifest entry {name!r} is malformed")
        if entry.get("status") not in STATUSES:
            raise ManifestError(f"tool {name!r} has an unknown status {entry.get('status')!r}")
        _check_paths(name, entry)
    return cast(Manifest, value)


def _check_paths(name: str, entry: dict[str, Any]) -> None:
    """Paths are derived from the manifest: its names and version paths must be the
    ones a gate writes (`tools/<safe name>/v<N>`), whoever edited the file."""
    try:
        check_tool_name(name)
    except UnsafeName as exc:
        raise ManifestError(f"manifest entry {escape_name(str(name))!r}: {exc}") from None
    history = entry.get("history")
    for version in [entry, *(history if isinstance(history, list) else [])]:
        number = version.get("version") if isinstance(version, dict) else None
        if not isinstance(number, int) or isinstance(number, bool) or \
                version.get("path") != f"tools/{name}/v{number}":
            raise ManifestError(f"tool {name!r}: a version path is not tools/{name}/v<N>")


def active_version(entry: ToolEntry) -> ToolVersion:
    return cast(ToolVersion, {k: copy.deepcopy(entry[k]) for k in VERSION_FIELDS})  # type: ignore[literal-required]


def all_versions(entry: ToolEntry) -> list[ToolVersion]:
    return sorted([active_version(entry), *entry["history"]], key=lambda v: v["version"])


def next_version(manifest: Manifest, name: str) -> int:
    entry = manifest["tools"].get(name)
    return 1 if entry is None else max(v["version"] for v in all_versions(entry)) + 1


def _activate(entry: ToolEntry, version: ToolVersion) -> None:
    for key in VERSION_FIELDS:
        entry[key] = copy.deepcopy(version[key])  # type: ignore[literal-required]


def add_version(manifest: Manifest, name: str, answers: Answers, version: ToolVersion) -> None:
    """Make `version` the active one of tool `name` (the old active goes to history)."""
    entry = manifest["tools"].get(name)
    if entry is None:
        fresh = cast(ToolEntry, {"name": name, "answers": dict(answers), "history": []})
        _activate(fresh, version)
        manifest["tools"][name] = fresh
        return
    if entry["answers"] != answers:
        raise ManifestError(f"tool {name!r} answers {entry['answers']}, not {answers}")
    entry["history"].append(active_version(entry))
    _activate(entry, version)


def set_status(entry: ToolEntry, status: Status, reason: str) -> bool:
    if status not in STATUSES:
        raise ManifestError(f"unknown status {status!r}")
    if entry["status"] == status:
        return False
    entry["status"], entry["status_reason"] = status, reason
    return True


def rollback(entry: ToolEntry, to_version: int | None) -> ToolVersion:
    """Activate an earlier version (default: the newest one older than the active)."""
    older = [v for v in entry["history"] if v["version"] < entry["version"]]
    if to_version is None:
        if not older:
            raise ManifestError(f"tool {entry['name']!r} has no earlier version")
        to_version = max(v["version"] for v in older)
    match = [v for v in entry["history"] if v["version"] == to_version]
    if not match:
        raise ManifestError(f"tool {entry['name']!r} has no version {to_version} in its history")
    target = match[0]
    entry["history"] = [v for v in entry["history"] if v is not target]
    entry["history"].append(active_version(entry))
    if target["status"] == "quarantined":
        target["status"], target["status_reason"] = "probationary", "restored by rollback"
    _activate(entry, target)
    return target


def answered_keys(manifest: Manifest) -> set[tuple[str, str]]:
    """The (tool, failure_mode) keys a non-quarantined tool answers."""
    return {(e["answers"]["tool"], e["answers"]["failure_mode"])
            for e in manifest["tools"].values() if e["status"] != "quarantined"}


def bump(manifest: Manifest) -> None:
    manifest["version"] += 1
    manifest["updated"] = iso_now()
