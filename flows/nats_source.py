"""Telemetry from a NATS JetStream stream, as a Bytewax source of `RawChunk`s.

The stream is partitioned by the server (see `binloop.nats.jetstream`): partition `p` is
the subject filter `telemetry_p.<p>.>` (partition 0 also reads anything stored
unpartitioned). Each Bytewax partition reads one stream partition through an ordered
pull consumer with bounded requests in flight, and numbers its chunks 0, 1, 2, ...
A chunk is the records of consecutive messages as one block of lines, not cut into
lines (`RawChunk.ends`), as the file reader hands its blocks: the parse step decodes
it in one call, and only a block that holds a bad line is cut and read line by line.
The consumer is :class:`binloop.nats.wire_consumer.WireOrderedConsumer` on binloop's own
lean client of the NATS protocol (`binloop.nats.wire`, one connection per worker
thread), or :class:`binloop.nats.consumer.OrderedConsumer` on nats-py (`client =
nats-py`, and `auto` when the server needs TLS or NKeys); both keep the same contract.

Delivery guarantee: exactly-once with Bytewax recovery. A partition's snapshot is
`NatsPosition(stream_seq, chunk_seq)`: the last stream sequence it handed out and
the next chunk number, stored as versioned plain data (`{"format": "binloop.nats/2",
"stream_seq", "chunk_seq"}`) so that moving this module never breaks a recovery store.
A resumed partition reads from `stream_seq + 1` and goes on
numbering from `chunk_seq`, so the dataflow sees exactly the messages that followed
the snapshot, in the same chunks' order. Without recovery, a partition starts at
the beginning of the stream (`start = all`) or at its end (`start = new`).

Adopting a stream that holds telemetry stored before its partition transform (the
backlog, on partition 0): every chunk of the other partitions waits, in the detector's
shards, for partition 0's chunk that reaches the backlog's last stream sequence
(`BacklogOrder`), so each key's backlog is applied before its partitioned records
(docs/live.md).

Messages that cannot be records (an unknown batch envelope, an empty message) are emitted as
`DeadLetter`s beside the chunks; records that do not parse are dead-lettered by the
detector. Nothing is acknowledged or redelivered: the position moves past every
message, poison or not.

The source ends (cleanly, after a last snapshot) when `stop_requested` is set (by
SIGINT/SIGTERM in `binloop run`), or with `until_idle_s` once the stream has had no
new message for that long and the partition has read everything (0: as soon as it has,
a bounded drain of a backlog).
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar, Final, Protocol

from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
from nats.js import JetStreamContext
from typing_extensions import override

from binloop.core.config import default
from binloop.core.schema import DeadLetter
from binloop.nats.consumer import Delivery, OrderedConsumer, PullSettings
from binloop.nats.jetstream import StreamSpec, backlog_end, ensure_telemetry_stream
from binloop.nats.link import CONNECT_TIMEOUT_S, NatsLink, acquire_link, release_link
from binloop.nats.subjects import partition_filters
from binloop.nats.wire import Unsupported, acquire_wire, release_wire, stream_last_seq
from binloop.nats.wire_consumer import WireOrderedConsumer
from binloop.ops.metrics import PartitionMetrics
from binloop.ops.shutdown import stop_requested
from binloop.ops.thread_state import keep_thread_state
from binloop.replay.readers import RawChunk, newline_offsets

SourceItem = RawChunk | DeadLetter
# The most often a quiet partition asks whether the stream grew and it has read everything
# (`until_idle_s`; each asking is two requests to the server).
IDLE_CHECK_MIN_S: Final = 0.02
log = logging.getLogger("binloop.nats")



@dataclass(frozen=True)
class NatsSourceSettings:
    """Where and how to read telemetry (built from `binloop.core.config.Config`)."""

    url: str
    stream: StreamSpec
    batch_size: int = default("batch_size")
    start: str = default("start")
    until_idle_s: float | None = None
    poll_s: float = 0.005
    heartbeat_s: float = 1.0
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    manage_stream: bool = True
    client: str = "auto"

    @property
    def prefix(self) -> str:
        return self.stream.subjects[0].removesuffix(".>")


@dataclass(frozen=True)
class NatsPosition:
    """A partition's snapshot: last stream sequence handed out, next chunk number."""

    stream_seq: int = 0
    chunk_seq: int = 0

    FORMAT: ClassVar[str] = "binloop.nats/2"

    def to_plain(self) -> dict[str, Any]:
        return {"format": self.FORMAT, "stream_seq": self.stream_seq,
                "chunk_seq": self.chunk_seq}

    @classmethod
    def from_snapshot(cls, found: Any) -> NatsPosition:
        """A snapshot as a position: format 2 (plain), or a format-1 `NatsPosition`."""
        if isinstance(found, NatsPosition):
            return found
        if isinstance(found, dict) and found.get("format") == cls.FORMAT:
            return cls(int(found["stream_seq"]), int(found["chunk_seq"]))
        raise ValueError(f"recovery store: NATS read position {found!r:.80} is not in format "
                         f"{cls.FORMAT!r}; start a new recovery store")


