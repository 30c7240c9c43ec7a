"""BINEvents as the build runner receives them: validated, redacted, evidence cut.

An event from a file or the wire is checked field by field (`event_id` is 64
lower-case hex characters, since queue, re-arm and audit file names derive from it;
evidence records go through the one record validator, `binloop.core.schema.validate_record`);
an invalid event
raises :class:`InvalidEvent` with the reason (the sink dead-letters it). Before a
designer sees it, every secret in the evidence is redacted and the evidence is cut to
the newest `evidence_max` (3) records, as the paper's design step prescribes.
"""

from __future__ import annotations

from typing import Any, Final, cast

import orjson

from binloop.core.events import BINEvent
from binloop.core.names import UnsafeName, check_event_id
from binloop.core.redact import Redactor
from binloop.core.schema import InvalidRecord, validate_record

DESIGN_EVIDENCE_MAX: Final = 3
_REQUIRED: Final = {"event_id": str, "tool": str, "failure_mode": str, "evidence": list}


class InvalidEvent(ValueError):
    """Not a BINEvent the runner can build from (the message is the reason)."""


def check_event(value: Any) -> BINEvent:
    if not isinstance(value, dict):
        raise InvalidEvent("a BINEvent must be a JSON object")
    for key, kind in _REQUIRED.items():
        if not isinstance(value.get(key), kind) or (kind is str and not value[key]):
            raise InvalidEvent(f"BINEvent field {key!r} must be a non-empty {kind.__name__}")
    try:
        check_event_id(value["event_id"])
    except UnsafeName as exc:
        raise InvalidEvent(str(exc)) from None
    if not value["evidence"]:
        raise InvalidEvent("BINEvent has no evidence records")
    evidence = []
    for number, record in enumerate(value["evidence"], 1):
        if not isinstance(record, dict):
            raise InvalidEvent(f"evidence record {number} is not an object")
        try:
            evidence.append(validate_record(record))
        except InvalidRecord as exc:
            raise InvalidEvent(f"evidence record {number}: {exc}") from None
    event: dict[str, Any] = {"theta": 0, "window": "", "session_id": evidence[-1]["session_id"],
                             "count": len(evidence), "first_ts": evidence[0]["ts"],
                             "fired_ts": evidence[-1]["ts"], "arm_epoch": 0, "config": {},
                             **value, "evidence": evidence}
    if not isinstance(event["session_id"], int | str) or isinstance(event["session_id"], bool):
        raise InvalidEvent("session_id must be an integer or a string")
    if not isinstance(event["arm_epoch"], int):
        raise InvalidEvent("arm_epoch must be an integer")
    return event  # type: ignore[return-value]


def parse_event(raw: bytes | str) -> BINEvent:
    try:
        return check_event(orjson.loads(raw))
    except orjson.JSONDecodeError as exc:
        raise InvalidEvent(f"not JSON: {exc}") from None


def for_design(event: BINEvent, redactor: Redactor,
               evidence_max: int = DESIGN_EVIDENCE_MAX) -> BINEvent:
    """The event as a designer may see it: redacted, evidence cut to the newest records."""
    cut = dict(event)
    cut["evidence"] = event["evidence"][-evidence_max:]
    return cast(BINEvent, redactor.event(cut))
