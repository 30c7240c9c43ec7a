"""The telemetry record (ToolInvocation, paper Def. 1): parsing and validation.

This module is the one place that knows what a valid record is. Every engine, source
and client goes through :func:`parse_record`; anything it rejects becomes a
:class:`DeadLetter` with the reason, never an exception that stops a job.
(`binloop.core.block_parse` is a faster path to the same verdicts for blocks of lines.)

A line is read with orjson. Where orjson refuses a line only because of what is inside
`args` or a key the record does not have (a number beyond the double range, nesting
orjson allows but no record needs), the line is read again with `args` and unknown keys
checked for JSON syntax and UTF-8 only: such a record is valid, and `args` that cannot be
decoded are kept as a truncation marker (as oversized `args` are). So the validity of a
record never depends on decoding `args`, which a fast path keeps raw.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from dataclasses import dataclass
from typing import Any, Final, Literal, TypedDict

import msgspec
import orjson

from binloop.core.classify import GIVEN, INFER, classify

OUTCOMES: Final = frozenset({"success", "failure", "timeout", "cancelled"})
TAXONOMY: Final = frozenset(
    {"PERM", "NOTFOUND", "TIMEOUT", "SYNTAX", "RUNTIME", "TOOL_GAP", "ARGS", "CONFLICT", "NETWORK"}
)
TOOL_MAX_CHARS: Final = 256
FAILURE_MODE_MAX_CHARS: Final = 256
STRING_FIELD_MAX_CHARS: Final = 4096
DEFAULT_ARGS_MAX_BYTES: Final = 8192
DEFAULT_MAX_FUTURE_SKEW_MS: Final = 24 * 3600 * 1000
# A record line longer than this is rejected before parsing (a 10 MB payload must not
# be materialised as a Python object graph).
LINE_MAX_BYTES: Final = 1 << 20
# `--ts-unit auto`: a ts below this is in seconds (10^11 ms is March 1973; 10^11 s is
# the year 5138), so it is converted to milliseconds.
SECONDS_BELOW: Final = 10**11
# How much of an input that is not a JSON object a dead letter keeps.
NON_RECORD_PREFIX: Final = 64
TS_UNITS: Final = ("auto", "ms", "s")

# Valid failure modes already seen, per taxonomy: {as written: normalised}.
_VALID_MODES: dict[frozenset[str], dict[str, str]] = {}
_VALID_MODES_MAX: Final = 4096
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
# The digits of an id taken as it is (the schema lower-cases other hex ids).
ID_DIGITS: Final = "0123456789abcdef"
_ABSENT: Final = object()
_MODE_LEVEL = re.compile(r"[A-Za-z0-9_\-]+")

Outcome = Literal["success", "failure", "timeout", "cancelled"]
SessionId = int | str


class ToolInvocation(TypedDict, total=False):
    """A validated, normalised record. `id`, `session_id`, `ts`, `tool`, `args`,
    `outcome` and `failure_mode` are always present after :func:`parse_record`."""

    id: str
    session_id: SessionId
    ts: int
    tool: str
    args: dict[str, Any]
    outcome: Outcome
    duration_ms: int
    failure_mode: str | None
    agent_id: str
    error: str
    # The masked message an inferred failure mode's level 2 stands for (binloop.core.classify).
    error_template: str


class InvalidRecord(ValueError):
    """A record that does not parse or validate; the message is the dead-letter reason."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """An input that was rejected, with enough context to find and replay it."""

    raw: str
    reason: str
    source: str = ""
    position: str = ""

    def to_json(self) -> dict[str, str]:
        return {"reason": self.reason, "source": self.source, "position": self.position,
                "raw": self.raw}


@dataclass(frozen=True, slots=True)
class RecordLimits:
    """Bounds applied while validating; part of the job config."""

    args_max_bytes: int = DEFAULT_ARGS_MAX_BYTES
    max_future_skew_ms: int | None = DEFAULT_MAX_FUTURE_SKEW_MS
    taxonomy: frozenset[str] = TAXONOMY
    # Failure-mode inference (binloop.core.classify.FAILURE_MODE_SETTINGS) for records whose
    # outcome is in `infer_outcomes`. Plain validation (clients, publish) keeps what is
    # given; the job's parse step uses the `failure_modes` setting of binloop.core.config.
    failure_modes: str = GIVEN
    infer_outcomes: frozenset[str] = frozenset({"failure", "timeout"})
    # `ms`: ts is unix milliseconds; `s`: unix seconds (converted); `auto`: seconds
    # when below SECONDS_BELOW, else milliseconds. The record's own unit is ms; the job's
    # setting `ts_unit` defaults to auto.
    ts_unit: str = "ms"


DEFAULT_LIMITS: Final = RecordLimits()


def record_id(fields: dict[str, Any]) -> str:
    """Content hash of a record: sha256 of its canonical JSON without `id`."""
    body = {k: v for k, v in fields.items() if k != "id"} if "id" in fields else fields
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def raw_text(raw: bytes | str, limit: int = 2048) -> str:
    """A printable, bounded copy of an input for the dead-letter output. An input that
    is not even a JSON object is not telemetry: only its first bytes are kept (a file of
    something else must not be copied into the outputs)."""
    if raw.lstrip()[:1] not in ("{", b"{"):
        limit = min(limit, NON_RECORD_PREFIX)
    if isinstance(raw, bytes):
        text = raw[: limit * 4].decode("utf-8", errors="backslashreplace")
    else:
        text = raw
    return text if len(text) <= limit else text[:limit] + f"...[{len(text) - limit} more chars]"


def parse_record(raw: bytes | str, limits: RecordLimits = DEFAULT_LIMITS) -> ToolInvocation:
    """Parse one JSON record and validate it; raises :class:`InvalidRecord`."""
    return RecordParser(limits).parse(raw)


def validate_record(obj: dict[str, Any], limits: RecordLimits = DEFAULT_LIMITS,
                    encoded_size: int | None = None) -> ToolInvocation:
    """Validate and normalise an already-decoded record; raises :class:`InvalidRecord`.

    `encoded_size` (the JSON length of the whole record, when known) lets small records
    skip re-encoding `args` to measure it.
    """
    return RecordParser(limits).validate(obj, encoded_size)


class RecordParser:
    """:func:`parse_record` and :func:`validate_record` for a run of records (a chunk):
    the clock and the failure-mode cache are looked up once, not per record.

    Same results as the functions: a record that the hot path would reject only because
    the clock read at construction is a little old is checked again by `_normalise`
    against a fresh clock.
    """

    __slots__ = ("_floor", "_future", "_infer", "_modes", "_override", "limits", "ts_converted")

    def __init__(self, limits: RecordLimits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self._future = _future_bound(limits.max_future_skew_ms)
        self._floor = ts_floor(limits.ts_unit)
        self._modes = _mode_cache(limits.taxonomy)
        self._infer = limits.infer_outcomes if limits.failure_modes != GIVEN else frozenset()
        self._override = limits.failure_modes == INFER
        self.ts_converted = 0  # records whose ts was converted from seconds

    def parse(self, raw: bytes | str) -> ToolInvocation:
        size = len(raw)
        if size > LINE_MAX_BYTES:
            raise InvalidRecord(f"record of {size} bytes exceeds the {LINE_MAX_BYTES}-byte limit")
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            obj = _read_with_raw_args(raw, self.limits.args_max_bytes)
            if obj is None:
                raise InvalidRecord(f"not JSON: {exc}") from None
        return self._record(obj, size)

    def parse_counted(self, raw: bytes | str) -> ToolInvocation:
        """:meth:`parse`, for the line of a record that counts (a full record is made
        only for those): equal to it, and cheaper for a line that is normal but for a
        missing `id` (telemetry not written by binloop's client): such a record is the
        line as read with the content hash added, where `parse` first builds the
        normalised copy. (Its keys keep the line's order, `id` last: every writer of
        records sorts them.)"""
        size = len(raw)
        if size > min(LINE_MAX_BYTES, self.limits.args_max_bytes):
            return self.parse(raw)
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return self.parse(raw)
        if (type(obj) is dict and "id" not in obj
                and _is_normal(obj, self._future, self._modes, self._floor, id_absent=True)):
            obj["id"] = record_id(obj)
            return self._inferred(obj)  # type: ignore[arg-type]
        return self._record(obj, size)

    def _record(self, obj: Any, size: int) -> ToolInvocation:
        """The record of a line read as `obj` (`size` bytes)."""
        if not isinstance(obj, dict):
            raise InvalidRecord(f"not a JSON object but {type(obj).__name__}")
        if size <= self.limits.args_max_bytes and _is_normal(obj, self._future, self._modes,
                                                             self._floor):
            rec: ToolInvocation = obj  # type: ignore[assignment]
        else:
            rec = self._counted(obj, _normalise(obj, self.limits, size))
        return self._inferred(rec)

    def _inferred(self, rec: ToolInvocation) -> ToolInvocation:
        """`rec`, with the failure mode its error text gives where the settings say so."""
        if rec["outcome"] in self._infer and (rec["failure_mode"] is None or self._override):
            return with_inferred_mode(rec)
        return rec

    def validate(self, obj: dict[str, Any], encoded_size: int | None = None) -> ToolInvocation:
        if (encoded_size is not None and encoded_size <= self.limits.args_max_bytes
                and _is_normal(obj, self._future, self._modes, self._floor)):
            rec: ToolInvocation = obj  # type: ignore[assignment]
        else:
            rec = self._counted(obj, _normalise(obj, self.limits, encoded_size))
        return self._inferred(rec)

    def validate_built(self, obj: dict[str, Any], encoded_size: int | None) -> ToolInvocation:
        """:meth:`validate` for a record that a mapper built normal by construction: a
        64-hex `id`, dict `args`, an outcome of OUTCOMES, `failure_mode` None, an int
        `duration_ms` >= 0, `agent_id` and `error` cut to STRING_FIELD_MAX_CHARS, no
        other key (the OTLP mapping: the tests hold it to `_is_normal`). Only what came
        from outside is checked here (ts, session id, tool, size): a third of the cost
        of the full check, which any doubt falls back to."""
        ts, sid, tool = obj["ts"], obj["session_id"], obj["tool"]
        if (encoded_size is not None and encoded_size <= self.limits.args_max_bytes
                and not self._infer and self._floor <= ts <= self._future
                and 0 < len(tool) <= TOOL_MAX_CHARS
                and (type(sid) is int or 0 < len(sid) <= TOOL_MAX_CHARS)):
            return obj  # type: ignore[return-value]
        return self.validate(obj, encoded_size)

    def _counted(self, obj: dict[str, Any], rec: ToolInvocation) -> ToolInvocation:
        if rec["ts"] != obj.get("ts"):
            self.ts_converted += 1
        return rec


def with_inferred_mode(rec: ToolInvocation) -> ToolInvocation:
    """A copy of a valid record with the failure mode its error text gives and the
    template behind it (its `id` stays: it identifies the call, not the verdict). A
    record without error text is left as it is: there is nothing to infer from."""
    error = rec.get("error")
    if not error or error.isspace():
        return rec
    verdict = classify(error, rec["outcome"])
    inferred: ToolInvocation = {**rec}
    inferred["failure_mode"] = verdict.failure_mode
    inferred["error_template"] = verdict.template
    return inferred


def ts_floor(ts_unit: str) -> float:
    """The smallest ts that is taken as milliseconds as it is (smaller ones are seconds)."""
    return {"ms": 0, "auto": SECONDS_BELOW}.get(ts_unit, math.inf)


def _already_normal(obj: dict[str, Any], limits: RecordLimits) -> ToolInvocation | None:
    """`obj` itself when it is exactly what `_normalise` would return, else None."""
    if _is_normal(obj, _future_bound(limits.max_future_skew_ms), _mode_cache(limits.taxonomy),
                  ts_floor(limits.ts_unit)):
        return obj  # type: ignore[return-value]
    return None


def _is_normal(obj: dict[str, Any], future: float, modes: dict[str, str],
               floor: float = 0, id_absent: bool = False) -> bool:
    """Whether `obj` is exactly what `_normalise` would return (so it can be taken as is);
    with `id_absent`, whether it is that but for its `id`, which it lacks (the key too).

    The hot path: telemetry written by our own client is already normal, and checking
    that costs a fraction of building a new record. Anything unusual (a missing or
    null optional field, an unknown key, an upper-case outcome, a failure mode not yet
    seen) falls through to `_normalise`, which gives the reasons. Unknown keys: the
    seven required fields are present (checked one by one), each optional one present
    is counted, and the record may have no other key.
    """
    get = obj.get
    ts, sid, tool, rid = get("ts"), get("session_id"), get("tool"), get("id")
    mode = get("failure_mode", _ABSENT)
    duration, agent, error = get("duration_ms"), get("agent_id"), get("error")
    template = get("error_template")
    return bool(
        type(ts) is int and floor <= ts <= future
        and (type(sid) is int or (type(sid) is str and 0 < len(sid) <= TOOL_MAX_CHARS))
        and type(tool) is str and 0 < len(tool) <= TOOL_MAX_CHARS
        and type(get("args")) is dict and get("outcome") in OUTCOMES
        and (mode is None or (type(mode) is str and modes.get(mode) == mode))
        and (duration is None or (type(duration) is int and duration >= 0))
        and (agent is None or (type(agent) is str and len(agent) <= STRING_FIELD_MAX_CHARS))
        and (error is None or (type(error) is str and len(error) <= STRING_FIELD_MAX_CHARS))
        and (template is None
             or (type(template) is str and len(template) <= STRING_FIELD_MAX_CHARS))
        and (rid is None if id_absent
             else type(rid) is str and len(rid) == 64 and not rid.strip(ID_DIGITS))
        and len(obj) == 7 - id_absent + (duration is not None) + (agent is not None)
        + (error is not None) + (template is not None)
    )


class _RawArgsRecord(msgspec.Struct):
    """A record's known keys, `args` kept raw; unknown keys are skipped (syntax only)."""

    session_id: Any = msgspec.UNSET
    ts: Any = msgspec.UNSET
    tool: Any = msgspec.UNSET
    args: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    outcome: Any = msgspec.UNSET
    duration_ms: Any = msgspec.UNSET
    failure_mode: Any = msgspec.UNSET
    agent_id: Any = msgspec.UNSET
    error: Any = msgspec.UNSET
    error_template: Any = msgspec.UNSET
    id: Any = msgspec.UNSET


_RAW_ARGS_DECODER: Final = msgspec.json.Decoder(_RawArgsRecord)
_ORJSON_INT_MIN: Final = -(2**63)
_ORJSON_INT_MAX: Final = 2**64 - 1


def _read_with_raw_args(raw: bytes | str, args_max_bytes: int) -> dict[str, Any] | None:
    """A line orjson refused, read with `args` and unknown keys checked for syntax and
    UTF-8 only; None when the refusal stands (the rest of the line is bad)."""
    if isinstance(raw, bytes):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    try:
        found = _RAW_ARGS_DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    obj: dict[str, Any] = {}
    for name in found.__struct_fields__:
        value = getattr(found, name)
        if value is msgspec.UNSET:
            continue
        if name == "args":
            try:
                value = orjson.loads(value)
            except orjson.JSONDecodeError:
                value = _args_marker(bytes(value), args_max_bytes)
        elif type(value) is int and not _ORJSON_INT_MIN <= value <= _ORJSON_INT_MAX:
            try:
                value = float(value)  # as orjson reads it
            except OverflowError:  # orjson: "number is infinity"
                return None
        elif not _orjson_readable(value):
            return None
        obj[name] = value
    return obj


def _orjson_readable(value: Any) -> bool:
    """Whether orjson reads this decoded value the same (nested ints within 64 bits)."""
    if type(value) is int:
        return _ORJSON_INT_MIN <= value <= _ORJSON_INT_MAX
    if isinstance(value, list):
        return all(_orjson_readable(v) for v in value)
    if isinstance(value, dict):
        return all(_orjson_readable(v) for v in value.values())
    return True


def _args_marker(encoded: bytes, max_bytes: int) -> dict[str, Any]:
    preview = encoded[: max(0, max_bytes - 128)].decode("utf-8", errors="ignore")
    return {"_truncated": True, "_bytes": len(encoded), "_preview": preview}


def _future_bound(max_future_skew_ms: int | None) -> float:
    return math.inf if max_future_skew_ms is None else time.time() * 1000 + max_future_skew_ms


def _normalise(obj: dict[str, Any], limits: RecordLimits,
               encoded_size: int | None) -> ToolInvocation:
    args_bound = limits.args_max_bytes
    rec: ToolInvocation = {
        "session_id": _session_id(obj.get("session_id")),
        "ts": _timestamp(obj.get("ts"), limits.max_future_skew_ms, limits.ts_unit),
        "tool": _tool(obj.get("tool")),
        "args": _args(obj.get("args"), args_bound, encoded_size is not None and
                      encoded_size <= args_bound),
        "outcome": _outcome(obj.get("outcome")),
        "failure_mode": _failure_mode(obj.get("failure_mode"), limits.taxonomy),
    }
    if (duration := obj.get("duration_ms")) is not None:
        if type(duration) is not int or duration < 0:
            raise InvalidRecord(f"duration_ms must be an integer >= 0, got {duration!r}")
        rec["duration_ms"] = duration
    for name in ("agent_id", "error", "error_template"):
        if (value := obj.get(name)) is not None:
            if not isinstance(value, str):
                raise InvalidRecord(f"{name} must be a string, got {type(value).__name__}")
            rec[name] = value[:STRING_FIELD_MAX_CHARS]
    rec["id"] = _id(obj.get("id"), rec)
    return rec


def _id(value: Any, rec: ToolInvocation) -> str:
    if value is None:
        return record_id(rec)  # type: ignore[arg-type]
    if not isinstance(value, str) or not _HEX64.fullmatch(value):
        raise InvalidRecord("id must be a 64-character hex sha256")
    return value.lower()


def _session_id(value: Any) -> SessionId:
    if type(value) is int:
        return value
    if isinstance(value, str) and 0 < len(value) <= TOOL_MAX_CHARS:
        return value
    if value is None:
        raise InvalidRecord("missing field session_id")
    raise InvalidRecord(f"session_id must be an integer or a non-empty string, got {value!r:.80}")


def _timestamp(value: Any, max_future_skew_ms: int | None, ts_unit: str = "ms") -> int:
    if value is None:
        raise InvalidRecord("missing field ts")
    if ts_unit != "ms" and type(value) in (int, float) and 0 <= value < ts_floor(ts_unit):
        if not math.isfinite(value):
            raise InvalidRecord(f"ts must be a finite number of seconds, got {value!r:.80}")
        value = round(value * 1000)
    if type(value) is not int or value < 0:
        raise InvalidRecord(f"ts must be unix milliseconds (integer >= 0), got {value!r:.80}")
    if max_future_skew_ms is not None and value > time.time() * 1000 + max_future_skew_ms:
        raise InvalidRecord(f"ts {value} is more than {max_future_skew_ms} ms in the future")
    return value


def _tool(value: Any) -> str:
    if value is None:
        raise InvalidRecord("missing field tool")
    if not isinstance(value, str):
        raise InvalidRecord(f"tool must be a string, got {type(value).__name__}")
    if not value or len(value) > TOOL_MAX_CHARS:
        raise InvalidRecord(f"tool name must be 1-{TOOL_MAX_CHARS} characters, got {len(value)}")
    return value


def _args(value: Any, max_bytes: int, known_small: bool) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidRecord(f"args must be a JSON object, got {type(value).__name__}")
    if known_small:
        return value
    encoded = orjson.dumps(value)
    if len(encoded) <= max_bytes:
        return value
    return _args_marker(encoded, max_bytes)


def _outcome(value: Any) -> Outcome:
    if value in OUTCOMES:
        return value  # type: ignore[no-any-return]
    if value is None:
        raise InvalidRecord("missing field outcome")
    if not isinstance(value, str) or (lowered := value.lower()) not in OUTCOMES:
        raise InvalidRecord(f"outcome must be one of {sorted(OUTCOMES)}, got {value!r:.80}")
    return lowered  # type: ignore[return-value]


def _failure_mode(value: Any, taxonomy: frozenset[str]) -> str | None:
    if value is None:
        return None
    # Failure modes repeat endlessly in a stream: remember the ones already validated.
    cache = _mode_cache(taxonomy)
    if isinstance(value, str) and (known := cache.get(value)) is not None:
        return known
    mode = _check_failure_mode(value, taxonomy)
    if len(cache) >= _VALID_MODES_MAX:
        cache.clear()
    cache[value] = mode
    return mode


def _mode_cache(taxonomy: frozenset[str]) -> dict[str, str]:
    cache = _VALID_MODES.get(taxonomy)
    if cache is None:
        if len(_VALID_MODES) >= 64:  # taxonomies come from configs: a handful
            _VALID_MODES.clear()
        cache = _VALID_MODES[taxonomy] = {}
    return cache


def _check_failure_mode(value: Any, taxonomy: frozenset[str]) -> str:
    if not isinstance(value, str) or not value or len(value) > FAILURE_MODE_MAX_CHARS:
        raise InvalidRecord(
            f"failure_mode must be null or a string of 1-{FAILURE_MODE_MAX_CHARS} characters")
    levels = value.split(".")
    if not all(_MODE_LEVEL.fullmatch(level) for level in levels):
        raise InvalidRecord(f"failure_mode {value!r:.80} is not dot-separated [A-Za-z0-9_-] levels")
    levels[0] = levels[0].upper()
    if levels[0] not in taxonomy:
        raise InvalidRecord(f"failure_mode level 1 {levels[0]!r} is not in the taxonomy")
    return ".".join(levels)


def dumps_record(rec: ToolInvocation) -> bytes:
    """Canonical JSONL encoding (sorted keys, no newline)."""
    return orjson.dumps(rec, option=orjson.OPT_SORT_KEYS)
