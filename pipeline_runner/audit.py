"""The audit record of one build: the event, each stage's outcome, duration and reason.

Written once per build (gated, rolled back or crashed in a stage) to
`<library>/audit/<started>-<build_id>.json`, atomically, after the outcome is known.
The event inside is redacted and its evidence cut to what the designer saw; the
rest is redacted as text when written.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from binloop.core.fsutil import atomic_write_json
from binloop.core.redact import Redactor

StageOutcome = Literal["ok", "failed", "timeout", "crashed", "skipped"]
BuildOutcome = Literal["gated", "rolled_back", "error"]


@dataclass
class StageRecord:
    stage: str
    outcome: StageOutcome
    duration_ms: float
    reason: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class BuildAudit:
    build_id: str
    event: dict[str, Any]
    designer: str
    target: str
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                               time.gmtime()))
    outcome: BuildOutcome | None = None
    reason: str = ""
    tool: dict[str, Any] | None = None
    manifest_version: int | None = None
    stages: list[StageRecord] = field(default_factory=list)
    sandbox: dict[str, Any] = field(default_factory=dict)
    redactions: int = 0
    duration_ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, audit_dir: Path) -> Path:
        """Write the record; stage reasons and details (which may quote tool output)
        go through the redactor too, the event already did."""
        stamp = self.started.replace("-", "").replace(":", "")
        path = audit_dir / f"{stamp}-{self.build_id}.json"
        record = self.to_json()
        redactor = Redactor()
        clean = {k: v if k == "event" else redactor.value(v, None) for k, v in record.items()}
        clean["redactions"] = self.redactions + redactor.count
        atomic_write_json(path, clean)
        return path
