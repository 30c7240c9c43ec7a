"""OpenTelemetry GenAI `execute_tool` spans onto the telemetry record (one documented place).

Decoding uses the official protobuf definitions (PyPI `opentelemetry-proto`); OTLP JSON
(the Collector's file exporter, OTLP/HTTP with `application/json`) goes through the same
message type after its hex ids are turned into the bytes protobuf's JSON mapping expects.

A span is a tool execution when `gen_ai.operation.name` is `execute_tool`, or, without
that attribute, when its name is `execute_tool <tool>`. Field by field:

- `id`: sha256 of `otlp:<trace id hex>:<span id hex>`, so a retried export is a duplicate
- `tool`: `gen_ai.tool.name`, else the span name after `execute_tool `
- `session_id`: `gen_ai.conversation.id`, else `session.id`, else the trace id (hex)
- `ts`: the span's end time in unix ms (its start time if it has no end)
- `duration_ms`: end - start in ms (absent when start is missing or end < start)
- `args`: `gen_ai.tool.call.arguments` when it is a JSON object (other JSON, text, or an
  object nested deeper than the 254 levels JSON is written with: `{"_raw": text}`; an
  attribute map: that map), else `{}`
- `outcome`: `failure` when the status is ERROR or `error.type` is set (`timeout` when
  the error type names a timeout or deadline, `cancelled` when it names a cancellation),
  else `success`
- `error` (failures only): `<error type>: <message>`; the message is the status
  description, else the newest exception event's `exception.message`; the type is
  `error.type`, else that event's `exception.type` (left out when the message already
  contains it, or is `_OTHER`)
- `agent_id`: `gen_ai.agent.id`, else `gen_ai.agent.name`
- `failure_mode`: null; binloop's parse step infers it from `error` (binloop.core.classify)

Semantic-convention versions: instrumentations on the v1.36 conventions emit the same
operation name, tool name and call id; they have no `gen_ai.tool.call.arguments` (args
stay empty) and may carry no `gen_ai.conversation.id` (the trace id is the session).
Exception events are read under the general name `exception` and the GenAI one
`gen_ai.execute_tool.exception` alike.
"""

from __future__ import annotations

import base64
import hashlib
from binascii import hexlify as _hexlify
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from binloop.core.schema import STRING_FIELD_MAX_CHARS, InvalidRecord, RecordParser

TOOL_OPERATION: Final = "execute_tool"
_NAME_PREFIX: Final = "execute_tool "
_PREFIX_LEN: Final = len(_NAME_PREFIX)
_SESSION_KEYS: Final = ("gen_ai.conversation.id", "session.id")
_ERROR: Final = Status.STATUS_CODE_ERROR
_HEX_ID_FIELDS: Final = ("traceId", "spanId", "parentSpanId")
_RAW_ARGS_MAX: Final = 2048
_sha256: Final = hashlib.sha256
# orjson reads JSON nested 1024 deep but writes only 254 levels; a text this short
# cannot nest deeper (two characters a level).
_ENCODABLE_TEXT: Final = 2 * 254
_UNBOUNDED: Final = 1 << 62


class MalformedBody(ValueError):
    """An export request that does not decode (the message is the reason)."""


@dataclass(slots=True)
class MappedSpans:
    """The records of an export request's tool spans, and what was left out."""

    records: list[dict[str, Any]] = field(default_factory=list)
    ignored: int = 0  # spans that are not tool executions
    rejected: list[str] = field(default_factory=list)  # a reason per invalid tool span
    redacted: int = 0  # records that had a secret masked

    def extend(self, other: MappedSpans) -> None:
        self.records.extend(other.records)
        self.ignored += other.ignored
        self.rejected.extend(other.rejected)
        self.redacted += other.redacted


def decode_protobuf(body: bytes) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except (DecodeError, RuntimeError) as exc:
        raise MalformedBody(f"not an ExportTraceServiceRequest (protobuf): {exc}") from None
    return request


