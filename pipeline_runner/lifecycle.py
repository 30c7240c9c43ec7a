"""Tool statuses from live telemetry: promotion to `stable`, quarantine on probation.

A telemetry record whose `tool` is the name of a library tool is a *use* of that
tool's active version: outcome `success` counts as ok, `failure` and `timeout` as
failed (`cancelled` is not a verdict on the tool). A probationary tool becomes
`stable` after `promote_after` ok uses (the paper: two), and `quarantined` after
`quarantine_after` failed uses while still on probation (the paper's remark on
regressions). Record ids already counted (the last few per version) are skipped,
so at-least-once delivery of telemetry counts each use once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from binloop.core.config import default
from binloop.core.schema import ToolInvocation
from binloop.library import manifest as mf
from binloop.library.store import ToolLibrary


@dataclass(frozen=True, slots=True)
class Policy:
    promote_after: int = default("promote_after")
    quarantine_after: int = default("quarantine_after")

    def __post_init__(self) -> None:
        if self.promote_after < 1 or self.quarantine_after < 1:
            raise ValueError("promote_after and quarantine_after must be >= 1")


@dataclass(frozen=True, slots=True)
class StatusChange:
    """A tool whose status a use changed (to publish, and to re-arm a quarantined key)."""

    name: str
    version: int
    old: str
    new: str
    answers: mf.Answers
    arm_epoch: int = 0
    manifest_version: int = 0


def apply_use(manifest: mf.Manifest, rec: ToolInvocation, policy: Policy) -> StatusChange | None:
    """Count one record against the manifest in place; returns a status change if any.

    Raises `LookupError` when the record is not a use of a library tool, so that
    callers can tell "nothing to do" from "counted, no status change".
    """
    entry = manifest["tools"].get(rec["tool"])
    if entry is None or rec["outcome"] == "cancelled":
        raise LookupError(rec["tool"])
    if rec["id"] in entry["recent_use_ids"]:
        raise LookupError(rec["id"])
    entry["recent_use_ids"] = [*entry["recent_use_ids"], rec["id"]][-mf.RECENT_USES:]
    old = entry["status"]
    if rec["outcome"] == "success":
        entry["uses"]["ok"] += 1
        if old == "probationary" and entry["uses"]["ok"] >= policy.promote_after:
            mf.set_status(entry, "stable", f"{entry['uses']['ok']} successful uses")
    else:
        entry["uses"]["failed"] += 1
        if old == "probationary" and entry["uses"]["failed"] >= policy.quarantine_after:
            mf.set_status(entry, "quarantined",
                          f"{entry['uses']['failed']} failed uses on probation "
                          f"(last: {rec.get('error', rec['outcome'])[:200]})")
    if entry["status"] == old:
        return None
    return StatusChange(entry["name"], entry["version"], old, entry["status"],
                        dict(entry["answers"]),  # type: ignore[arg-type]
                        entry.get("arm_epoch", 0))


def apply_telemetry(library: ToolLibrary, records: Iterable[ToolInvocation],
                    policy: Policy | None = None) -> list[StatusChange]:
    """Apply a batch of telemetry records to the library (one manifest write at most).

    Records that are not uses of a library tool are ignored. Returns the status
    changes, each stamped with the manifest version that holds it.
    """
    policy = policy or Policy()
    names = set(library.read()["tools"])
    uses = [rec for rec in records if rec["tool"] in names]
    if not uses:
        return []
    changes: list[StatusChange] = []

    def change(manifest: mf.Manifest) -> bool:
        counted = False
        for rec in uses:
            try:
                status_change = apply_use(manifest, rec, policy)
            except LookupError:
                continue
            counted = True
            if status_change is not None:
                changes.append(status_change)
        return counted

    written = library.update(change)
    if written is None:
        return []
    return [StatusChange(c.name, c.version, c.old, c.new, c.answers, c.arm_epoch,
                         written["version"]) for c in changes]
