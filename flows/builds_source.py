"""The detector's second input: build results and re-arms from the `BIN_BUILDS` stream.

Every build result of epoch `e` becomes `Disarm(key, e)` (the key fired at `e`; in the
live order this changes nothing), every due re-arm `Rearm(key, e)` (the key is armed
again with epoch `e + 1`, once). On a fresh start (no recovery state) the source
replays the stream from its beginning, which rebuilds the armed/disarmed state of
every key in the order it happened (the keys the tool library answers are disarmed
before any record by the detector's seed, see `library_seed`); with recovery it
resumes after the last stream sequence it snapshotted.

Delivery guarantee: exactly-once with Bytewax recovery (the snapshot is the stream
position), and harmless when repeated anyway (`Detector.rearm` acts once per epoch).
The source ends with `stop_requested`, or once for `until_idle_s` it has had no message,
the job's `progress()` token (its records read) has not moved and `busy()` (builds
queued or running in this process) is false: it never ends before detection does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import bytewax.operators as op
import orjson
from bytewax.dataflow import Dataflow
from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
from typing_extensions import override

from binloop.core.config import default
from binloop.nats.consumer import OrderedConsumer
from binloop.nats.jetstream import StreamSpec, ensure_stream
from binloop.nats.link import CONNECT_TIMEOUT_S, acquire_link, release_link
from binloop.ops.shutdown import stop_requested
from flows.operators import Disarm, Rearm, ShardInput, shard_of

log = logging.getLogger("binloop.nats")
Control = Rearm | Disarm


@dataclass(frozen=True)
class ControlSettings:
    url: str
    stream: StreamSpec
    prefix: str = default("builds_subject_prefix")
    busy: Callable[[], bool] | None = None
    # A token that changes while the job still reads telemetry (e.g. records read).
    progress: Callable[[], object] | None = None
    until_idle_s: float | None = None
    manage_stream: bool = True
    connect_timeout_s: float = CONNECT_TIMEOUT_S


def control_of(data: bytes) -> Control | None:
    """The detector command a BIN_BUILDS message stands for (None: not one)."""
    try:
        message: Any = orjson.loads(data)
        key = (str(message["tool"]), str(message["failure_mode"]))
        if message.get("type") == "rearm":
            return Rearm(key, int(message["fired_epoch"]))
        return Disarm(key, int(message["arm_epoch"]))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        log.warning("ignoring a malformed build-control message: %r", data[:200])
        return None


class _ControlPartition(StatefulSourcePartition[Control, int]):
    def __init__(self, settings: ControlSettings, resume: int | None) -> None:
        self._settings = settings
        self._link = acquire_link(settings.url, "binloop-controls", settings.connect_timeout_s)
        self._link.run(ensure_stream(self._link.js, settings.stream, settings.manage_stream))
        filters = [f"{settings.prefix}.result.>", f"{settings.prefix}.rearm.>"]
        self._consumer = OrderedConsumer(self._link.nc, self._link.js, settings.stream.name,
                                         filters, resume or 0, "build-controls",
                                         api_prefix=self._link.api_prefix)
        self._quiet_since = time.monotonic()
        self._progress: object = None
        self._awake: datetime | None = None

    @override
    def next_batch(self) -> list[Control]:
        if stop_requested.is_set():
            raise StopIteration
        delivery = self._link.run(self._consumer.poll(256, 0.005))
        out = [c for c in map(control_of, delivery.items) if c is not None]
        now = time.monotonic()
        if delivery.messages:
            self._quiet_since = now
        elif self._finished(now):
            raise StopIteration
        self._awake = None if out else datetime.now(timezone.utc) + timedelta(seconds=0.05)
        return out

    def _finished(self, now: float) -> bool:
        idle = self._settings.until_idle_s
        if idle is None:
            return False
        if self._settings.progress is not None:
            token = self._settings.progress()
            if token != self._progress:
                self._progress, self._quiet_since = token, now
        if now - self._quiet_since < idle:
            return False
        if self._settings.busy is not None and self._settings.busy():
            self._quiet_since = now
            return False
        return bool(self._link.run(self._consumer.caught_up()))

    @override
    def next_awake(self) -> datetime | None:
        return self._awake

    @override
    def snapshot(self) -> int:
        return self._consumer.position

    @override
    def close(self) -> None:
        try:
            self._link.run(self._consumer.close())
        finally:
            release_link(self._link)


class BuildControlSource(FixedPartitionedSource[Control, int]):
    """One partition: the whole BIN_BUILDS control history, in stream order."""

    def __init__(self, settings: ControlSettings) -> None:
        self._settings = settings

    @override
    def list_parts(self) -> list[str]:
        return ["build-controls"]

    @override
    def build_part(self, step_id: str, for_part: str, resume_state: int | None
                   ) -> _ControlPartition:
        return _ControlPartition(self._settings, resume_state)


def library_seed(answered: list[tuple[tuple[str, str], int]]) -> Callable[[], list[Disarm]]:
    """The detector seed: `Disarm(key, epoch)` for each key a library tool answers."""
    seed = [Disarm(key, epoch) for key, epoch in answered]
    return lambda: seed


def controls_factory(settings: ControlSettings, shards: int
                     ) -> Callable[[Dataflow], op.KeyedStream[ShardInput]]:
    """For `flows.live.build_flow(controls=...)`: the commands routed to their shard."""
    def factory(flow: Dataflow) -> op.KeyedStream[ShardInput]:
        controls = op.input("build_controls", flow, BuildControlSource(settings))
        return op.key_on("route_controls", controls, lambda c: shard_of(c.key, shards))
    return factory
