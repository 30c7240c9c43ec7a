"""OTLP in: the span mapping, the OTLP/HTTP receiver (`binloop ingest otlp`) fed by the
real OpenTelemetry SDK and exporters, `--input-format otlp-json`, and the job on NATS."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.json.common._internal.trace_encoder import (
    encode_spans as encode_json,
)
from opentelemetry.exporter.otlp.json.http.trace_exporter import (
    OTLPSpanExporter as JsonExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as ProtoExporter,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace import Status as SpanStatus

from binloop.cli.commands.detect import detect
from binloop.cli.commands.run import run_live
from binloop.core.config import Config
from binloop.nats.server import NatsServer
from binloop.receiver.otlp_http import (
    OtlpReceiver,
    ReceiverServer,
    ReceiverSettings,
)
from binloop.receiver.sinks import JsonlSink, NatsSink, NatsTarget, SinkUnavailable
from binloop.replay.formats import sniff_file
from binloop.replay.otlp import attribute, decode_json, decode_protobuf, map_request
from tests.nats_fixtures import live_config, stream_messages

SESSION = "conv-42"
BOOKING_ERROR = "payment amount does not add up, total price is {total}, but paid {paid}"


# --- a scripted agent traced with the real SDK -------------------------------------------

def agent_spans(conversation: str = SESSION, failures: int = 4) -> list[ReadableSpan]:
    """What an agent instrumented per the GenAI conventions records: an agent span, chat
    spans, and execute_tool spans (successes, failures with status descriptions and
    exception events, a timeout), in one trace."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "airline-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("scripted-agent")
    common = {"gen_ai.conversation.id": conversation, "gen_ai.agent.id": "agent-7"}
    with tracer.start_as_current_span("invoke_agent airline", kind=SpanKind.INTERNAL,
                                      attributes={"gen_ai.operation.name": "invoke_agent",
                                                  **common}):
        with tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT,
                                          attributes={"gen_ai.operation.name": "chat"}):
            pass
        for i in range(failures):
            _tool_span(tracer, "book_reservation", common, {"amount": 100 + i},
                       error=BOOKING_ERROR.format(total=300 + i, paid=250 + i))
            _tool_span(tracer, "get_user_details", common, {"user_id": f"u{i}"})
        for i in range(3):  # an exception event, no status description
            with tracer.start_as_current_span(
                    "execute_tool read_file",
                    attributes={"gen_ai.operation.name": "execute_tool",
                                "gen_ai.tool.name": "read_file",
                                "gen_ai.tool.call.arguments": json.dumps({"path": f"a{i}.py"}),
                                **common}, record_exception=False,
                    set_status_on_exception=False) as span:
                span.record_exception(FileNotFoundError(2, "No such file or directory",
                                                        f"src/a{i}.py"))
                span.set_status(SpanStatus(StatusCode.ERROR))
        with tracer.start_as_current_span(
                "execute_tool http_get",
                attributes={"gen_ai.operation.name": "execute_tool",
                            "gen_ai.tool.name": "http_get", "error.type": "TimeoutError",
                            **common}) as span:
            span.set_status(SpanStatus(StatusCode.ERROR, "read timed out after 30 s"))
    provider.shutdown()
    return list(memory.get_finished_spans())


def _tool_span(tracer: Any, tool: str, common: dict[str, str], args: dict[str, Any],
               error: str | None = None) -> None:
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
             "gen_ai.tool.call.id": f"call_{tool}", "gen_ai.tool.type": "function",
             "gen_ai.tool.call.arguments": json.dumps(args), **common}
    if error:
        attrs["error.type"] = "ToolError"
    with tracer.start_as_current_span(f"execute_tool {tool}", kind=SpanKind.INTERNAL,
                                      attributes=attrs) as span:
        if error:
            span.set_status(SpanStatus(StatusCode.ERROR, error))


def proto_request(spans: list[ReadableSpan]) -> ExportTraceServiceRequest:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return encode_spans(spans)


# --- the mapping -------------------------------------------------------------------------

