"""The OTLP/HTTP trace receiver: `POST /v1/traces` -> telemetry records -> a sink.

What it answers (OTLP/HTTP specification):

- 200 with an `ExportTraceServiceResponse`: every tool span is stored; where some tool
  spans could not be mapped onto a valid record, `partial_success` says how many and why
  (`rejected_spans`, `error_message`). Spans that are not tool executions are accepted,
  counted and ignored (not "rejected": nothing is wrong with them).
- 400: the body does not decode (not protobuf / OTLP JSON, bad gzip); counted.
- 401: a token is configured and the request lacks `Authorization: Bearer <token>`.
- 404 / 405: another path or method. 411: no Content-Length. 415: a content type other
  than `application/x-protobuf` or `application/json`.
- 413: the body (as sent, or once decompressed) is over `max_body_bytes`.
- 429 with Retry-After: more spans are in flight than `max_inflight_spans` (the buffer
  is full); 503 with Retry-After: the sink cannot store now (NATS down or slow, the disk
  full). Nothing of such a request was accepted: the exporter retries it.

Secrets in a record's args and error text are masked before the sink sees it
(binloop.receiver.redacting: the one redactor's rules).

Error bodies are a `google.rpc.Status` in the request's encoding. The receiver speaks
plain HTTP: TLS is the job of a proxy in front (or of an OpenTelemetry Collector, which
also turns OTLP/gRPC into OTLP/HTTP; docs/telemetry-in.md has a configuration).
"""

from __future__ import annotations

import hmac
import logging
import sys
import threading
import zlib
from dataclasses import dataclass, field, fields
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)

from binloop.core.schema import RecordParser
from binloop.receiver.redacting import redact_record
from binloop.receiver.sinks import Sink, SinkUnavailable
from binloop.replay.otlp import MalformedBody, decode_json, decode_protobuf, map_request

TRACES_PATH: Final = "/v1/traces"
PROTOBUF: Final = "application/x-protobuf"
JSON: Final = "application/json"
DEFAULT_MAX_BODY_BYTES: Final = 16 << 20
DEFAULT_MAX_INFLIGHT_SPANS: Final = 1 << 17
# An oversized body up to this size is read and thrown away before the 413 (beyond
# it the connection is closed unread: the client may see a reset instead).
_DRAIN_MAX_BYTES: Final = 64 << 20
_GRPC_INVALID_ARGUMENT: Final = 3
_GRPC_UNAVAILABLE: Final = 14
_GRPC_RESOURCE_EXHAUSTED: Final = 8
_GRPC_UNAUTHENTICATED: Final = 16
_GRPC_OTHER: Final = 2

log = logging.getLogger("binloop.receiver")


@dataclass
class ReceiverStats:
    """Counters of a running receiver (also logged at shutdown)."""

    requests: int = 0
    spans: int = 0
    tool_spans: int = 0
    records_stored: int = 0
    ignored_spans: int = 0
    rejected_spans: int = 0
    redacted_records: int = 0  # records stored with at least one secret masked
    malformed: int = 0
    too_large: int = 0
    unauthorized: int = 0
    throttled: int = 0
    unavailable: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def to_json(self) -> dict[str, int]:
        with self._lock:
            return {f.name: getattr(self, f.name) for f in fields(self)
                    if not f.name.startswith("_")}


@dataclass(frozen=True)
class ReceiverSettings:
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_inflight_spans: int = DEFAULT_MAX_INFLIGHT_SPANS
    token: str | None = None


