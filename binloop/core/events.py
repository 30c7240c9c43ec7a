"""The BINEvent: what the detector emits when a key's count reaches θ."""

from __future__ import annotations

import hashlib
from typing import Any, TypedDict

import orjson

from binloop.core.redact import redact_event
from binloop.core.schema import SessionId, ToolInvocation


class BINEvent(TypedDict):
    event_id: str
    tool: str
    failure_mode: str
    theta: int
    window: str
    session_id: SessionId
    count: int
    first_ts: int
    fired_ts: int
    arm_epoch: int
    evidence: list[ToolInvocation]
    config: dict[str, Any]


def event_id(tool: str, failure_mode: str, arm_epoch: int, config_digest: str) -> str:
    """Stable idempotency key of the event a key fires in one arming under one detection
    configuration: the lowercase hex sha256 of the four."""
    return hashlib.sha256(orjson.dumps([tool, failure_mode, arm_epoch, config_digest])
                          ).hexdigest()


def dumps_event(event: BINEvent) -> bytes:
    """Canonical JSONL encoding of an event (sorted keys, no newline), its evidence
    redacted: every writer of events (files, stdout, BIN_EVENTS, the build queue)
    encodes through here."""
    return orjson.dumps(redact_event(event), option=orjson.OPT_SORT_KEYS)