def decode_json(body: bytes | str) -> ExportTraceServiceRequest:
    """An ExportTraceServiceRequest in OTLP JSON (hex trace and span ids, lowerCamelCase
    or original field names, enums as numbers or names)."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MalformedBody(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise MalformedBody("an OTLP JSON body must be a JSON object")
    try:
        _hex_ids_to_base64(obj)
        request = ExportTraceServiceRequest()
        json_format.ParseDict(obj, request, ignore_unknown_fields=True)
        return request
    except (json_format.ParseError, ValueError, TypeError, AttributeError) as exc:
        raise MalformedBody(f"not an ExportTraceServiceRequest (OTLP JSON): {exc}") from None


def _hex_ids_to_base64(obj: dict[str, Any]) -> None:
    """OTLP JSON writes ids as hex; protobuf's JSON mapping reads bytes as base64."""
    for resource_spans in _list(obj.get("resourceSpans", obj.get("resource_spans"))):
        for scope_spans in _list(resource_spans.get("scopeSpans",
                                                    resource_spans.get("scope_spans"))):
            for span in _list(scope_spans.get("spans")):
                _convert_ids(span)
                for link in _list(span.get("links")):
                    _convert_ids(link)


def _list(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError("expected a list of objects")
    return value


def _convert_ids(item: dict[str, Any]) -> None:
    for name in (*_HEX_ID_FIELDS, "trace_id", "span_id", "parent_span_id"):
        value = item.get(name)
        if isinstance(value, str) and value:
            try:
                item[name] = base64.b64encode(bytes.fromhex(value)).decode()
            except ValueError:
                raise ValueError(f"{name} {value[:40]!r} is not hex") from None


def map_request(request: ExportTraceServiceRequest, parser: RecordParser | None = None,
                validate: bool = True,
                redact: Callable[[dict[str, Any], str | None], int] | None = None,
                ) -> MappedSpans:
    """Every span of the request: tool spans as records (failure_mode null), validated
    unless the caller's parse step validates them (`validate=False`). `redact` masks
    secrets of a record in place before it is validated, and says how many; it is given
    the text the args were read from (None: they were not read from a text), on which a
    cache can key what `args_from_text` of that text redacts to."""
    check = (parser or RecordParser()).validate_built
    mapped = MappedSpans()
    records, rejected = mapped.records, mapped.rejected
    ignored = redacted = 0
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                # Keyed once per span; a value is wrapped only when the mapping reads it
                # (every upb field access builds a Python object: that is the cost here).
                attrs = {kv.key: kv for kv in span.attributes}
                tool = _tool_name(span, attrs)
                if tool is None:
                    ignored += 1
                    continue
                try:
                    rec, bound, args_text = span_record(span, attrs, tool)
                    if redact is not None and redact(rec, args_text):
                        redacted += 1
                        bound = None
                    if validate:
                        rec = check(rec, bound)  # type: ignore[assignment]
                    records.append(rec)
                except InvalidRecord as exc:
                    rejected.append(f"span {span.span_id.hex()}: {exc}")
    mapped.ignored, mapped.redacted = ignored, redacted
    return mapped


Attributes = dict[str, KeyValue]


def _tool_name(span: Span, attrs: Attributes) -> str | None:
    """The tool of an execute_tool span, None for any other span."""
    operation = attrs.get("gen_ai.operation.name")
    named = attrs.get("gen_ai.tool.name")
    if operation is not None:
        if operation.value.string_value != TOOL_OPERATION:
            return None
        if named is not None and (name := named.value.string_value):
            return name
        name = span.name
        return name[_PREFIX_LEN:] if name.startswith(_NAME_PREFIX) else ""
    name = span.name
    if not name.startswith(_NAME_PREFIX):
        return None
    if named is not None and (tool := named.value.string_value):
        return tool
    return name[_PREFIX_LEN:]


def span_record(span: Span, attrs: Attributes,
                tool: str) -> tuple[dict[str, Any], int | None, str | None]:
    """The record fields of one tool span (validated by the caller), a bound of the
    JSON size of its args: it lets small args skip re-encoding in the validator (the
    record is built normal already); masks change the size, so the caller that masks
    leaves the measuring to the validator. And the text the args were read from."""
    # The helpers are inlined for the common case (a string attribute; no exception
    # event): a function call costs as much as a field read here, at ~10 of each a span.
    get = attrs.get
    trace_id = span.trace_id
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    error_type = "" if (kv := get("error.type")) is None else _string(kv.value)
    status = span.status
    failed = status.code == _ERROR
    exception = _newest_exception(span.events) if span.events else None
    if exception is not None:
        error_type = error_type or exception[0]
        failed = True if error_type else failed
    elif error_type:
        failed = True
    if (kv := get("gen_ai.conversation.id")) is not None and (text := kv.value.string_value):
        session: str | int = text
    else:
        session = _session(attrs, trace_id)
    args, bound, args_text = _args(get("gen_ai.tool.call.arguments"))
    rec: dict[str, Any] = {
        "id": _sha256(b"otlp:" + _hexlify(trace_id) + b":" + _hexlify(span.span_id)).hexdigest(),
        "session_id": session,
        "ts": (end or start) // 1_000_000,
        "tool": tool,
        "args": args,
        "outcome": _outcome(error_type) if failed else "success",
        "failure_mode": None,
    }
    if start and end >= start:
        rec["duration_ms"] = (end - start) // 1_000_000
    agent_id, agent_name = get("gen_ai.agent.id"), get("gen_ai.agent.name")
    if (agent_id is not None or agent_name is not None) and (
            agent := _text(agent_id) or _text(agent_name)):
        rec["agent_id"] = agent[:STRING_FIELD_MAX_CHARS]
    if failed:  # the message is read only for a failure (each read builds an object)
        message = status.message or (exception[1] if exception is not None else "")
        if error := _error_text(error_type, message):
            rec["error"] = error[:STRING_FIELD_MAX_CHARS]
    return rec, bound, args_text


def _text(kv: KeyValue | None) -> str:
    return "" if kv is None else _string(kv.value)


def _string(value: AnyValue) -> str:
    if text := value.string_value:
        return text
    kind = value.WhichOneof("value")
    if kind in ("int_value", "double_value", "bool_value"):
        return str(getattr(value, kind))
    return ""


def _session(attrs: Attributes, trace_id: bytes) -> str | int:
    for name in _SESSION_KEYS:
        kv = attrs.get(name)
        if kv is None:
            continue
        value = kv.value
        if text := value.string_value:
            return text
        if value.WhichOneof("value") == "int_value":
            return value.int_value
        if text := _string(value):
            return text
    return trace_id.hex()


def _args(kv: KeyValue | None) -> tuple[dict[str, Any], int, str | None]:
    """The args, at least their JSON size, and the text they were read from (None: a
    map, or no arguments)."""
    if kv is None:
        return {}, 2, None
    value = kv.value
    if not (text := value.string_value):
        if value.WhichOneof("value") == "kvlist_value":
            return {item.key: any_value(item.value)
                    for item in value.kvlist_value.values}, _UNBOUNDED, None
        if not (text := _string(value)):
            return {}, 2, None
    args, bound = args_from_text(text)
    return args, bound, text


def args_from_text(text: str) -> tuple[dict[str, Any], int]:
    """The args a `gen_ai.tool.call.arguments` text gives, and at least their JSON size:
    re-encoding parsed JSON text grows it at most fivefold (a short exponent: `1e5` ->
    `100000.0`)."""
    try:
        parsed = orjson.loads(text)
        if len(text) > _ENCODABLE_TEXT and isinstance(parsed, dict):
            orjson.dumps(parsed)  # nested too deep to be written again: kept as text
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return _raw_args(text)
    return (parsed, 5 * len(text) + 2) if isinstance(parsed, dict) else _raw_args(text)


def _raw_args(text: str) -> tuple[dict[str, Any], int]:
    """`{"_raw": text}`; a character takes at most 6 bytes in JSON (`\\u001f`)."""
    raw = text[:_RAW_ARGS_MAX]
    return {"_raw": raw}, 6 * len(raw) + 12


def any_value(value: AnyValue) -> Any:
    """An OTLP attribute value as plain JSON data."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return None if kind is None else getattr(value, kind)


def _newest_exception(events: Iterable[Span.Event]) -> tuple[str, str] | None:
    found = None
    for event in events:
        if event.name == "exception" or event.name.endswith(".exception"):
            attrs = {kv.key: kv for kv in event.attributes}
            found = (_text(attrs.get("exception.type")), _text(attrs.get("exception.message")))
    return found


def _outcome(error_type: str) -> str:
    lowered = error_type.lower()
    if "timeout" in lowered or "timedout" in lowered or "deadline" in lowered:
        return "timeout"
    if "cancel" in lowered:
        return "cancelled"
    return "failure"


def _error_text(error_type: str, message: str) -> str:
    if error_type and message and error_type not in message and error_type != "_OTHER":
        return f"{error_type}: {message}"
    return message or error_type


def attribute(key: str, value: Any) -> KeyValue:
    """A KeyValue for a plain value (tests and the load generator build spans with it)."""
    kv = KeyValue(key=key)
    if isinstance(value, bool):
        kv.value.bool_value = value
    elif isinstance(value, int):
        kv.value.int_value = value
    elif isinstance(value, float):
        kv.value.double_value = value
    else:
        kv.value.string_value = str(value)
    return kv
