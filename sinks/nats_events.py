"""BINEvents to a JetStream stream (default `BIN_EVENTS`, subjects `bin.events.>`).

Each event goes to `bin.events.{tool}.{failure_mode}` (see `binloop.subjects`) with
the header `Nats-Msg-Id = event_id`.

Delivery guarantee: exactly-once in the stream. Every write waits for the stream's
acknowledgement, retrying while NATS is unreachable (so the dataflow does not snapshot
past an event that is not stored). An event replayed after a recovery is dropped by
the server's duplicate window (`Nats-Msg-Id`), and, beyond that window, by comparing
it with the last event stored on its subject. A worker writes its own events (each
key's events come from one worker), so per-key order is kept.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass

from bytewax.outputs import DynamicSink, StatelessSinkPartition
from nats.js.errors import NotFoundError
from typing_extensions import override

from binloop.events import BINEvent, dumps_event
from binloop.jetstream import StreamSpec, ensure_stream
from binloop.nats_link import Link, acquire_link, release_link
from binloop.subjects import MSG_ID_HEADER, event_subject

log = logging.getLogger("binloop.nats")


class EventNotStored(RuntimeError):
    """An event could not be stored before shutdown; recovery will replay it."""


@dataclass(frozen=True)
class NatsEventSettings:
    url: str
    stream: StreamSpec
    prefix: str = "bin.events"
    connect_timeout_s: float = 30.0
    manage_stream: bool = True
    # How long a write keeps retrying once the job is asked to stop.
    give_up_after_stop_s: float = 10.0


async def publish_event(link: Link, settings: NatsEventSettings, event: BINEvent) -> bool:
    """Store one event unless its subject's last event is the same one; True if sent."""
    subject = event_subject(settings.prefix, event["tool"], event["failure_mode"])
    try:
        last = await link.js.get_last_msg(settings.stream.name, subject)
        if last.headers and last.headers.get(MSG_ID_HEADER) == event["event_id"]:
            return False
    except NotFoundError:
        pass
    ack = await link.js.publish(subject, dumps_event(event), timeout=2.0,
                                headers={MSG_ID_HEADER: event["event_id"]})
    return not ack.duplicate


class _EventPartition(StatelessSinkPartition[BINEvent]):
    def __init__(self, settings: NatsEventSettings, stopping: threading.Event | None) -> None:
        self._settings = settings
        self._stopping = stopping
        self._link = acquire_link(settings.url, "binloop-events", settings.connect_timeout_s)
        self._link.run(ensure_stream(self._link.js, settings.stream, settings.manage_stream))
        self.published = 0

    @override
    def write_batch(self, items: list[BINEvent]) -> None:
        for event in items:
            self._link.run(self._store(event))

    async def _store(self, event: BINEvent) -> None:
        gave_up_at: float | None = None
        while True:
            try:
                self.published += await publish_event(self._link, self._settings, event)
                return
            except Exception as exc:  # timeouts, no responders, connection closed...
                log.info("event %s not stored yet (%s); retrying", event["event_id"][:12], exc)
            if self._stopping is not None and self._stopping.is_set():
                gave_up_at = gave_up_at or time.monotonic() + self._settings.give_up_after_stop_s
                if time.monotonic() > gave_up_at:
                    raise EventNotStored(f"event {event['event_id']} not stored: NATS is "
                                         "unreachable and the job is stopping")
            await asyncio.sleep(0.25)

    @override
    def close(self) -> None:
        release_link(self._link)


class NatsEventSink(DynamicSink[BINEvent]):
    """Publish BINEvents to JetStream, idempotent on `event_id`."""

    def __init__(self, settings: NatsEventSettings,
                 stopping: threading.Event | None = None) -> None:
        self.settings = settings
        self._stopping = stopping

    @override
    def build(self, step_id: str, worker_index: int, worker_count: int) -> _EventPartition:
        return _EventPartition(self.settings, self._stopping)