@dataclass
class _IdleClock:
    """When the stream last grew, as seen from this partition."""

    every_s: float
    last_seq: int = -1
    since: float = field(default_factory=time.monotonic)
    checked: float = 0.0


class _Consumer(Protocol):
    position: int  # the last stream sequence handed out

    @property
    def pending(self) -> int | None:
        """Messages of the filter stored after the last one delivered (None: unknown)."""

    @property
    def active(self) -> bool: ...


def _pull_settings(settings: NatsSourceSettings) -> PullSettings:
    # Records come as runs of whole lines: a chunk is one block for the parse step,
    # decoded in one call, with no Python object per record on the way.
    return PullSettings(heartbeat_s=settings.heartbeat_s, runs=True)


def delivery_chunk(delivery: Delivery, partition: str, seq: int, start_seq: int,
                   waits_for: str | None = None, releases: bool = False) -> RawChunk:
    """The records of `delivery` as a chunk: a block not cut into lines (the offsets
    of its newlines found by numpy), or its lines when the delivery had to cut them."""
    source = f"nats:{partition}@{delivery.first_seq}-{delivery.last_seq}"
    if delivery.runs and not delivery.items:
        block = delivery.block()
        ends = newline_offsets(block)
        return RawChunk(partition, seq, source, 1, [], start_seq, waits_for=waits_for,
                        releases=releases, block=block, ends=ends)
    return RawChunk(partition, seq, source, 1, list(delivery.items), start_seq,
                    waits_for=waits_for, releases=releases)


class _Reader(ABC):
    """A stream partition read in order after a position (the contract of
    `binloop.nats.consumer.OrderedConsumer`), on one of the two clients."""

    consumer: _Consumer

    @abstractmethod
    def poll(self, budget: int) -> Delivery: ...

    @abstractmethod
    def caught_up(self) -> bool: ...

    @abstractmethod
    def stream_last_seq(self) -> int: ...

    @abstractmethod
    def close(self) -> None: ...


class _WireReader(_Reader):
    """On `binloop.nats.wire` (this thread's connection)."""

    consumer: WireOrderedConsumer

    def __init__(self, settings: NatsSourceSettings, name: str, filters: list[str]) -> None:
        self._settings = settings
        self._link = acquire_wire(settings.url, "binloop-source", settings.connect_timeout_s)
        self.consumer = WireOrderedConsumer(self._link.conn, settings.stream.name, filters, 0,
                                             name, _pull_settings(settings))

    def poll(self, budget: int) -> Delivery:
        return self.consumer.poll(budget)

    def caught_up(self) -> bool:
        return self.consumer.caught_up()

    def stream_last_seq(self) -> int:
        return stream_last_seq(self._link.conn, self._settings.stream.name)

    def close(self) -> None:
        try:
            self.consumer.close()
        finally:
            release_wire(self._link)


