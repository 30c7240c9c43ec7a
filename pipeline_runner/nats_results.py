"""Build results, re-arms and tool status changes to a JetStream stream (`BIN_BUILDS`).

Subjects (tokens escaped by `binloop.nats.subjects`):
* `{prefix}.result.{tool}.{failure_mode...}`: every build's outcome (gated / rolled_back
  / error), with the tool gated and the manifest version;
* `{prefix}.rearm.{tool}.{failure_mode...}`: a re-arm that is due
  (`{"tool", "failure_mode", "fired_epoch", ...}`), consumed by the detector;
* `{prefix}.status.{name}`: a tool promoted or quarantined by its uses.

Delivery guarantee: at-least-once, deduplicated by the stream (`Nats-Msg-Id` =
`result-<event_id>`, `rearm-<event_id>`, `status-<name>-v<version>-<status>-<manifest
version>`). A publish waits for the stream's acknowledgement and is retried while NATS
is unreachable (for up to `retry_s`); a re-arm that still fails stays scheduled and is
tried again.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from binloop.core.config import default
from binloop.core.events import BINEvent
from binloop.nats.jetstream import StreamSpec, ensure_stream
from binloop.nats.link import NatsLink
from binloop.nats.subjects import MSG_ID_HEADER, event_subject, subject_token
from pipeline_runner.lifecycle import StatusChange
from pipeline_runner.runner import BuildResult
from pipeline_runner.service import result_message, status_message


def builds_stream_spec(name: str = default("builds_stream"),
                       prefix: str = default("builds_subject_prefix"),
                       **limits: Any) -> StreamSpec:
    return StreamSpec(name, (f"{prefix}.>",), **limits)


class NatsResultSink:
    def __init__(self, link: NatsLink, stream: StreamSpec,
                 prefix: str = default("builds_subject_prefix"),
                 manage_stream: bool = True, retry_s: float = 30.0) -> None:
        self.link = link
        self.prefix = prefix
        self.retry_s = retry_s
        link.run(ensure_stream(link.js, stream, manage_stream))

    def build_result(self, event: BINEvent, result: BuildResult) -> None:
        subject = event_subject(f"{self.prefix}.result", event["tool"], event["failure_mode"])
        self._publish(subject, result_message(event, result), f"result-{event['event_id']}")

    def rearm(self, record: dict[str, Any]) -> None:
        subject = event_subject(f"{self.prefix}.rearm", record["tool"], record["failure_mode"])
        self._publish(subject, {"type": "rearm", **record}, f"rearm-{record['event_id']}")

    def status_change(self, change: StatusChange) -> None:
        subject = f"{self.prefix}.status.{subject_token(change.name)}"
        msg_id = (f"status-{change.name}-v{change.version}-{change.new}-"
                  f"{change.manifest_version}")
        self._publish(subject, status_message(change), msg_id)

    def _publish(self, subject: str, payload: dict[str, Any], msg_id: str) -> None:
        data = orjson.dumps(payload, default=str)
        deadline = time.monotonic() + self.retry_s
        while True:
            try:
                self.link.run(self.link.js.publish(subject, data, timeout=2.0,
                                                       headers={MSG_ID_HEADER: msg_id}), 10.0)
                return
            except Exception:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.25)