def test_tool_spans_map_field_by_field() -> None:
    spans = agent_spans()
    mapped = map_request(proto_request(spans))
    assert mapped.ignored == 2 and not mapped.rejected  # invoke_agent, chat
    by_tool: dict[str, list[dict[str, Any]]] = {}
    for rec in mapped.records:
        by_tool.setdefault(rec["tool"], []).append(rec)
    assert {t: len(r) for t, r in by_tool.items()} == {
        "book_reservation": 4, "get_user_details": 4, "read_file": 3, "http_get": 1}
    first = by_tool["book_reservation"][0]
    span = next(s for s in spans if s.name == "execute_tool book_reservation")
    assert first["session_id"] == SESSION and first["agent_id"] == "agent-7"
    assert first["outcome"] == "failure" and first["failure_mode"] is None
    assert first["error"] == "ToolError: " + BOOKING_ERROR.format(total=300, paid=250)
    assert first["args"] == {"amount": 100}
    assert first["ts"] == span.end_time // 1_000_000
    assert first["duration_ms"] == (span.end_time - span.start_time) // 1_000_000
    assert all(r["outcome"] == "success" and "error" not in r
               for r in by_tool["get_user_details"])
    read = by_tool["read_file"][0]
    assert read["outcome"] == "failure"
    assert read["error"] == "FileNotFoundError: [Errno 2] No such file or directory: 'src/a0.py'"
    assert by_tool["http_get"][0]["outcome"] == "timeout"
    assert by_tool["http_get"][0]["error"] == "TimeoutError: read timed out after 30 s"
    ids = [r["id"] for r in mapped.records]
    assert len(set(ids)) == len(ids)
    # the same export again: the same ids (a retry is a duplicate)
    assert [r["id"] for r in map_request(proto_request(spans)).records] == ids


def test_older_conventions_and_bad_spans() -> None:
    request = proto_request(agent_spans(failures=1))
    span = request.resource_spans[0].scope_spans[0].spans.add()
    span.name = "execute_tool legacy_tool"  # v1.36-style: no operation name, no args
    span.trace_id, span.span_id = b"\x01" * 16, b"\x02" * 8
    span.start_time_unix_nano, span.end_time_unix_nano = 1_700_000_000_000_000_000, 0
    span.status.code = 2
    span.status.message = "permission denied"
    empty = request.resource_spans[0].scope_spans[0].spans.add()
    empty.attributes.append(attribute("gen_ai.operation.name", "execute_tool"))
    empty.trace_id, empty.span_id = b"\x03" * 16, b"\x04" * 8
    mapped = map_request(request)
    legacy = [r for r in mapped.records if r["tool"] == "legacy_tool"]
    assert len(legacy) == 1 and legacy[0]["session_id"] == "01" * 16  # the trace id
    assert legacy[0]["ts"] == 1_700_000_000_000 and legacy[0]["args"] == {}
    assert "duration_ms" not in legacy[0]
    assert len(mapped.rejected) == 1 and "tool name" in mapped.rejected[0]


def test_args_over_the_size_limit_once_written_as_json_are_truncated_as_any_record() -> None:
    """Text args are stored as `{"_raw": text}`, whose JSON can be six times the text
    (control characters): the validator measures them and applies the args limit."""
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id = b"\x01" * 16, b"\x02" * 8
    span.end_time_unix_nano = 1_700_000_000_000_000_000
    span.attributes.extend([attribute("gen_ai.operation.name", "execute_tool"),
                            attribute("gen_ai.tool.name", "t"),
                            attribute("gen_ai.tool.call.arguments", "\x01" * 1500)])
    args = map_request(request).records[0]["args"]
    assert args["_truncated"] is True and args["_bytes"] > 8192


def test_the_json_encoding_maps_as_protobuf_does() -> None:
    spans = agent_spans()
    from_proto = map_request(proto_request(spans)).records
    from_json = map_request(decode_json(encode_json(spans).to_json())).records
    assert from_json == from_proto
    assert decode_protobuf(proto_request(spans).SerializeToString()) == proto_request(spans)


# --- the receiver ----------------------------------------------------------------------------

@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[ReceiverServer, Path]]:
    out = tmp_path / "records.jsonl"
    sink = JsonlSink(out)
    server = ReceiverServer(("127.0.0.1", 0), OtlpReceiver(
        sink, ReceiverSettings(max_body_bytes=1 << 20, token="s3cret")))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, out
    finally:
        server.shutdown()
        server.server_close()
        sink.close()


