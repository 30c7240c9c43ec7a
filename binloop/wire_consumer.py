"""The ordered JetStream consumer of `binloop.nats_consumer`, on `binloop.nats_wire`.

Same contract as :class:`binloop.nats_consumer.OrderedConsumer` (read that docstring):
an ephemeral pull consumer (no acks, in memory) started right after `position`, one to
two pull requests open, messages handed out in stream order without gaps, and the
consumer recreated after `position` on a consumer-sequence gap, a terminal status, a
silence longer than three heartbeats, or a reconnect. Nothing is acknowledged.

What differs is the cost: messages arrive as bytes tuples from the wire connection, so
taking one is a split of its reply subject and a look at its header block. This is
synchronous: `poll` does not wait for messages that are not there.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Final

import orjson

from binloop.nats_consumer import Delivery, PullSettings
from binloop.nats_wire import (
    JetStreamError,
    Subscription,
    WireConnection,
    WireMsg,
    js_api,
    parse_headers,
)
from binloop.schema import DeadLetter, raw_text
from binloop.subjects import BATCH_HEADER, BATCH_JSONL

log = logging.getLogger("binloop.nats")

API_PREFIX: Final = "$JS.API"
_BATCH_NAME: Final = BATCH_HEADER.encode()
_STATUS_LINE: Final = b"NATS/1.0 "
_REQUEST_ENDED: Final = ("request timeout", "exceeds maxbytes", "batch completed")


def wire_ack_sequences(reply: bytes) -> tuple[int, int]:
    """(stream seq, consumer seq) of a delivery's reply subject
    (`$JS.ACK.<stream>.<consumer>.<n>.<sseq>.<dseq>.<ts>.<pending>`, or the form with
    domain and account hash)."""
    tokens = reply.split(b".")
    if len(tokens) == 9:
        return int(tokens[5]), int(tokens[6])
    return int(tokens[7]), int(tokens[8])


def split_envelope(data: bytes) -> list[bytes]:
    """The lines of a `Binloop-Batch: jsonl` payload: split at \\n, a last empty line
    dropped, a trailing \\r removed from each."""
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    if b"\r" in data:
        return [line.rstrip(b"\r") for line in lines]
    return lines


class WireOrderedConsumer:
    """Reads the messages of `filters` in `stream` after stream sequence `position`."""

    def __init__(self, conn: WireConnection, stream: str, filters: list[str], position: int,
                 source: str, pull: PullSettings | None = None, api: str = API_PREFIX) -> None:
        self.conn, self.stream = conn, stream
        self.filters = filters
        self.position = position
        self.source = source
        self.pull = pull or PullSettings()
        self.api = api
        timing = {"expires": int(self.pull.expires_s * 1e9),
                  "idle_heartbeat": int(self.pull.heartbeat_s * 1e9)}
        self._request = orjson.dumps({"batch": self.pull.batch,
                                      "max_bytes": self.pull.max_bytes, **timing})
        # One message whatever its size: after a request stopped at max_bytes, the next
        # message may be larger than max_bytes (the server's max_payload bounds it).
        self._one_any_size = orjson.dumps({"batch": 1, **timing})
        self._big_next = False
        self._sub: Subscription | None = None
        self._consumer: str | None = None
        self._next_subject = ""
        self._queue: list[WireMsg] = []
        self._index = 0
        self._credit = 0  # messages requested and neither delivered nor given up
        self._next_dseq = 1
        self._last_activity = time.monotonic()
        self._reconnects_seen = conn.reconnects
        self._retry_at = 0.0
        self._last_reply = b""
        self.resets = 0

    @property
    def pending(self) -> int | None:
        """Messages of the filter stored after the last one delivered (from its reply
        subject, read when asked rather than per message)."""
        if not self._last_reply:
            return None
        tokens = self._last_reply.split(b".")
        return int(tokens[8] if len(tokens) == 9 else tokens[10])

    @property
    def active(self) -> bool:
        return self._sub is not None

    def ensure(self) -> bool:
        """(Re)create the server-side consumer when needed and keep pull requests
        open; False if the consumer cannot be created now."""
        self.conn.pump()
        if self._sub is not None and not self._healthy():
            self._drop()
        if self._sub is None:
            if not self.conn.connected or time.monotonic() < self._retry_at:
                return False
            try:
                self._create()
            except (OSError, JetStreamError, KeyError, ValueError) as exc:
                log.debug("consumer for %s not created yet: %s", self.source, exc)
                self._drop()
                self._retry_at = time.monotonic() + 0.25
                return False
        self._top_up()
        return True

    def _pending(self) -> bool:
        return self._index < len(self._queue) or bool(self._sub and self._sub.pending)

    def _healthy(self) -> bool:
        if self.conn.reconnects != self._reconnects_seen:
            log.info("%s: reconnected to NATS; resuming after stream seq %d",
                     self.source, self.position)
            return False
        if self._pending():
            return True
        silent = time.monotonic() - self._last_activity
        if silent > 3 * self.pull.heartbeat_s and self.conn.connected:
            log.info("%s: no message or heartbeat for %.1fs; resuming after stream seq %d",
                     self.source, silent, self.position)
            return False
        return True

    def _create(self) -> None:
        self._reconnects_seen = self.conn.reconnects
        config: dict[str, Any] = {
            "deliver_policy": "by_start_sequence", "opt_start_seq": self.position + 1,
            "ack_policy": "none", "replay_policy": "instant", "mem_storage": True,
            "num_replicas": 1,
            "inactive_threshold": int(max(30.0, 10 * self.pull.heartbeat_s) * 1e9)}
        if len(self.filters) == 1:
            config["filter_subject"] = self.filters[0]
        else:
            config["filter_subjects"] = self.filters
        info = js_api(self.conn, f"{self.api}.CONSUMER.CREATE.{self.stream}",
                      {"stream_name": self.stream, "config": config})
        self._consumer = str(info["name"])
        self._sub = self.conn.subscribe(self.conn.new_inbox())
        self._next_subject = f"{self.api}.CONSUMER.MSG.NEXT.{self.stream}.{self._consumer}"
        self._queue, self._index = [], 0
        self._credit = 0
        self._big_next = False
        self._next_dseq = 1
        self._last_activity = time.monotonic()

    def _top_up(self) -> None:
        """Keep between one and two batches requested."""
        if self._sub is None:
            return
        if self._big_next:
            self._big_next = False
            self.conn.publish(self._next_subject, self._one_any_size, self._sub.subject)
            self._credit += 1
        while self._credit < self.pull.batch:
            self.conn.publish(self._next_subject, self._request, self._sub.subject)
            self._credit += self.pull.batch

    def _drop(self) -> None:
        sub, self._sub = self._sub, None
        consumer, self._consumer = self._consumer, None
        self._queue, self._index = [], 0
        self.resets += 1
        if sub is not None:
            self.conn.unsubscribe(sub)
        if consumer is not None and self.conn.connected:
            # Best effort, unanswered: an ephemeral consumer also goes away by itself.
            self.conn.publish(f"{self.api}.CONSUMER.DELETE.{self.stream}.{consumer}", b"",
                              self.conn.new_inbox())

    def poll(self, budget: int, max_s: float = 0.05) -> Delivery:
        """Messages available now (up to about `budget` records), spending at most
        about `max_s`."""
        out = Delivery()
        if not self.ensure():
            return out
        deadline = time.monotonic() + max_s
        while len(out.items) < budget:
            if self._index >= len(self._queue):
                assert self._sub is not None
                self._queue, self._index = self._sub.take(), 0
                if not self._queue:
                    self._top_up()
                    self.conn.pump()
                    self._queue = self._sub.take()
                    if not self._queue or time.monotonic() > deadline:
                        break
            reply, headers, data = self._queue[self._index]
            self._index += 1
            ok = self._take(reply, headers, data, out) if data else \
                self._take_any(reply, headers, data, out)
            if not ok:
                self._drop()
                break
        if out.messages:
            self._last_activity = time.monotonic()
        self._top_up()
        self.conn.flush()
        return out

    def _take_any(self, reply: bytes, headers: bytes, data: bytes, out: Delivery) -> bool:
        """A data or status message; False when the consumer must be recreated."""
        self._last_activity = time.monotonic()
        if headers.startswith(_STATUS_LINE):
            status, description, fields = parse_headers(headers)
            if status is not None:
                return self._status(status, description, fields)
        return self._take(reply, headers, data, out)

    def _take(self, reply: bytes, headers: bytes, data: bytes, out: Delivery) -> bool:
        """Add one data message to `out`; False on a gap (the consumer must be reset)."""
        sseq, dseq = wire_ack_sequences(reply)
        self._credit -= 1
        if dseq != self._next_dseq:
            log.info("%s: consumer sequence gap (%d, expected %d); resuming after %d",
                     self.source, dseq, self._next_dseq, self.position)
            return False
        self._next_dseq = dseq + 1
        self._last_reply = reply
        if sseq <= self.position:
            return True
        self.position = sseq
        out.messages += 1
        out.first_seq = out.first_seq or sseq
        out.last_seq = sseq
        batch = parse_headers(headers)[2].get(BATCH_HEADER) if _BATCH_NAME in headers \
            else None
        if batch is None:
            out.items.append(data)
        elif batch.strip().lower() == BATCH_JSONL:
            out.items.extend(split_envelope(data))
        else:
            out.rejects.append(DeadLetter(
                raw_text(data), f"unknown {BATCH_HEADER} encoding {batch!r:.40} "
                f"(expected {BATCH_JSONL!r})", f"nats:{self.stream}", f"stream seq {sseq}"))
        return True

    def _status(self, status: str, description: str, fields: dict[str, str]) -> bool:
        """Heartbeats keep us alive; a request that ended early returns its credit;
        anything else (consumer deleted, leadership change...) recreates."""
        if status == "100":
            return True
        lowered = description.lower()
        if status == "408" or (status == "409" and any(e in lowered for e in _REQUEST_ENDED)):
            self._credit = max(0, self._credit - int(fields.get("Nats-Pending-Messages", 0)))
            self._big_next = self._big_next or "maxbytes" in lowered
            return True
        log.info("%s: pull status %s %s; resuming after stream seq %d", self.source, status,
                 description, self.position)
        return False

    def caught_up(self) -> bool:
        """Whether the server has nothing more for us right now."""
        if self._sub is None or self._consumer is None or self._pending():
            return False
        try:
            info = js_api(self.conn, f"{self.api}.CONSUMER.INFO.{self.stream}.{self._consumer}",
                          None, 1.0)
        except (OSError, JetStreamError, ValueError) as exc:
            log.debug("consumer info: %s", exc)
            return False
        # Everything the server delivered has reached us (its consumer sequence; its
        # stream sequence moves past messages the filter skipped).
        delivered = int((info.get("delivered") or {}).get("consumer_seq") or 0)
        return int(info.get("num_pending", -1)) == 0 and delivered == self._next_dseq - 1

    def close(self) -> None:
        consumer = self._consumer
        self._consumer = None
        self._drop()
        if consumer is not None and self.conn.connected:
            try:
                js_api(self.conn, f"{self.api}.CONSUMER.DELETE.{self.stream}.{consumer}",
                       None, 1.0)
            except (OSError, JetStreamError, ValueError) as exc:
                log.debug("delete consumer %s: %s", consumer, exc)
        self.conn.flush()
