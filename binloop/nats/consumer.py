"""An ordered JetStream consumer whose position belongs to the caller.

The server side is an ephemeral pull consumer (no acks, in memory) started right
after `position`, the last stream sequence the caller has taken. The client keeps
between one and two pull requests open (`batch` messages, at most `max_bytes` each,
with idle heartbeats), so messages stream in as they are stored while the data in
flight stays bounded: a slow dataflow slows the reads down instead of making the
server drop messages (which a push consumer does once a connection has 64 MB
pending), and nothing piles up in memory.

Messages are handed out in stream order without gaps: a consumer sequence gap, a
terminal status, a silence longer than three heartbeats, or a reconnect recreates
the consumer right after `position`, and anything at or before `position` that
arrives again is skipped. So whatever happens to the connection or the server, the
caller sees each stored message once, in order, as long as the position it
snapshots is this one.

Nothing is acknowledged: the stream keeps messages by its own limits, and a poison
message is simply passed (the position moves past it), never redelivered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import DEFAULT_PREFIX, Header

from binloop.nats.pull_protocol import (
    PENDING_MESSAGES_HEADER,
    Delivery,
    PullSettings,
    PullTracker,
    TrackedConsumer,
)
from binloop.nats.subjects import BATCH_HEADER

__all__ = ["Delivery", "OrderedConsumer", "PullSettings", "ack_sequences"]

log = logging.getLogger("binloop.nats")


def ack_sequences(reply: str) -> tuple[int, int, int]:
    """(stream seq, consumer seq, pending) from a JetStream delivery's reply subject
    (`$JS.ACK.<stream>.<consumer>.<n>.<sseq>.<dseq>.<ts>.<pending>`, or the form
    with domain and account hash)."""
    tokens = reply.split(".")
    if len(tokens) == 9:
        return int(tokens[5]), int(tokens[6]), int(tokens[8])
    return int(tokens[7]), int(tokens[8]), int(tokens[10])


class OrderedConsumer(TrackedConsumer):
    """Reads the messages of `filters` in `stream` after stream sequence `position`."""

    def __init__(self, nc: NATS, js: JetStreamContext, stream: str, filters: list[str],
                 position: int, source: str, pull: PullSettings | None = None,
                 api_prefix: str = DEFAULT_PREFIX) -> None:
        self.nc, self.js, self.stream = nc, js, stream
        self.filters = filters
        self.source = source
        self.api_prefix = api_prefix  # the one `js` was made with
        self.tracker = PullTracker(stream, position, source, pull or PullSettings())
        self._sub: Subscription | None = None
        # Deliveries of the current subscription, in order, moved here by its callback.
        self._inbox: deque[Msg] = deque()
        self._arrived = asyncio.Event()
        self._consumer: str | None = None
        self._next_subject = ""
        self._reconnects_seen = nc.stats["reconnects"]
        self._retry_at = 0.0
        self._deleting: set[asyncio.Task[None]] = set()
        self.resets = 0
        # Messages of the filter stored after the last one delivered (from its reply).
        self.pending: int | None = None

    @property
    def active(self) -> bool:
        return self._sub is not None

    async def ensure(self) -> bool:
        """(Re)create the server-side consumer when needed and keep pull requests
        open; False if the consumer cannot be created now."""
        if self._sub is not None:
            # Read what the socket holds before judging the consumer's health.
            await _let_client_read()
            if self._sub is not None and not self._healthy():
                await self._drop()
        if self._sub is None:
            if not self.nc.is_connected or time.monotonic() < self._retry_at:
                return False
            try:
                await self._create()
            except Exception as exc:  # server restarting, stream leader moving, timeouts...
                log.debug("consumer for %s not created yet: %s", self.source, exc)
                await self._drop()
                self._retry_at = time.monotonic() + 0.25
                return False
        await self._top_up()
        return True

    def _waiting(self) -> bool:
        """Whether deliveries are here that the caller has not taken yet."""
        return bool(self._inbox) or (self._sub is not None and self._sub.pending_msgs > 0)

    def _healthy(self) -> bool:
        reconnected = self.nc.stats["reconnects"] != self._reconnects_seen
        if not reconnected and self._waiting():
            return True
        return not self.tracker.stale(reconnected, self.nc.is_connected)

    async def _create(self) -> None:
        self._reconnects_seen = self.nc.stats["reconnects"]
        config = self.tracker.consumer_config(self.filters)
        info = await self.js.add_consumer(self.stream, config=config, timeout=2.0)
        inbox: deque[Msg] = deque()

        async def deliver(msg: Msg) -> None:
            inbox.append(msg)
            self._arrived.set()

        # In flight at most two requests of `max_bytes`: no client-side limit needed.
        self._sub = await self.nc.subscribe(self.nc.new_inbox(), cb=deliver,
                                            pending_msgs_limit=0, pending_bytes_limit=0)
        self._inbox = inbox
        self._consumer = info.name
        self._next_subject = f"{self.api_prefix}.CONSUMER.MSG.NEXT.{self.stream}.{info.name}"
        self.tracker.restart()

    async def _top_up(self) -> None:
        """Keep between one and two batches requested."""
        if self._sub is None:
            return
        for request in self.tracker.requests():
            await self.nc.publish(self._next_subject, request, reply=self._sub.subject)

    async def _drop(self) -> None:
        sub, self._sub = self._sub, None
        consumer, self._consumer = self._consumer, None
        self._inbox = deque()  # the next consumer starts right after `position`
        self.resets += 1
        if sub is not None:
            try:
                await sub.unsubscribe()
            except Exception as exc:  # already gone with the connection
                log.debug("unsubscribe: %s", exc)
        if consumer is not None and self.nc.is_connected:
            # Best effort: an ephemeral consumer also goes away by itself when inactive.
            task = asyncio.get_running_loop().create_task(self._delete(consumer))
            self._deleting.add(task)
            task.add_done_callback(self._deleting.discard)

    async def _delete(self, consumer: str) -> None:
        try:
            await self.js.delete_consumer(self.stream, consumer)
        except Exception as exc:
            log.debug("delete consumer %s: %s", consumer, exc)

    async def poll(self, budget: int, wait_s: float, max_s: float = 0.05) -> Delivery:
        """Messages available now (up to about `budget` records), waiting up to
        `wait_s` for the first one and spending at most about `max_s`."""
        out = Delivery()
        if not await self.ensure():
            return out
        if not self._inbox and wait_s > 0:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), wait_s)
            except asyncio.TimeoutError:
                return out
        inbox = self._inbox
        deadline = time.monotonic() + max_s
        while out.records < budget:
            if not inbox:
                await self._top_up()
                await _let_client_read()
                if not inbox or time.monotonic() > deadline:
                    break
            msg = inbox.popleft()
            ok = self._take(msg, out) if msg.data else self._take_any(msg, out)
            if not ok:
                await self._drop()
                break
        if out.messages:
            self.tracker.last_activity = time.monotonic()
        await self._top_up()
        return out

    def _take_any(self, msg: Msg, out: Delivery) -> bool:
        """A data or status message; False when the consumer must be recreated."""
        self.tracker.last_activity = time.monotonic()
        headers = msg.headers
        if headers is not None and Header.STATUS.value in headers and not msg.data:
            return self.tracker.status(headers.get(Header.STATUS.value),
                                       str(headers.get(Header.DESCRIPTION.value, "")),
                                       int(headers.get(PENDING_MESSAGES_HEADER, 0)))
        return self._take(msg, out)

    def _take(self, msg: Msg, out: Delivery) -> bool:
        """Add one data message to `out`; False on a gap (the consumer must be reset)."""
        sseq, dseq, self.pending = ack_sequences(msg.reply)
        arrival = self.tracker.arrive(sseq, dseq)
        if arrival == "new":
            headers = msg.headers
            self.tracker.take(out, sseq, msg.data,
                              headers.get(BATCH_HEADER) if headers is not None else None)
        return arrival != "gap"

    async def caught_up(self) -> bool:
        """Whether the server has nothing more for us right now."""
        if self._sub is None or self._consumer is None or self._waiting():
            return False
        try:
            info = await self.js.consumer_info(self.stream, self._consumer, timeout=1.0)
        except Exception as exc:
            log.debug("consumer info: %s", exc)
            return False
        delivered = info.delivered.consumer_seq if info.delivered is not None else 0
        return self.tracker.caught_up(
            -1 if info.num_pending is None else info.num_pending, delivered or 0)

    async def close(self) -> None:
        await self._drop()
        if self._deleting:
            await asyncio.wait(self._deleting, timeout=2.0)


async def _let_client_read() -> None:
    """Run the event loop long enough for the client to read and parse what the
    socket already holds (the selector fires, then the read task parses)."""
    for _ in range(2):
        await asyncio.sleep(0)
