"""The OTLP mapping's short validation (`RecordParser.validate_built`) against the full
one: the same records kept, the same ones rejected with the same reasons, and every
record it keeps exactly what `_is_normal` takes as it is."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from binloop.core import schema
from binloop.core.schema import InvalidRecord, RecordLimits, RecordParser
from binloop.replay.otlp import attribute, map_request, span_record

NOW_NS = 1_760_000_000_000 * 1_000_000
texts = st.one_of(st.just(""), st.text(max_size=12), st.text(min_size=250, max_size=300),
                  st.text(alphabet="ab", min_size=4090, max_size=4200))
times = st.one_of(st.just(0), st.integers(0, 2**63), st.integers(NOW_NS - 10**15, NOW_NS),
                  st.integers(NOW_NS, NOW_NS + 10**18))
args = st.one_of(st.none(), texts, st.dictionaries(st.text(max_size=8), st.text(max_size=3000),
                                                   max_size=3).map(json.dumps))
spans = st.fixed_dictionaries({
    "tool": texts, "conversation": st.one_of(st.none(), texts),
    "session": st.one_of(st.none(), texts, st.integers(-2**63, 2**63 - 1)),
    "start": times, "end": times, "args": args, "error_type": st.one_of(st.none(), texts),
    "status_error": st.booleans(), "message": texts, "agent": st.one_of(st.none(), texts),
    "trace": st.sampled_from([b"", b"\x01" * 16]),
})


def request_of(items: list[dict[str, Any]]) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for i, item in enumerate(items):
        span = scope.spans.add()
        span.trace_id, span.span_id = item["trace"], i.to_bytes(8, "big")
        span.name = "execute_tool " + item["tool"]
        span.start_time_unix_nano, span.end_time_unix_nano = item["start"], item["end"]
        span.attributes.append(attribute("gen_ai.operation.name", "execute_tool"))
        for key, name in (("conversation", "gen_ai.conversation.id"), ("session", "session.id"),
                          ("args", "gen_ai.tool.call.arguments"),
                          ("error_type", "error.type"), ("agent", "gen_ai.agent.name")):
            if item[key] is not None:
                span.attributes.append(attribute(name, item[key]))
        if item["status_error"]:
            span.status.code = Status.STATUS_CODE_ERROR
            span.status.message = item["message"]
    return request


def full_validation(request: ExportTraceServiceRequest, parser: RecordParser
                    ) -> tuple[list[dict[str, Any]], list[str]]:
    kept, reasons = [], []
    for span in request.resource_spans[0].scope_spans[0].spans:
        attrs = {kv.key: kv for kv in span.attributes}
        rec, bound, _ = span_record(span, attrs, span.name.removeprefix("execute_tool "))
        try:
            kept.append(dict(parser.validate(rec, bound)))
        except InvalidRecord as exc:
            reasons.append(f"span {span.span_id.hex()}: {exc}")
    return kept, reasons


@settings(max_examples=150, deadline=None)
@given(st.lists(spans, min_size=1, max_size=6))
def test_the_short_check_keeps_and_rejects_what_the_full_one_does(
        items: list[dict[str, Any]]) -> None:
    request = request_of(items)
    limits = RecordLimits(max_future_skew_ms=10**9 * 1000)
    mapped = map_request(request, RecordParser(limits))
    kept, reasons = full_validation(request, RecordParser(limits))
    assert mapped.records == kept
    assert mapped.rejected == reasons
    for rec in mapped.records:
        assert schema._already_normal(rec, limits) is rec


def test_the_short_check_falls_back_where_a_bound_fails() -> None:
    parser = RecordParser(RecordLimits(max_future_skew_ms=0, ts_unit="auto"))
    built = {"id": "0" * 64, "session_id": "s", "ts": 5, "tool": "t", "args": {},
             "outcome": "success", "failure_mode": None}
    # seconds under ts_unit auto: the full check converts them (not taken as they are)
    assert parser.validate_built(dict(built), 2)["ts"] == 5000
    for field, value in (("tool", ""), ("tool", "x" * 300), ("session_id", ""),
                         ("ts", 10**16)):
        bad = {**built, "ts": 1_700_000_000_000, field: value}
        try:
            parser.validate_built(bad, 2)
        except InvalidRecord as exc:
            assert field.split("_")[0] in str(exc)
        else:
            raise AssertionError(f"{field}={value!r} was kept")
