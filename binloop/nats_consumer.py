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
from dataclasses import dataclass, field

import orjson
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import DEFAULT_PREFIX, AckPolicy, ConsumerConfig, DeliverPolicy

from binloop.schema import DeadLetter, raw_text
from binloop.subjects import BATCH_HEADER, BATCH_JSONL

log = logging.getLogger("binloop.nats")

_STATUS = "Status"
_DESCRIPTION = "Description"
_PENDING_MESSAGES = "Nats-Pending-Messages"
# A request that ended (expired, max_bytes hit, batch completed): its undelivered
# messages are in the Nats-Pending-Messages header.
_REQUEST_ENDED = ("request timeout", "exceeds maxbytes", "batch completed")


@dataclass(slots=True)
class Delivery:
    """Raw records of consecutive messages (a batch envelope gives many), and the
    messages that could not be read as records at all."""

    items: list[bytes] = field(default_factory=list)
    rejects: list[DeadLetter] = field(default_factory=list)
    first_seq: int = 0
    last_seq: int = 0
    messages: int = 0


@dataclass(frozen=True)
class PullSettings:
    batch: int = 512
    max_bytes: int = 1 << 20
    expires_s: float = 30.0
    heartbeat_s: float = 1.0


def ack_sequences(reply: str) -> tuple[int, int, int]:
    """(stream seq, consumer seq, pending) from a JetStream delivery's reply subject
    (`$JS.ACK.<stream>.<consumer>.<n>.<sseq>.<dseq>.<ts>.<pending>`, or the form
    with domain and account hash)."""
    tokens = reply.split(".")
    if len(tokens) == 9:
        return int(tokens[5]), int(tokens[6]), int(tokens[8])
    return int(tokens[7]), int(tokens[8]), int(tokens[10])