def _post(server: ReceiverServer, body: bytes, content_type: str = "application/x-protobuf",
          **headers: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=10)
    conn.request("POST", headers.pop("path", "/v1/traces"), body,
                 {"Content-Type": content_type, "Authorization": "Bearer s3cret", **headers})
    return conn.getresponse()


def _records(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_real_exporters_protobuf_gzip_and_json(receiver: tuple[ReceiverServer, Path]) -> None:
    server, out = receiver
    spans = agent_spans()
    auth = {"Authorization": "Bearer s3cret"}
    proto = ProtoExporter(endpoint=server.url + "/v1/traces", headers=auth,
                          compression=Compression.Gzip)
    assert proto.export(spans) == SpanExportResult.SUCCESS
    as_json = JsonExporter(endpoint=server.url + "/v1/traces", headers=auth)
    assert as_json.export(spans) == SpanExportResult.SUCCESS
    records = _records(out)
    assert len(records) == 2 * 12
    assert records[:12] == records[12:]  # the same spans: the same records and ids
    stats = server.receiver.stats
    assert (stats.records_stored, stats.ignored_spans, stats.malformed) == (24, 4, 0)
    # a wrong token is refused, by the real exporter too (it does not retry a 401)
    wrong = ProtoExporter(endpoint=server.url + "/v1/traces",
                          headers={"Authorization": "Bearer nope"})
    assert wrong.export(spans) == SpanExportResult.FAILURE
    assert len(_records(out)) == 24 and stats.unauthorized == 1


def test_status_codes(receiver: tuple[ReceiverServer, Path]) -> None:
    server, out = receiver
    good = proto_request(agent_spans(failures=1)).SerializeToString()
    assert _post(server, good).status == 200
    bad = _post(server, b"\x0a\xff\xff\xff garbage")
    assert bad.status == 400
    status = Status()
    status.ParseFromString(bad.read())
    assert "ExportTraceServiceRequest" in status.message
    bad_json = _post(server, b"{not json", "application/json")
    assert bad_json.status == 400 and json.loads(bad_json.read())["message"].startswith("not")
    assert _post(server, b"not gzip", **{"Content-Encoding": "gzip"}).status == 400
    assert _post(server, good, "text/plain").status == 415
    assert _post(server, good, path="/v1/metrics").status == 404
    assert _post(server, b"x" * (2 << 20)).status == 413
    bomb = gzip.compress(b"\0" * (8 << 20))
    assert len(bomb) < (1 << 20) and _post(server, bomb, **{"Content-Encoding": "gzip"}).status \
        == 413
    assert _post(server, good, Authorization="").status == 401
    stats = server.receiver.stats
    assert (stats.malformed, stats.too_large) == (3, 2)
    assert len(_records(out)) == 6  # only the good request's tool spans


def test_partial_success_names_the_rejected_spans(
        receiver: tuple[ReceiverServer, Path]) -> None:
    server, out = receiver
    request = proto_request(agent_spans(failures=1))
    bad = request.resource_spans[0].scope_spans[0].spans.add()
    bad.attributes.append(attribute("gen_ai.operation.name", "execute_tool"))
    bad.attributes.append(attribute("gen_ai.tool.name", "t" * 300))
    bad.trace_id, bad.span_id = b"\x05" * 16, b"\x06" * 8
    reply = _post(server, request.SerializeToString())
    assert reply.status == 200
    answer = ExportTraceServiceResponse()
    answer.ParseFromString(reply.read())
    assert answer.partial_success.rejected_spans == 1
    assert "tool name" in answer.partial_success.error_message
    assert len(_records(out)) == 6


def test_a_full_buffer_answers_429_and_loses_nothing(
        receiver: tuple[ReceiverServer, Path]) -> None:
    server, out = receiver
    server.receiver.settings = ReceiverSettings(max_inflight_spans=8, token="s3cret")
    body = proto_request(agent_spans(failures=1)).SerializeToString()
    sink: JsonlSink = server.receiver.sink  # type: ignore[assignment]
    first: list[int] = []
    with sink._lock:  # the disk is slow: the first request waits inside the real sink
        slow = threading.Thread(target=lambda: first.append(_post(server, body).status))
        slow.start()
        deadline = time.monotonic() + 5
        while server.receiver._inflight == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        busy = _post(server, body)
        assert busy.status == 429 and busy.getheader("Retry-After") == "1"
    slow.join(10)
    assert first == [200]
    assert _post(server, body).status == 200  # the retry after the buffer drained
    assert len(_records(out)) == 12


def test_secrets_are_masked_before_the_sink_and_ids_stay(
        receiver: tuple[ReceiverServer, Path]) -> None:
    """What a real exporter sends with a password in the args and a token in the error
    text reaches the file masked; the same export again gives the same records."""
    server, out = receiver
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("leaky-agent")
    token = "ghp_" + "aB3xY9" * 6
    for attempt in range(2):  # the same text twice: the remembered verdict is the same
        _tool_span(tracer, "http_get", {"gen_ai.conversation.id": SESSION},
                   {"url": "https://api.example.com", "password": f"hunter{attempt}"},
                   error=f"401 Unauthorized: Authorization: Bearer {token}")
    provider.shutdown()
    spans = list(memory.get_finished_spans())
    auth = {"Authorization": "Bearer s3cret"}
    exporter = ProtoExporter(endpoint=server.url + "/v1/traces", headers=auth)
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    text = out.read_text()
    assert "hunter" not in text and token not in text and "[REDACTED]" in text
    records = _records(out)
    assert records[:2] == records[2:] and len({r["id"] for r in records}) == 2
    assert records[0]["args"] == {"url": "https://api.example.com", "password": "[REDACTED]"}
    assert records[0]["session_id"] == SESSION and records[0]["tool"] == "http_get"
    assert server.receiver.stats.redacted_records == 4


def test_args_nested_deeper_than_json_is_written_are_kept_as_text(
        receiver: tuple[ReceiverServer, Path]) -> None:
    server, out = receiver
    request = proto_request(agent_spans(failures=1))
    deep = request.resource_spans[0].scope_spans[0].spans.add()
    nested = '{"a": ' + "[" * 400 + "]" * 400 + "}"
    deep.attributes.extend([attribute("gen_ai.operation.name", "execute_tool"),
                            attribute("gen_ai.tool.name", "deep"),
                            attribute("gen_ai.tool.call.arguments", nested)])
    deep.trace_id, deep.span_id = b"\x07" * 16, b"\x08" * 8
    deep.end_time_unix_nano = 1_700_000_000_000_000_000
    assert _post(server, request.SerializeToString()).status == 200
    kept = [r for r in _records(out) if r["tool"] == "deep"]
    assert len(kept) == 1 and kept[0]["args"] == {"_raw": nested}


# --- the command, the job and NATS -----------------------------------------------------------

def start_receiver(tmp_path: Path, *args: str, env: dict[str, str] | None = None
                   ) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "binloop.cli", "ingest", "otlp",
                             "--listen", "127.0.0.1:0", "--stats-out",
                             str(tmp_path / "stats.json"), *args],
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    assert proc.stderr is not None
    seen = ""
    while not (found := re.search(r"listening on (http://\S+)/v1/traces", seen)):
        line = proc.stderr.readline()
        assert line, seen + (proc.stderr.read() if proc.poll() is not None else "")
        seen += line
    return proc, found.group(1)