class Rejected(Exception):
    """An answer other than 200 (status, message, Retry-After seconds)."""

    def __init__(self, status: HTTPStatus, message: str, grpc_code: int,
                 retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.grpc_code = grpc_code
        self.retry_after_s = retry_after_s


class OtlpReceiver:
    """Decodes, maps and stores one export request at a time per connection thread."""

    def __init__(self, sink: Sink, settings: ReceiverSettings | None = None) -> None:
        self.sink = sink
        self.settings = settings or ReceiverSettings()
        self.stats = ReceiverStats()
        self._inflight = 0
        self._inflight_lock = threading.Lock()
        self._busy = 0  # requests being answered
        self._idle = threading.Condition(self._inflight_lock)
        self.stopping = False

    def export(self, body: bytes, content_type: str, encoding: str,
               authorization: str | None) -> ExportTraceServiceResponse:
        """The answer to one `POST /v1/traces` (raises :class:`Rejected`)."""
        with self._inflight_lock:
            if self.stopping:
                self.stats.add(unavailable=1)
                raise Rejected(HTTPStatus.SERVICE_UNAVAILABLE, "the receiver is stopping",
                               _GRPC_UNAVAILABLE, 5)
            self._busy += 1
        try:
            return self._export(body, content_type, encoding, authorization)
        finally:
            with self._inflight_lock:
                self._busy -= 1
                self._idle.notify_all()

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Refuse new requests (503) and wait for those being answered; True if none is
        left (the sink may then be closed without failing an export midway)."""
        with self._inflight_lock:
            self.stopping = True
            return self._idle.wait_for(lambda: self._busy == 0, timeout_s)

    def _export(self, body: bytes, content_type: str, encoding: str,
                authorization: str | None) -> ExportTraceServiceResponse:
        self._authorize(authorization)
        raw = self._decompress(body, encoding)
        try:
            request = decode_json(raw) if content_type == JSON else decode_protobuf(raw)
        except MalformedBody as exc:
            self.stats.add(malformed=1)
            raise Rejected(HTTPStatus.BAD_REQUEST, str(exc), _GRPC_INVALID_ARGUMENT) from None
        mapped = map_request(request, RecordParser(), redact=redact_record)
        spans = len(mapped.records) + mapped.ignored + len(mapped.rejected)
        self._admit(len(mapped.records))
        try:
            self.sink.write(mapped.records)
        except SinkUnavailable as exc:
            self.stats.add(unavailable=1)
            raise Rejected(HTTPStatus.SERVICE_UNAVAILABLE, str(exc), _GRPC_UNAVAILABLE,
                           exc.retry_after_s) from None
        finally:
            with self._inflight_lock:
                self._inflight -= len(mapped.records)
        self.stats.add(spans=spans, tool_spans=len(mapped.records) + len(mapped.rejected),
                       records_stored=len(mapped.records), ignored_spans=mapped.ignored,
                       rejected_spans=len(mapped.rejected), redacted_records=mapped.redacted)
        response = ExportTraceServiceResponse()
        if mapped.rejected:
            response.partial_success.rejected_spans = len(mapped.rejected)
            shown = "; ".join(mapped.rejected[:5])
            more = len(mapped.rejected) - 5
            response.partial_success.error_message = shown + (f"; {more} more" if more > 0
                                                              else "")
        return response

    def _authorize(self, authorization: str | None) -> None:
        token = self.settings.token
        if token is None:
            return
        given = (authorization or "").encode()
        if not hmac.compare_digest(given, f"Bearer {token}".encode()):
            self.stats.add(unauthorized=1)
            raise Rejected(HTTPStatus.UNAUTHORIZED, "a bearer token is required",
                           _GRPC_UNAUTHENTICATED)

    def _decompress(self, body: bytes, encoding: str) -> bytes:
        if encoding in ("", "identity"):
            return body
        if encoding != "gzip":
            raise Rejected(HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                           f"Content-Encoding {encoding!r} is not supported (gzip or none)",
                           _GRPC_INVALID_ARGUMENT)
        limit = self.settings.max_body_bytes
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out = inflater.decompress(body, limit + 1)
            if len(out) > limit or inflater.unconsumed_tail:
                self.stats.add(too_large=1)
                raise Rejected(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                               f"the decompressed body is over {limit} bytes",
                               _GRPC_INVALID_ARGUMENT)
            if not inflater.eof:
                raise zlib.error("truncated gzip body")
        except zlib.error as exc:
            self.stats.add(malformed=1)
            raise Rejected(HTTPStatus.BAD_REQUEST, f"bad gzip body: {exc}",
                           _GRPC_INVALID_ARGUMENT) from None
        return out

    def _admit(self, records: int) -> None:
        with self._inflight_lock:
            if self._inflight and self._inflight + records > self.settings.max_inflight_spans:
                self.stats.add(throttled=1)
                raise Rejected(HTTPStatus.TOO_MANY_REQUESTS,
                               "the receiver's buffer is full", _GRPC_RESOURCE_EXHAUSTED, 1)
            self._inflight += records


def _media_type(header: str | None) -> str:
    return (header or "").split(";", 1)[0].strip().lower()


def _encode(message: Message, content_type: str) -> bytes:
    if content_type == JSON:
        return json_format.MessageToJson(message, indent=None).encode()
    return message.SerializeToString()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # An answer is written as its headers, then its body: with Nagle's algorithm the
    # body could wait for the client's delayed ACK of the headers.
    disable_nagle_algorithm = True
    server: ReceiverServer

    def do_POST(self) -> None:
        receiver = self.server.receiver
        receiver.stats.add(requests=1)
        content_type = _media_type(self.headers.get("Content-Type"))
        answer_type = JSON if content_type == JSON else PROTOBUF
        try:
            if self.path.split("?", 1)[0] != TRACES_PATH:
                raise Rejected(HTTPStatus.NOT_FOUND, f"no such path {self.path[:100]}",
                               _GRPC_OTHER)
            if content_type not in (PROTOBUF, JSON):
                raise Rejected(HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                               f"Content-Type {content_type!r} is not supported "
                               f"({PROTOBUF} or {JSON})", _GRPC_INVALID_ARGUMENT)
            body = self._body(receiver.settings.max_body_bytes, receiver)
            encoding = (self.headers.get("Content-Encoding") or "").strip().lower()
            response = receiver.export(body, content_type, encoding,
                                       self.headers.get("Authorization"))
        except Rejected as exc:
            self._reply_error(exc, answer_type)
            return
        self._reply(HTTPStatus.OK, _encode(response, answer_type), answer_type)

    def do_GET(self) -> None:
        self._reply_error(Rejected(HTTPStatus.METHOD_NOT_ALLOWED, "use POST",
                                   _GRPC_OTHER), PROTOBUF)

    do_PUT = do_DELETE = do_PATCH = do_GET

    def _body(self, limit: int, receiver: OtlpReceiver) -> bytes:
        length_header = self.headers.get("Content-Length")
        if length_header is None:
            self.close_connection = True
            raise Rejected(HTTPStatus.LENGTH_REQUIRED, "Content-Length is required",
                           _GRPC_INVALID_ARGUMENT)
        try:
            length = int(length_header)
        except ValueError:
            self.close_connection = True
            raise Rejected(HTTPStatus.BAD_REQUEST, "bad Content-Length",
                           _GRPC_INVALID_ARGUMENT) from None
        if length > limit:
            receiver.stats.add(too_large=1)
            self.close_connection = True
            if length <= _DRAIN_MAX_BYTES:  # read it away, so that the client sees the 413
                left = length
                while left > 0 and (block := self.rfile.read(min(left, 1 << 16))):
                    left -= len(block)
            raise Rejected(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                           f"the body of {length} bytes is over {limit} bytes",
                           _GRPC_INVALID_ARGUMENT)
        return self.rfile.read(length)

    def _reply_error(self, exc: Rejected, content_type: str) -> None:
        status = Status(code=exc.grpc_code, message=str(exc))
        headers = {} if exc.retry_after_s is None else {"Retry-After": str(exc.retry_after_s)}
        self._reply(exc.status, _encode(status, content_type), content_type, headers)

    def _reply(self, status: HTTPStatus, body: bytes, content_type: str,
               headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


class ReceiverServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], receiver: OtlpReceiver) -> None:
        self.receiver = receiver
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that resets or times out mid-request: one line, not a traceback.
        log.info("connection from %s ended: %s", client_address[0], sys.exc_info()[1])

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


def parse_listen(text: str) -> tuple[str, int]:
    """`host:port` (IPv6 as `[::1]:4318`)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"--listen {text!r}: give HOST:PORT, e.g. 127.0.0.1:4318")
    return host.strip("[]"), int(port)
