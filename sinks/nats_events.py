"""BINEvents to a JetStream stream (default `BIN_EVENTS`, subjects `bin.events.>`).

Each event goes to `bin.events.{tool}.{failure_mode}` (see `binloop.nats.subjects`) with
the header `Nats-Msg-Id = event_id`.

Delivery guarantee: exactly-once in the stream. Every write waits for the stream's
acknowledgements (a batch's events are pipelined), retrying while NATS is unreachable,
so the dataflow does not snapshot past an event that is not stored. An event replayed
after a recovery is dropped by the server's duplicate window (`Nats-Msg-Id`, 24 h by
default) and, for the first `replay_guard_s` after a start (when a resumed job replays
what followed its snapshot, however long ago that was), by comparing it with the last
event stored on its subject. A worker writes its own events (each key's events come
from one worker), so per-key order is kept.
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

from binloop.core.config import default
from binloop.core.events import BINEvent, dumps_event
from binloop.nats.jetstream import StreamSpec, ensure_stream
from binloop.nats.link import CONNECT_TIMEOUT_S, NatsLink, acquire_link, release_link
from binloop.nats.subjects import MSG_ID_HEADER, event_subject

log = logging.getLogger("binloop.nats")


class EventNotStored(RuntimeError):
    """An event could not be stored before shutdown; recovery will replay it."""


@dataclass(frozen=True)
class NatsEventSettings:
    url: str
    stream: StreamSpec
    prefix: str = default("events_subject_prefix")
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    manage_stream: bool = True
    # How long a write keeps retrying once the job is asked to stop.
    give_up_after_stop_s: float = 10.0
    # For this long after the start (when a resumed job replays the events since its
    # snapshot), each event is first compared with the last one on its subject.
    replay_guard_s: float = 120.0


async def already_stored(link: NatsLink, settings: NatsEventSettings, event: BINEvent) -> bool:
    """Whether the last event stored on the event's subject is this very event."""
    subject = event_subject(settings.prefix, event["tool"], event["failure_mode"])
    try:
        last = await link.js.get_last_msg(settings.stream.name, subject)
    except NotFoundError:
        return False
    return (last.headers or {}).get(MSG_ID_HEADER) == event["event_id"]


async def publish_events(link: NatsLink, settings: NatsEventSettings, events: list[BINEvent],
                         check_stored: bool) -> int:
    """Store `events` (pipelined, in order) and wait for every acknowledgement;
    returns how many were new. With `check_stored`, events whose subject already ends
    with them are skipped (a replay beyond the duplicate window)."""
    if check_stored:
        stored = await asyncio.gather(*(already_stored(link, settings, e) for e in events))
        events = [e for e, done in zip(events, stored, strict=True) if not done]
    acks = [await link.js.publish_async(
                event_subject(settings.prefix, e["tool"], e["failure_mode"]), dumps_event(e),
                headers={MSG_ID_HEADER: e["event_id"]}) for e in events]
    results = await asyncio.wait_for(asyncio.gather(*acks), timeout=5.0)
    return sum(1 for ack in results if not ack.duplicate)


class _EventPartition(StatelessSinkPartition[BINEvent]):
    def __init__(self, settings: NatsEventSettings, stopping: threading.Event | None) -> None:
        self._settings = settings
        self._stopping = stopping
        self._link = acquire_link(settings.url, "binloop-events", settings.connect_timeout_s)
        self._link.run(ensure_stream(self._link.js, settings.stream, settings.manage_stream))
        self._check_until = time.monotonic() + settings.replay_guard_s
        self.published = 0

    @override
    def write_batch(self, items: list[BINEvent]) -> None:
        self._link.run(self._store(items), None)  # _store bounds its own retries

    async def _store(self, events: list[BINEvent]) -> None:
        give_up_at: float | None = None
        while True:
            try:
                check = time.monotonic() < self._check_until
                self.published += await publish_events(self._link, self._settings, events,
                                                       check)
                return
            except Exception as exc:  # timeouts, no responders, connection closed...
                log.info("%d event(s) not stored yet (%s); retrying", len(events), exc)
            if self._stopping is not None and self._stopping.is_set():
                give_up_at = give_up_at or time.monotonic() + self._settings.give_up_after_stop_s
                if time.monotonic() > give_up_at:
                    raise EventNotStored(f"{len(events)} event(s) not stored: NATS is "
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