def stop_receiver(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    return err


def test_ingest_to_a_file_then_detect(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    proc, url = start_receiver(tmp_path, "--out", str(out))
    try:
        exporter = ProtoExporter(endpoint=url + "/v1/traces")
        assert exporter.export(agent_spans()) == SpanExportResult.SUCCESS
        assert exporter.export(agent_spans(conversation="conv-43")) == SpanExportResult.SUCCESS
    finally:
        stop_receiver(proc)
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["records_stored"] == 24 and stats["ignored_spans"] == 4
    events = tmp_path / "events.jsonl"
    assert detect(Config(input=str(out), out=str(events), theta=3, engine="reference",
                         progress=False)).valid == 24
    fired = [orjson.loads(line) for line in events.read_bytes().splitlines()]
    # each key fires once (then it is disarmed), in the first conversation
    assert sorted((e["tool"], e["failure_mode"].split(".")[0], e["session_id"])
                  for e in fired) == [
        ("book_reservation", "RUNTIME", "conv-42"), ("read_file", "NOTFOUND", "conv-42")]
    booking = next(e for e in fired if e["tool"] == "book_reservation")
    assert booking["evidence"][-1]["error_template"] == (
        "ToolError: payment amount does not add up, total price is <NUM>, but paid <NUM>")


def collector_file(path: Path, exports: list[list[ReadableSpan]]) -> Path:
    """What the Collector's file exporter writes: one ExportTraceServiceRequest in OTLP
    JSON per line."""
    lines = [encode_json(spans).to_json().replace("\n", "") for spans in exports]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("engine", ["reference", "polars", "bytewax"])
def test_detect_reads_collector_files(tmp_path: Path, engine: str) -> None:
    path = collector_file(tmp_path / "traces.json", [agent_spans(), agent_spans("conv-43")])
    with path.open("a") as handle:
        handle.write('{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}\n')
    assert sniff_file(str(path)) == "otlp-json"
    runs = {}
    for fmt in ("otlp-json", "auto"):
        out, dead = tmp_path / f"{fmt}.jsonl", tmp_path / f"{fmt}.dead.jsonl"
        summary = detect(Config(input=str(path), out=str(out), dead_letter=str(dead), theta=3,
                                engine=engine, input_format=fmt, progress=False))
        # a line is an export request: 3 read, 24 tool records in the 2 good ones
        assert (summary.records_read, summary.valid, summary.invalid) == (3, 24, 1)
        runs[fmt] = sorted(out.read_text().splitlines())
        letters = [json.loads(line) for line in dead.read_text().splitlines()]
        assert [(d["position"], "not hex" in d["reason"]) for d in letters] == [("3", True)]
    assert runs["auto"] == runs["otlp-json"] and len(runs["auto"]) == 2


def test_the_nats_sinks_envelopes_are_what_the_publisher_builds() -> None:
    """The sink's envelopes (lines joined as they are encoded) are byte for byte the
    publisher's `envelope_message` of the records' lines: payload, subject, Nats-Msg-Id."""
    from binloop.nats.publish import envelope_message
    from binloop.receiver.sinks import envelopes, jsonl, record_line

    records = map_request(proto_request(agent_spans(failures=5))).records
    assert len({r["tool"] for r in records}) == 4
    assert jsonl(records) == b"".join(record_line(r) + b"\n" for r in records)
    for size in (1, 2, 512):
        expected = []
        for tool in dict.fromkeys(r["tool"] for r in records):
            mine = [r for r in records if r["tool"] == tool]
            for start in range(0, len(mine), size):
                part = mine[start:start + size]
                expected.append(envelope_message([record_line(r) for r in part],
                                                 part[0]["session_id"], tool,
                                                 [r["id"] for r in part], "tel"))
        assert envelopes(records, "tel", size) == expected
        assert sum(m.records for m in expected) == len(records)


def test_receiver_to_nats_and_the_job_fires(nats_server: NatsServer, tmp_path: Path) -> None:
    proc, url = start_receiver(tmp_path, "--nats", nats_server.url, "--partitions", "4")
    spans = agent_spans()
    try:
        exporter = ProtoExporter(endpoint=url + "/v1/traces", compression=Compression.Gzip)
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        assert exporter.export(spans) == SpanExportResult.SUCCESS  # a retried export
    finally:
        stop_receiver(proc)
    messages = stream_messages(nats_server.url, "TELEMETRY")
    assert all(h.get("Binloop-Batch") == "jsonl" and h.get("Nats-Msg-Id") for _, h, _ in messages)
    stored = [line for _, _, body in messages for line in body.splitlines() if line]
    assert len(stored) == 12  # the retry was a duplicate for the stream
    config = live_config(nats_server.url, tmp_path, theta="3", partitions="4")
    summary = run_live(config)
    fired = [orjson.loads(line) for line in (tmp_path / "events.jsonl").read_bytes().splitlines()]
    assert sorted((e["tool"], e["failure_mode"].split(".")[0]) for e in fired) == [
        ("book_reservation", "RUNTIME"), ("read_file", "NOTFOUND")]
    assert summary.valid == 12 and summary.events_fired == 2


def telemetry_sink(server: NatsServer, ack_timeout_s: float) -> NatsSink:
    """A NATS sink on the one-partition TELEMETRY stream of `server`."""
    from binloop.nats.jetstream import connect, ensure_telemetry_stream, telemetry_stream_spec

    spec = telemetry_stream_spec("TELEMETRY", "telemetry", 1)

    async def connect_stream() -> Any:
        nc = await connect(server.url, "test-otlp", 10)
        js = nc.jetstream(timeout=5.0)
        await ensure_telemetry_stream(js, spec)
        return nc, js

    return NatsSink(NatsTarget(server.url, "telemetry", connect_stream,
                               ack_timeout_s=ack_timeout_s))


def test_nats_down_is_503_with_retry_after_and_nothing_lost(nats_server: NatsServer,
                                                           tmp_path: Path) -> None:
    sink = telemetry_sink(nats_server, ack_timeout_s=2)
    server = ReceiverServer(("127.0.0.1", 0), OtlpReceiver(sink))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    first = proto_request(agent_spans(failures=1)).SerializeToString()
    second = proto_request(agent_spans(conversation="conv-9", failures=1)).SerializeToString()
    try:
        assert _post(server, first).status == 200
        nats_server.stop()
        down = _post(server, second)
        assert down.status == 503 and int(down.getheader("Retry-After") or 0) >= 1
        nats_server.start()
        deadline = time.monotonic() + 20
        while (status := _post(server, second).status) != 200 and time.monotonic() < deadline:
            time.sleep(0.5)  # what an exporter does on 503: retry
        assert status == 200
    finally:
        server.shutdown()
        server.server_close()
        sink.close()
    stored = [orjson.loads(line) for _, _, body in stream_messages(nats_server.url, "TELEMETRY")
              for line in body.splitlines() if line]
    assert len({r["id"] for r in stored}) == 12
    assert {r["session_id"] for r in stored} == {SESSION, "conv-9"}


def test_unacknowledged_envelopes_are_503_and_the_retry_is_stored_once(
        nats_server: NatsServer) -> None:
    """A server that takes the envelopes but does not acknowledge them (stopped with
    SIGSTOP): `write` gives up after `ack_timeout_s` (the receiver answers 503); the
    exporter's retry of the same records, once the server runs again, is stored once."""
    sink = telemetry_sink(nats_server, ack_timeout_s=1)
    records = map_request(proto_request(agent_spans(failures=2))).records
    assert nats_server.pid is not None
    try:
        os.kill(nats_server.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(SinkUnavailable, match="did not answer in time"):
                sink.write(records)
            assert time.monotonic() - started < 5
        finally:
            os.kill(nats_server.pid, signal.SIGCONT)
        deadline = time.monotonic() + 20
        while True:  # what an exporter does on 503: retry
            try:
                sink.write(records)
                break
            except SinkUnavailable:
                assert time.monotonic() < deadline
                time.sleep(0.5)
    finally:
        sink.close()
    stored = [orjson.loads(line) for _, _, body in stream_messages(nats_server.url, "TELEMETRY")
              for line in body.splitlines() if line]
    assert sorted(r["id"] for r in stored) == sorted(r["id"] for r in records)


def test_the_format_names_are_the_registry() -> None:
    from binloop.core.input_formats import INPUT_FORMATS
    from binloop.replay.formats import FORMATS

    assert set(INPUT_FORMATS) == {"auto", *FORMATS}


def test_stopping_finishes_what_was_sent_and_refuses_the_rest(
        receiver: tuple[ReceiverServer, Path]) -> None:
    server, out = receiver
    body = proto_request(agent_spans(failures=1)).SerializeToString()
    sink: JsonlSink = server.receiver.sink  # type: ignore[assignment]
    first: list[int] = []
    stopped: list[bool] = []
    with sink._lock:
        slow = threading.Thread(target=lambda: first.append(_post(server, body).status))
        slow.start()
        while server.receiver._busy == 0:
            time.sleep(0.01)
        stopper = threading.Thread(target=lambda: stopped.append(server.receiver.stop(10)))
        stopper.start()
        while not server.receiver.stopping:
            time.sleep(0.01)
        late = _post(server, body)
        assert late.status == 503 and late.getheader("Retry-After") == "5"
        assert not stopped  # still waiting for the first request
    slow.join(10)
    stopper.join(10)
    assert first == [200] and stopped == [True]
    assert len(_records(out)) == 6