class _AsyncReader(_Reader):
    """On nats-py (this thread's event loop and connection)."""

    consumer: OrderedConsumer

    def __init__(self, settings: NatsSourceSettings, name: str, filters: list[str]) -> None:
        self._settings = settings
        self._link = acquire_link(settings.url, "binloop-source", settings.connect_timeout_s)
        self.consumer = OrderedConsumer(self._link.nc, self._link.js, settings.stream.name,
                                         filters, 0, name,
                                         _pull_settings(settings),
                                         self._link.api_prefix)

    def poll(self, budget: int) -> Delivery:
        return self._link.run(self.consumer.poll(budget, 0.0))

    def caught_up(self) -> bool:
        return self._link.run(self.consumer.caught_up())

    def stream_last_seq(self) -> int:
        info = self._link.run(self._link.js.stream_info(self._settings.stream.name))
        return int(info.state.last_seq)

    def close(self) -> None:
        try:
            self._link.run(self.consumer.close())
        finally:
            release_link(self._link)


def open_reader(settings: NatsSourceSettings, name: str, filters: list[str]) -> _Reader:
    """The reader of `settings.client` (`auto`: wire, or nats-py where wire cannot go)."""
    if settings.client == "nats-py":
        return _AsyncReader(settings, name, filters)
    try:
        return _WireReader(settings, name, filters)
    except Unsupported as exc:
        if settings.client == "wire":
            raise
        log.info("%s: reading with nats-py (%s)", name, exc)
        return _AsyncReader(settings, name, filters)


@dataclass(frozen=True)
class BacklogOrder:
    """How a partition takes part in adopting a stream that holds telemetry stored
    before the partition transform: partition 0 reads that backlog (up to stream
    sequence `backlog_end`) and releases it with the chunk that reaches it; every
    other partition's chunks wait (in the detector's shards) for that release."""

    first_partition: str
    backlog_end: int | None

    def waits_for(self, partition: str) -> str | None:
        if self.backlog_end is None or partition == self.first_partition:
            return None
        return self.first_partition