class OrderedConsumer:
    """Reads the messages of `filters` in `stream` after stream sequence `position`."""

    def __init__(self, nc: NATS, js: JetStreamContext, stream: str, filters: list[str],
                 position: int, source: str, pull: PullSettings | None = None) -> None:
        self.nc, self.js, self.stream = nc, js, stream
        self.filters = filters
        self.position = position
        self.source = source
        self.pull = pull or PullSettings()
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
        self._credit = 0  # messages requested and neither delivered nor given up
        self._next_dseq = 1
        self._last_activity = time.monotonic()
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

    def _healthy(self) -> bool:
        if self.nc.stats["reconnects"] != self._reconnects_seen:
            log.info("%s: reconnected to NATS; resuming after stream seq %d",
                     self.source, self.position)
            return False
        if not self._sub._pending_queue.empty():  # type: ignore[union-attr]
            return True
        silent = time.monotonic() - self._last_activity
        if silent > 3 * self.pull.heartbeat_s and self.nc.is_connected:
            log.info("%s: no message or heartbeat for %.1fs; resuming after stream seq %d",
                     self.source, silent, self.position)
            return False
        return True

    async def _create(self) -> None:
        self._reconnects_seen = self.nc.stats["reconnects"]
        config = ConsumerConfig(
            ack_policy=AckPolicy.NONE,
            mem_storage=True,
            num_replicas=1,
            inactive_threshold=max(30.0, 10 * self.pull.heartbeat_s),
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=self.position + 1,
        )
        if len(self.filters) == 1:
            config.filter_subject = self.filters[0]
        else:
            config.filter_subjects = self.filters
        info = await self.js.add_consumer(self.stream, config=config, timeout=2.0)
        # In flight at most two requests of `max_bytes`: no client-side limit needed.
        self._sub = await self.nc.subscribe(self.nc.new_inbox(), pending_msgs_limit=0,
                                            pending_bytes_limit=0)
        self._consumer = info.name
        prefix = getattr(self.js, "_prefix", DEFAULT_PREFIX)
        self._next_subject = f"{prefix}.CONSUMER.MSG.NEXT.{self.stream}.{info.name}"
        self._credit = 0
        self._big_next = False
        self._next_dseq = 1
        self._last_activity = time.monotonic()

    async def _top_up(self) -> None:
        """Keep between one and two batches requested."""
        if self._sub is not None and self._big_next:
            self._big_next = False
            await self.nc.publish(self._next_subject, self._one_any_size,
                                  reply=self._sub.subject)
            self._credit += 1
        while self._sub is not None and self._credit < self.pull.batch:
            await self.nc.publish(self._next_subject, self._request,
                                  reply=self._sub.subject)
            self._credit += self.pull.batch

    async def _drop(self) -> None:
        sub, self._sub = self._sub, None
        consumer, self._consumer = self._consumer, None
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
        queue = self._sub._pending_queue  # type: ignore[union-attr]
        if queue.empty() and wait_s > 0:
            try:
                first = await asyncio.wait_for(queue.get(), wait_s)
            except asyncio.TimeoutError:
                return out
            if not self._take_any(first, out):
                await self._drop()
                return out
        deadline = time.monotonic() + max_s
        while len(out.items) < budget:
            if queue.empty():
                await self._top_up()
                await _let_client_read()
                if queue.empty() or time.monotonic() > deadline:
                    break
            msg = queue.get_nowait()
            ok = self._take(msg, out) if msg.data else self._take_any(msg, out)
            if not ok:
                await self._drop()
                break
        if out.messages:
            self._last_activity = time.monotonic()
        await self._top_up()
        return out

    def _take_any(self, msg: Msg, out: Delivery) -> bool:
        """A data or status message; False when the consumer must be recreated."""
        self._last_activity = time.monotonic()
        headers = msg.headers
        if headers is not None and _STATUS in headers and not msg.data:
            return self._status(headers)
        return self._take(msg, out)

    def _take(self, msg: Msg, out: Delivery) -> bool:
        """Add one data message to `out`; False on a gap (the consumer must be reset)."""
        sseq, dseq, self.pending = ack_sequences(msg.reply)
        self._credit -= 1
        if dseq != self._next_dseq:
            log.info("%s: consumer sequence gap (%d, expected %d); resuming after %d",
                     self.source, dseq, self._next_dseq, self.position)
            return False
        self._next_dseq = dseq + 1
        if sseq <= self.position:
            return True
        self.position = sseq
        out.messages += 1
        out.first_seq = out.first_seq or sseq
        out.last_seq = sseq
        headers = msg.headers
        batch = headers.get(BATCH_HEADER) if headers is not None else None
        if batch is None:
            out.items.append(msg.data)
        elif batch.strip().lower() == BATCH_JSONL:
            lines = msg.data.split(b"\n")
            if lines and not lines[-1]:
                lines.pop()
            out.items.extend(line.rstrip(b"\r") for line in lines)
        else:
            out.rejects.append(DeadLetter(
                raw_text(msg.data), f"unknown {BATCH_HEADER} encoding {batch!r:.40} "
                f"(expected {BATCH_JSONL!r})", f"nats:{self.stream}", f"stream seq {sseq}"))
        return True

    def _status(self, headers: dict[str, str]) -> bool:
        """Heartbeats keep us alive; a request that ended early returns its credit;
        anything else (consumer deleted, leadership change...) recreates."""
        status = headers.get(_STATUS)
        if status == "100":
            return True
        description = str(headers.get(_DESCRIPTION, ""))
        if status == "408" or (status == "409" and any(
                ended in description.lower() for ended in _REQUEST_ENDED)):
            undelivered = int(headers.get(_PENDING_MESSAGES, 0))
            self._credit = max(0, self._credit - undelivered)
            self._big_next = self._big_next or "maxbytes" in description.lower()
            return True
        log.info("%s: pull status %s %s; resuming after stream seq %d", self.source, status,
                 description, self.position)
        return False

    async def caught_up(self) -> bool:
        """Whether the server has nothing more for us right now."""
        if self._sub is None or self._consumer is None or not self._sub._pending_queue.empty():
            return False
        try:
            info = await self.js.consumer_info(self.stream, self._consumer, timeout=1.0)
        except Exception as exc:
            log.debug("consumer info: %s", exc)
            return False
        # Everything the server delivered has reached us (its consumer sequence; its
        # stream sequence moves past messages the filter skipped).
        delivered = info.delivered.consumer_seq if info.delivered is not None else 0
        return info.num_pending == 0 and (delivered or 0) == self._next_dseq - 1

    async def close(self) -> None:
        await self._drop()
        if self._deleting:
            await asyncio.wait(self._deleting, timeout=2.0)


async def _let_client_read() -> None:
    """Run the event loop long enough for the client to read and parse what the
    socket already holds (the selector fires, then the read task parses)."""
    for _ in range(2):
        await asyncio.sleep(0)
