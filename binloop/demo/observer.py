"""What the demo sees of the loop on NATS: every message on the subjects of the BIN
loop, stamped with the time it arrived (core subscriptions: they see JetStream
publishes too, and take nothing from the streams' consumers).

Subjects: `telemetry.>` (the agent's tool calls), `bin.events.>` (BINEvents),
`bin.control.>` (pause and resume requests), `bin.registry.updated`, and `bin.builds.>`
(build results, re-arms, tool status changes).
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass
from typing import Any

import orjson
from nats.js.errors import NotFoundError

from binloop.core.config import default
from binloop.nats.link import NatsLink
from binloop.nats.subjects import BATCH_HEADER

_PREFIXES = ("subject_prefix", "events_subject_prefix", "control_subject_prefix",
             "builds_subject_prefix")
SUBJECTS = (*(f"{default(name)}.>" for name in _PREFIXES), default("registry_subject"))


@dataclass(frozen=True)
class Seen:
    at: float  # time.monotonic() when it arrived
    subject: str
    payload: Any


class NatsObserver:
    def __init__(self, url: str) -> None:
        self.link = NatsLink(url, "binloop-demo", 10.0)
        self.seen: queue.Queue[Seen] = queue.Queue()
        self.link.run(self._subscribe())

    async def _subscribe(self) -> None:
        async def record(msg: Any) -> None:
            at = time.monotonic()
            # A batch envelope (the Hanzo bridge sends them) holds one record per line.
            lines = msg.data.splitlines() if (msg.headers or {}).get(BATCH_HEADER) else [msg.data]
            for line in lines:
                try:
                    payload = orjson.loads(line)
                except orjson.JSONDecodeError:
                    payload = None
                self.seen.put(Seen(at, msg.subject, payload))

        for subject in SUBJECTS:
            await self.link.nc.subscribe(subject, cb=record)
        await self.link.nc.flush()

    def streams_exist(self, *names: str) -> bool:
        async def check() -> bool:
            for name in names:
                try:
                    await self.link.js.stream_info(name)
                except NotFoundError:
                    return False
            return True

        try:
            return self.link.run(check(), 10.0)
        except Exception:  # NATS busy or reconnecting: ask again later
            return False

    def next(self, timeout: float) -> Seen | None:
        try:
            return self.seen.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self) -> None:
        self.link.close()
