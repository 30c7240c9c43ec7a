"""`binloop status`: the state of the live job and its streams, read from NATS.

Everything comes from the server: the telemetry and events streams (messages, bytes,
sequences, partitions), the consumers the running job holds on the telemetry stream
(one per source partition: the stream sequence it has reached and how many messages
are pending), the last BINEvents, and what the job publishes to its status bucket
(`binloop.ops.job_status`). A missing stream or bucket is reported, never an error.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import DEFAULT_PREFIX, ConsumerInfo, StreamInfo
from nats.js.errors import NotFoundError

from binloop.core.config import default
from binloop.nats.jetstream import redact_url, stream_partitions
from binloop.nats.link import NatsLink
from binloop.nats.subjects import partition_prefix
from binloop.ops.job_status import read_job_status


@dataclass(frozen=True)
class StatusQuery:
    url: str
    stream: str = default("stream")
    subject_prefix: str = default("subject_prefix")
    events_stream: str = default("events_stream")
    bucket: str = default("status_bucket")
    job: str = default("job_name")
    last_events: int = 5
    connect_timeout_s: float = 10.0


def gather(query: StatusQuery) -> dict[str, Any]:
    with NatsLink(query.url, "binloop-status", query.connect_timeout_s) as link:
        return link.run(_gather(link.nc, link.js, query), 60.0)


async def _gather(nc: NATS, js: JetStreamContext, query: StatusQuery) -> dict[str, Any]:
    telemetry = await _stream(nc, js, query.stream)
    if telemetry["exists"]:
        telemetry["consumers"] = await _partition_consumers(js, query)
    events = await _stream(nc, js, query.events_stream)
    if events["exists"]:
        events["last"] = await _last_events(js, query.events_stream, events,
                                            query.last_events)
    job = await read_job_status(js, query.bucket, query.job)
    return {"nats": redact_url(query.url), "checked": time.time(), "telemetry": telemetry,
            "events": events, "job": {"name": query.job, "bucket": query.bucket,
                                      "published": job}}


async def _stream(nc: NATS, js: JetStreamContext, name: str) -> dict[str, Any]:
    try:
        info: StreamInfo = await js.stream_info(name)
    except NotFoundError:
        return {"name": name, "exists": False}
    state = info.state
    first_ts, last_ts = await _stream_times(nc, name)
    return {"name": name, "exists": True, "messages": state.messages, "bytes": state.bytes,
            "first_seq": state.first_seq, "last_seq": state.last_seq,
            "first_ts": first_ts, "last_ts": last_ts,
            "consumer_count": state.consumer_count, "partitions": stream_partitions(info),
            "subjects": list(info.config.subjects or [])}


async def _stream_times(nc: NATS, name: str) -> tuple[float | None, float | None]:
    """When the stream's first and last messages were stored (the JetStream API's
    stream info has them; nats-py's StreamState does not keep them)."""
    try:
        reply = await nc.request(f"{DEFAULT_PREFIX}.STREAM.INFO.{name}", b"", timeout=5.0)
        state = orjson.loads(reply.data).get("state", {})
    except Exception:
        return None, None
    return _ts(state.get("first_ts")), _ts(state.get("last_ts"))


def _ts(value: Any) -> float | None:
    """Unix seconds of an RFC 3339 time (nanosecond digits cut; the zero time is None)."""
    if not isinstance(value, str) or value.startswith("0001-"):
        return None
    match = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", value)
    if match is None:
        return None
    base, fraction, zone = match.groups()
    when = datetime.fromisoformat(base + ("+00:00" if zone == "Z" else zone)).timestamp()
    return when + float(fraction or 0)


def consumer_partition(info: ConsumerInfo, subject_prefix: str) -> int | None:
    """The source partition a consumer reads (from its filter subjects), if it is one
    of binloop's."""
    config = info.config
    filters = list(config.filter_subjects or []) or [config.filter_subject or ""]
    head = partition_prefix(subject_prefix) + "."
    for subject in filters:
        if subject.startswith(head) and subject.endswith(".>"):
            token = subject[len(head):-2]
            if token.isdigit():
                return int(token)
    return None


async def _partition_consumers(js: JetStreamContext, query: StatusQuery) -> list[dict[str, Any]]:
    """The job's consumers, by partition: the last stream sequence delivered and the
    messages pending (the job's own positions are in its recovery store)."""
    try:
        infos = await js.consumers_info(query.stream)
    except Exception:
        return []
    out = []
    for info in infos:
        partition = consumer_partition(info, query.subject_prefix)
        if partition is None:
            continue
        delivered = info.delivered.stream_seq if info.delivered is not None else None
        out.append({"partition": partition, "consumer": info.name,
                    "delivered_stream_seq": delivered, "pending": info.num_pending})
    return sorted(out, key=lambda c: (c["partition"], c["consumer"]))


async def _last_events(js: JetStreamContext, stream: str, info: dict[str, Any],
                       count: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seq = info["last_seq"]
    while seq >= max(1, info["first_seq"]) and len(out) < count:
        try:
            msg = await js.get_msg(stream, seq)
        except NotFoundError:  # deleted
            seq -= 1
            continue
        seq -= 1
        try:
            event = orjson.loads(msg.data or b"")
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict):
            out.append({k: event.get(k) for k in ("event_id", "tool", "failure_mode",
                                                   "session_id", "count", "theta", "window",
                                                   "fired_ts")})
    return out