class _NatsPartition(StatefulSourcePartition[SourceItem, Any]):
    def __init__(self, settings: NatsSourceSettings, name: str, index: int,
                 resume: NatsPosition | None, order: BacklogOrder | None = None) -> None:
        self._settings = settings
        self._name = name
        order = order or BacklogOrder(name if index == 0 else "", None)
        self._waits_for = order.waits_for(name)
        # Partition 0 releases once per start, also with no backlog: the other
        # partitions' view of the stream may be older than its own.
        self._release_at: int | None = None
        self._release_checked = 0.0
        if name == order.first_partition:
            self._release_at = order.backlog_end or 0
        self._reader = open_reader(settings, name, partition_filters(settings.prefix, index))
        try:
            position = resume or NatsPosition(self._start_seq(settings))
        except BaseException:
            self._reader.close()
            raise
        if resume is not None:
            log.info("%s resumes after stream seq %d at chunk %d", name, resume.stream_seq,
                     resume.chunk_seq)
        self._reader.consumer.position = position.stream_seq
        self._chunk_seq = position.chunk_seq
        self._start_chunk = position.chunk_seq
        self._metrics = PartitionMetrics(name, position.stream_seq)
        idle_s = 1.0 if settings.until_idle_s is None else settings.until_idle_s
        self._idle = _IdleClock(min(1.0, max(IDLE_CHECK_MIN_S, idle_s / 4)))
        self._awake: datetime | None = None
        self._quiet_s = 0.0

    def _start_seq(self, settings: NatsSourceSettings) -> int:
        return self._reader.stream_last_seq() if settings.start == "new" else 0

    @override
    def next_batch(self) -> list[SourceItem]:
        if stop_requested.is_set():
            raise StopIteration
        delivery = self._reader.poll(self._settings.batch_size)
        out: list[SourceItem] = list(delivery.rejects)
        releases = self._release_at is not None and (
            self._reader.consumer.position >= self._release_at
            or (not delivery.messages and self._read_all_there_is()))
        if delivery.records or releases:
            out.append(delivery_chunk(delivery, self._name, self._chunk_seq,
                                      self._start_chunk, self._waits_for, releases))
            self._chunk_seq += 1
            if releases:
                log.info("%s: telemetry stored before the partition transform applied "
                         "(up to stream seq %d)", self._name, self._release_at)
                self._release_at = None
        self._awake = None
        if delivery.messages:
            consumer = self._reader.consumer
            self._metrics.read(delivery.messages, consumer.position, consumer.pending)
            self._idle.since = time.monotonic()
            self._quiet_s = 0.0
        elif not self._reader.consumer.active:
            self._awake = datetime.now(timezone.utc) + timedelta(seconds=0.1)
        elif self._settings.until_idle_s is not None and self._idle_long_enough():
            raise StopIteration
        else:
            # Never block the worker: a quiet partition is polled again after a pause
            # that doubles up to `poll_s` (the most a message waits in a quiet stream).
            self._quiet_s = min(self._settings.poll_s, max(0.0005, 2 * self._quiet_s))
            self._awake = datetime.now(timezone.utc) + timedelta(seconds=self._quiet_s)
        return out

    def _read_all_there_is(self) -> bool:
        """Whether the consumer has delivered everything stored (asked at most every
        0.2 s): the backlog's end may have been dropped by the stream's limits."""
        now = time.monotonic()
        if now - self._release_checked < 0.2 or not self._reader.consumer.active:
            return False
        self._release_checked = now
        return self._reader.caught_up()

    def _idle_long_enough(self) -> bool:
        now = time.monotonic()
        if now - self._idle.checked < self._idle.every_s:
            return False
        self._idle.checked = now
        try:
            last_seq = self._reader.stream_last_seq()
        except Exception:
            self._idle.since = now
            return False
        if last_seq != self._idle.last_seq:
            self._idle.last_seq, self._idle.since = last_seq, now
            return False
        assert self._settings.until_idle_s is not None
        return (now - self._idle.since >= self._settings.until_idle_s
                and self._reader.caught_up())

    @override
    def next_awake(self) -> datetime | None:
        return self._awake

    @override
    def snapshot(self) -> Any:
        return NatsPosition(self._reader.consumer.position, self._chunk_seq).to_plain()

    @override
    def close(self) -> None:
        try:
            self._reader.close()
        except Exception as exc:  # the consumer also expires by itself
            log.debug("%s: closing the consumer: %s", self._name, exc)


class NatsTelemetrySource(FixedPartitionedSource[SourceItem, Any]):
    """Chunks of raw records from the partitions of a JetStream telemetry stream."""

    def __init__(self, settings: NatsSourceSettings) -> None:
        self.settings = settings
        self._partitions: int | None = None
        self._order: BacklogOrder | None = None
        self._lock = threading.Lock()

    def partition_count(self) -> int:
        """The stream's partitions, creating or partitioning the stream when needed."""
        with self._lock:
            if self._partitions is None:
                settings = self.settings
                with NatsLink(settings.url, "binloop-setup", settings.connect_timeout_s) as link:
                    self._partitions, backlog = link.run(self._setup(link.js))
                self._order = BacklogOrder(self._part_name(0), backlog)
            return self._partitions

    async def _setup(self, js: JetStreamContext) -> tuple[int, int | None]:
        partitions = await ensure_telemetry_stream(js, self.settings.stream,
                                                   self.settings.manage_stream)
        return partitions, await backlog_end(js, self.settings.stream.name,
                                             self.settings.prefix)

    def _part_name(self, index: int) -> str:
        return f"{self.settings.stream.name}/{index}"

    @override
    def list_parts(self) -> list[str]:
        return [self._part_name(i) for i in range(self.partition_count())]

    @override
    def build_part(self, step_id: str, for_part: str,
                   resume_state: Any | None) -> _NatsPartition:
        keep_thread_state()
        index = int(for_part.rpartition("/")[2])
        resume = None if resume_state is None else NatsPosition.from_snapshot(resume_state)
        self.partition_count()
        return _NatsPartition(self.settings, for_part, index, resume, self._order)
