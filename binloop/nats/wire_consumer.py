"""The ordered JetStream consumer of `binloop.nats.consumer`, on `binloop.nats.wire`.

Same contract as :class:`binloop.nats.consumer.OrderedConsumer` (read that docstring):
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
from typing import Final

from nats.errors import Error as NatsError
from nats.js.api import DEFAULT_PREFIX

from binloop.nats.pull_protocol import (
    PENDING_MESSAGES_HEADER,
    Delivery,
    PullSettings,
    PullTracker,
    TrackedConsumer,
)
from binloop.nats.subjects import BATCH_HEADER
from binloop.nats.wire import (
    Subscription,
    WireConnection,
    WireMsg,
    js_api,
    parse_headers,
)

log = logging.getLogger("binloop.nats")

_BATCH_NAME: Final = BATCH_HEADER.encode()
_STATUS_LINE: Final = b"NATS/1.0 "


def wire_ack_sequences(reply: bytes) -> tuple[int, int]:
    """(stream seq, consumer seq) of a delivery's reply subject
    (`$JS.ACK.<stream>.<consumer>.<n>.<sseq>.<dseq>.<ts>.<pending>`, or the form with
    domain and account hash)."""
    tokens = reply.split(b".")
    if len(tokens) == 9:
        return int(tokens[5]), int(tokens[6])
    return int(tokens[7]), int(tokens[8])


class WireOrderedConsumer(TrackedConsumer):
    """Reads the messages of `filters` in `stream` after stream sequence `position`."""

    def __init__(self, conn: WireConnection, stream: str, filters: list[str], position: int,
                 source: str, pull: PullSettings | None = None, api: str = DEFAULT_PREFIX) -> None:
        self.conn, self.stream = conn, stream
        self.filters = filters
        self.source = source
        self.api = api
        self.tracker = PullTracker(stream, position, source, pull or PullSettings())
        self._sub: Subscription | None = None
        self._consumer: str | None = None
        self._next_subject = ""
        self._queue: list[WireMsg] = []
        self._index = 0
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
            except (OSError, NatsError, KeyError, ValueError) as exc:
                log.debug("consumer for %s not created yet: %s", self.source, exc)
                self._drop()
                self._retry_at = time.monotonic() + 0.25
                return False
        self._top_up()
        return True

    def _pending(self) -> bool:
        return self._index < len(self._queue) or bool(self._sub and self._sub.pending)

    def _healthy(self) -> bool:
        reconnected = self.conn.reconnects != self._reconnects_seen
        if not reconnected and self._pending():
            return True
        return not self.tracker.stale(reconnected, self.conn.connected)

    def _create(self) -> None:
        self._reconnects_seen = self.conn.reconnects
        info = js_api(self.conn, f"{self.api}.CONSUMER.CREATE.{self.stream}",
                      {"stream_name": self.stream,
                       "config": self.tracker.consumer_config(self.filters).as_dict()})
        self._consumer = str(info["name"])
        self._sub = self.conn.subscribe(self.conn.new_inbox())
        self._next_subject = f"{self.api}.CONSUMER.MSG.NEXT.{self.stream}.{self._consumer}"
        self._queue, self._index = [], 0
        self.tracker.restart()

    def _top_up(self) -> None:
        """Keep between one and two batches requested."""
        if self._sub is None:
            return
        for request in self.tracker.requests():
            self.conn.publish(self._next_subject, request, self._sub.subject)

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
        while out.records < budget:
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
            self.tracker.last_activity = time.monotonic()
        self._top_up()
        self.conn.flush()
        return out

    def _take_any(self, reply: bytes, headers: bytes, data: bytes, out: Delivery) -> bool:
        """A data or status message; False when the consumer must be recreated."""
        self.tracker.last_activity = time.monotonic()
        if headers.startswith(_STATUS_LINE):
            status, description, fields = parse_headers(headers)
            if status is not None:
                return self.tracker.status(status, description,
                                           int(fields.get(PENDING_MESSAGES_HEADER, 0)))
        return self._take(reply, headers, data, out)

    def _take(self, reply: bytes, headers: bytes, data: bytes, out: Delivery) -> bool:
        """Add one data message to `out`; False on a gap (the consumer must be reset)."""
        sseq, dseq = wire_ack_sequences(reply)
        arrival = self.tracker.arrive(sseq, dseq)
        if arrival == "gap":
            return False
        self._last_reply = reply
        if arrival == "new":
            batch = parse_headers(headers)[2].get(BATCH_HEADER) if _BATCH_NAME in headers \
                else None
            self.tracker.take(out, sseq, data, batch)
        return True

    def caught_up(self) -> bool:
        """Whether the server has nothing more for us right now."""
        if self._sub is None or self._consumer is None or self._pending():
            return False
        try:
            info = js_api(self.conn, f"{self.api}.CONSUMER.INFO.{self.stream}.{self._consumer}",
                          None, 1.0)
        except (OSError, NatsError, ValueError) as exc:
            log.debug("consumer info: %s", exc)
            return False
        delivered = int((info.get("delivered") or {}).get("consumer_seq") or 0)
        return self.tracker.caught_up(int(info.get("num_pending", -1)), delivered)

    def close(self) -> None:
        consumer = self._consumer
        self._consumer = None
        self._drop()
        if consumer is not None and self.conn.connected:
            try:
                js_api(self.conn, f"{self.api}.CONSUMER.DELETE.{self.stream}.{consumer}",
                       None, 1.0)
            except (OSError, NatsError, ValueError) as exc:
                log.debug("delete consumer %s: %s", consumer, exc)
        self.conn.flush()
