"""An ordered JetStream push consumer whose position belongs to the caller.

The server side is an ephemeral push consumer (no acks, flow control, idle
heartbeats, in memory) started right after `position`, the last stream sequence the
caller has taken. Messages are handed out in stream order without gaps: a consumer
sequence gap, a heartbeat that reports messages we did not get, a missing heartbeat,
or a reconnect recreates the consumer right after `position`, and anything older than
`position` that arrives again is skipped. So whatever happens to the connection or
the server, the caller sees each stored message once, in order, as long as the
caller's position is what it snapshots.

Nothing is acknowledged: the stream keeps messages by its own limits, and a poison
message is simply passed (the position moves past it), never redelivered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from binloop.schema import DeadLetter, raw_text
from binloop.subjects import BATCH_HEADER, BATCH_JSONL

log = logging.getLogger("binloop.nats")

_STATUS = "Status"
_LAST_CONSUMER = "Nats-Last-Consumer"
_STALLED = "Nats-Consumer-Stalled"
# Enough for any flow-control window; a drop beyond it shows up as a gap and resets.
_PENDING_BYTES = 256 << 20


@dataclass(slots=True)
class Delivery:
    """Raw records of consecutive messages (a batch envelope gives many), and the
    messages that could not be read as records at all."""

    items: list[bytes] = field(default_factory=list)
    rejects: list[DeadLetter] = field(default_factory=list)
    first_seq: int = 0
    last_seq: int = 0
    messages: int = 0


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
                 position: int, source: str, heartbeat_s: float = 1.0) -> None:
        self.nc, self.js, self.stream = nc, js, stream
        self.filters = filters
        self.position = position
        self.source = source
        self.heartbeat_s = heartbeat_s
        self.pending = -1  # messages the server still has for us after the last one (-1: unknown)
        self._sub: Subscription | None = None
        self._consumer: str | None = None
        self._next_dseq = 1
        self._last_activity = time.monotonic()
        self._reconnects_seen = nc.stats["reconnects"]
        self._retry_at = 0.0
        self._deleting: set[asyncio.Task[None]] = set()
        self.resets = 0

    @property
    def active(self) -> bool:
        return self._sub is not None

    async def ensure(self) -> bool:
        """(Re)create the server-side consumer when needed; False if it cannot be now."""
        if self._sub is not None:
            # Read what the socket holds before judging the consumer's health.
            await _let_client_read()
            if self._sub is not None and not self._healthy():
                await self._drop()
        if self._sub is not None:
            return True
        if not self.nc.is_connected or time.monotonic() < self._retry_at:
            return False
        try:
            await self._create()
        except Exception as exc:  # server restarting, stream leader moving, timeouts...
            log.debug("consumer for %s not created yet: %s", self.source, exc)
            await self._drop()
            self._retry_at = time.monotonic() + 0.25
            return False
        return True

    def _healthy(self) -> bool:
        if self.nc.stats["reconnects"] != self._reconnects_seen:
            log.info("%s: reconnected to NATS; resuming after stream seq %d",
                     self.source, self.position)
            return False
        if not self._sub._pending_queue.empty():  # type: ignore[union-attr]
            return True
        silent = time.monotonic() - self._last_activity
        if silent > 3 * self.heartbeat_s and self.nc.is_connected:
            log.info("%s: no heartbeat for %.1fs; resuming after stream seq %d",
                     self.source, silent, self.position)
            return False
        return True

    async def _create(self) -> None:
        self._reconnects_seen = self.nc.stats["reconnects"]
        inbox = self.nc.new_inbox()
        self._sub = await self.nc.subscribe(inbox, pending_msgs_limit=0,
                                            pending_bytes_limit=_PENDING_BYTES)
        config = ConsumerConfig(
            deliver_subject=inbox,
            ack_policy=AckPolicy.NONE,
            flow_control=True,
            idle_heartbeat=self.heartbeat_s,
            mem_storage=True,
            num_replicas=1,
            max_deliver=1,
            inactive_threshold=max(30.0, 10 * self.heartbeat_s),
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=self.position + 1,
        )
        if len(self.filters) == 1:
            config.filter_subject = self.filters[0]
        else:
            config.filter_subjects = self.filters
        info = await self.js.add_consumer(self.stream, config=config, timeout=2.0)
        self._consumer = info.name
        self._next_dseq = 1
        self._last_activity = time.monotonic()
        self.pending = info.num_pending if info.num_pending is not None else -1

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
            if not await self._take_any(first, out):
                await self._drop()
                return out
        deadline = time.monotonic() + max_s
        while len(out.items) < budget:
            if queue.empty():
                await _let_client_read()
                if queue.empty() or time.monotonic() > deadline:
                    break
            msg = queue.get_nowait()
            # The hot path stays synchronous; control messages need the network.
            ok = self._take(msg, out) if msg.data else await self._take_any(msg, out)
            if not ok:
                await self._drop()
                break
        if out.messages:
            self._last_activity = time.monotonic()
        return out

    async def _take_any(self, msg: Msg, out: Delivery) -> bool:
        """A data or control message; False when the consumer must be reset."""
        self._last_activity = time.monotonic()
        headers = msg.headers
        if headers is not None and _STATUS in headers and not msg.data:
            return await self._control(msg, headers)
        return self._take(msg, out)

    def _take(self, msg: Msg, out: Delivery) -> bool:
        """Add one data message to `out`; False on a gap (the consumer must be reset)."""
        sseq, dseq, pending = ack_sequences(msg.reply)
        if dseq != self._next_dseq:
            log.info("%s: consumer sequence gap (%d, expected %d); resuming after %d",
                     self.source, dseq, self._next_dseq, self.position)
            return False
        self._next_dseq = dseq + 1
        if sseq <= self.position:
            return True
        self.position = sseq
        self.pending = pending
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

    async def _control(self, msg: Msg, headers: dict[str, str]) -> bool:
        status = headers.get(_STATUS)
        if status != "100":
            log.info("%s: consumer status %s %s; recreating it", self.source, status,
                     headers.get("Description", ""))
            return False
        if msg.reply:  # flow control request: everything before it has been taken
            await self.nc.publish(msg.reply, b"")
            return True
        if stalled := headers.get(_STALLED):
            await self.nc.publish(stalled, b"")
        last = headers.get(_LAST_CONSUMER)
        if last is not None and int(last) != self._next_dseq - 1:
            log.info("%s: heartbeat reports consumer seq %s, we have %d; resuming after %d",
                     self.source, last, self._next_dseq - 1, self.position)
            return False
        return True

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
