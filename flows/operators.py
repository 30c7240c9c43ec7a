"""Dataflow operators of the detector: parse (oks/errs) and detect (events/late).

The shape follows `bytewax.connectors.kafka.operators`: each operator returns a small
dataclass of streams. Work is done per chunk, not per record: a chunk of raw lines is
parsed where it lands (chunks are spread over all workers), its counted records are
grouped by state shard, and each shard's detector gets one item per chunk. Every chunk
sends an item to every shard, empty or not, so that a shard can put the chunks of a
partition back into their order (`seq`) before it applies them: per-key order, and so
the events, do not depend on the number of workers.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import bytewax.operators as op
from bytewax.dataflow import Stream, operator
from bytewax.operators import StatefulBatchLogic
from typing_extensions import override

from binloop.core.block_parse import BlockParser, BlockResult, Candidate, full_record
from binloop.core.detection import DetectionParams, Detector, DetectorStats, Key
from binloop.core.events import BINEvent
from binloop.core.schema import (
    DEFAULT_LIMITS,
    DeadLetter,
    RecordLimits,
    RecordParser,
    ToolInvocation,
)
from binloop.core.shard_snapshot import dump_shard, load_shard
from binloop.core.shard_wire import PackedRecords, pack_records
from binloop.ops.thread_state import keep_thread_state
from binloop.replay.formats import mapper
from binloop.replay.ingest import parse_counted
from binloop.replay.readers import RawChunk
from binloop.replay.strided import numbered

PARTITION_IDLE_S = 30.0
_NO_STATS = DetectorStats()


def shard_of(key: Key, shards: int) -> str:
    """The state shard of a key: a hash that is the same in every process."""
    return str(shard_index(key, shards))


def shard_index(key: Key, shards: int) -> int:
    """The number (0..shards-1) of a key's state shard."""
    tool, mode = key
    return zlib.crc32(f"{tool}\x1f{mode}".encode()) % shards


@dataclass(frozen=True, slots=True)
class ShardChunk:
    """The counted records of one chunk that belong to one shard (possibly none), each
    with its key; the full record is built by the shard, only for an armed key."""

    partition: str
    seq: int
    records: list[tuple[Key, Candidate]]
    start_seq: int = 0
    # The newest ts of all valid records of the chunk (counted or not): the partition's
    # event-time progress.
    max_ts: int | None = None
    # See RawChunk: apply only after partition `waits_for` released its backlog.
    waits_for: str | None = None
    releases: bool = False
    # The records packed, once: Bytewax pickles an item twice to send it (its length,
    # then its bytes).
    _wire: bytes | None = field(default=None, init=False, repr=False, compare=False)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with its records packed by msgspec (`binloop.core.shard_wire`)."""
        packed = self._wire
        if packed is None:
            packed = pack_records(self.records)
            object.__setattr__(self, "_wire", packed)
        if packed is None:
            return (ShardChunk, (self.partition, self.seq, self.records, self.start_seq,
                                 self.max_ts, self.waits_for, self.releases))
        return (_unpacked_chunk, (self.partition, self.seq, packed, self.start_seq,
                                  self.max_ts, self.waits_for, self.releases))


def _unpacked_chunk(partition: str, seq: int, packed: bytes, *rest: Any) -> ShardChunk:
    return ShardChunk(partition, seq, PackedRecords(packed), *rest)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Rearm:
    """Arm a key again after the build of its `fired_epoch` event failed."""

    key: Key
    fired_epoch: int


@dataclass(frozen=True, slots=True)
class Disarm:
    """A tool answers this key: fire no more (e.g. restored from the library)."""

    key: Key
    epoch: int = 0


ShardInput = ShardChunk | Rearm | Disarm
# The keys a fresh detector starts disarmed (e.g. those the tool library answers).
Seed = Callable[[], Iterable[Disarm]]


@dataclass(slots=True)
class IngestStats:
    """The parse step's counters of one chunk."""

    records_read: int = 0
    valid: int = 0
    invalid: int = 0
    # The newest ts of the chunk's valid records (event-time lag metric).
    max_ts: int | None = None
    damaged_files: int = 0
    ts_converted: int = 0  # records whose ts was taken as seconds (--ts-unit)


@dataclass(frozen=True, slots=True)
class Late:
    """A counted record that arrived too late for any window."""

    record: ToolInvocation


@dataclass(frozen=True)
class ParseOut:
    """Counted records by shard, rejected inputs, and per-chunk counters."""

    oks: op.KeyedStream[ShardChunk]
    errs: Stream[DeadLetter]
    stats: Stream[IngestStats]


@dataclass(frozen=True)
class DetectOut:
    """Events, late records and the detector's counters."""

    events: Stream[BINEvent]
    late: Stream[ToolInvocation]
    stats: Stream[DetectorStats]


class ShardRouter:
    """The key and shard of a record's (tool, failure mode), remembered (keys repeat
    endlessly; the memory is bounded)."""

    def __init__(self, params: DetectionParams, shards: int, remember: int = 1 << 16,
                 names: Sequence[str] | None = None) -> None:
        """`names`: the shards' names (by default their numbers: `shard_of`)."""
        self.params = params
        self.shards = shards
        self.names = tuple(names) if names is not None else tuple(map(str, range(shards)))
        if len(self.names) != shards:
            raise ValueError(f"{len(self.names)} shard names for {shards} shards")
        self._remember = remember
        self.known: dict[tuple[str, str], tuple[str, Key]] = {}

    def route(self, tool: str, mode: str) -> tuple[str, Key]:
        """(shard, key) of a record's tool and failure mode (`known` holds those seen)."""
        known = self.known.get((tool, mode))
        if known is None:
            if len(self.known) >= self._remember:
                self.known.clear()
            key = self.params.key_of({"tool": tool, "failure_mode": mode})
            known = self.known[(tool, mode)] = (self.names[shard_index(key, self.shards)],
                                                 key)
        return known

    def split(self, counted: list[Candidate]) -> dict[str, list[tuple[Key, Candidate]]]:
        """A chunk's counted records by shard, each with its key, in arrival order."""
        if self.shards == 1 and self.params.mode_level is None:
            # `key_of` is then the record's (tool, failure mode): nothing to look up.
            return {self.names[0]: [((cand[1], cand[2]), cand) for cand in counted]}
        by_shard: dict[str, list[tuple[Key, Candidate]]] = {name: [] for name in self.names}
        known, route = self.known, self.route
        for cand in counted:
            found = known.get((cand[1], cand[2])) or route(cand[1], cand[2])  # tool, mode
            by_shard[found[0]].append((found[1], cand))
        return by_shard


def _parse(chunk: RawChunk, parser: BlockParser) -> BlockResult:
    """The block decoder for binloop's own lines; another input format is mapped onto
    records line by line (`binloop.replay.ingest`) and its records stay whole."""
    if mapper(chunk.input_format) is None:
        parsed = parser.parse(chunk.items, chunk.source, chunk.first_line, chunk.block,
                              chunk.ends)
        if chunk.rejects:  # the reader's own rejects come first
            parsed.dead[:0] = chunk.rejects
        return parsed
    if chunk.ends is not None:
        chunk = replace(chunk, items=chunk.lines(), ends=None)
    slow = parse_counted(chunk, parser.count_outcomes, parser.limits)
    counted: list[Candidate] = [(rec, rec["tool"], mode, rec["ts"], rec["session_id"])
                                for rec in slow.counted if (mode := rec["failure_mode"])]
    return BlockResult(counted, slow.dead, slow.valid, slow.blank, slow.max_ts,
                       slow.ts_converted)


def _parse_all(chunk: RawChunk, parser: BlockParser) -> tuple[BlockResult, int]:
    """A chunk and its further parts (`RawChunk.more`) parsed as one; and the records
    read (lines that are not blank, and the reader's rejects)."""
    parsed = _parse(chunk, parser)
    read = chunk.count - parsed.blank + len(chunk.rejects)
    for part in chunk.more:
        more = _parse(part, parser)
        parsed.counted.extend(more.counted)
        parsed.dead.extend(more.dead)
        parsed.valid += more.valid
        parsed.blank += more.blank
        parsed.ts_converted += more.ts_converted
        if more.max_ts is not None:
            parsed.max_ts = more.max_ts if parsed.max_ts is None else max(parsed.max_ts,
                                                                          more.max_ts)
        read += part.count - more.blank + len(part.rejects)
    if chunk.lines_before is not None and parsed.dead:
        before = chunk.lines_before()
        parsed.dead = [numbered(letter, before) for letter in parsed.dead]
    return parsed, read


def _split_chunk(chunk: RawChunk, parser: BlockParser, router: ShardRouter) -> list[Any]:
    parsed, read = _parse_all(chunk, parser)
    out: list[Any] = [(s, ShardChunk(chunk.partition, chunk.seq, recs, chunk.start_seq,
                                     parsed.max_ts, chunk.waits_for, chunk.releases))
                      for s, recs in router.split(parsed.counted).items()]
    out.extend(parsed.dead)
    out.append(IngestStats(read, parsed.valid,
                           len(parsed.dead), parsed.max_ts, chunk.damaged_files,
                           parsed.ts_converted))
    return out


@operator
def parse_telemetry(step_id: str, up: Stream[RawChunk], params: DetectionParams,
                    limits: RecordLimits, shards: int, spread: bool = True,
                    shard_names: Sequence[str] | None = None) -> ParseOut:
    """Validate raw chunks (handed round the workers first, with `spread`); counted
    records go to their shard (named by its number, or by `shard_names`), rejects to
    `errs`."""
    chunks = op.redistribute("spread", up) if spread else up
    router = ShardRouter(params, shards, names=shard_names)
    parser = BlockParser(params.count_outcomes, limits)
    parsed = op.flat_map("parse", chunks, lambda c: _split_chunk(c, parser, router))
    keyed = op.branch("keyed", parsed, lambda x: isinstance(x, tuple))
    rest = op.branch("rejects", keyed.falses, lambda x: isinstance(x, DeadLetter))
    return ParseOut(
        cast(op.KeyedStream[ShardChunk], keyed.trues),
        cast(Stream[DeadLetter], rest.trues),
        cast(Stream[IngestStats], rest.falses),
    )


@dataclass
class ShardState:
    """What a shard snapshots: its detector and the reorder buffer per partition
    (written as versioned plain data: `binloop.core.shard_snapshot`)."""

    detector: Detector
    shards: int
    next_seq: dict[str, int] = field(default_factory=dict)
    partition_ts: dict[str, int] = field(default_factory=dict)
    pending: dict[str, dict[int, ShardChunk]] = field(default_factory=dict)
    # Partitions whose backlog is applied, and the in-order chunks that wait for one.
    released: set[str] = field(default_factory=set)
    held: dict[str, list[ShardChunk]] = field(default_factory=dict)


class DetectShard(StatefulBatchLogic[ShardInput, Any, Any]):
    """One state shard: puts chunks back in order and runs the detector on them."""

    def __init__(self, params: DetectionParams, shards: int, resume: Any | None,
                 seed: Seed | None = None, limits: RecordLimits = DEFAULT_LIMITS) -> None:
        keep_thread_state()
        self._parser = RecordParser(limits)
        self._partition_seen: dict[str, float] = {}
        if resume is not None:
            self.state: ShardState = load_shard(resume, params, ShardState, ShardChunk)
        else:
            self.state = ShardState(Detector(params, external_clock=True), shards)
            if seed is not None:
                # A shard does not know which keys are its own: it holds every seeded key
                # (as many as the library has tools), and only its own ever see records.
                for disarm in seed():
                    self.state.detector.disarm(disarm.key, disarm.epoch)
        if (self.state.detector.params, self.state.shards) != (params, shards):
            raise ValueError(
                "the recovery store was written with other detection settings "
                f"({self.state.detector.params}, shards={self.state.shards}); "
                "resume with the same settings or start a new store")

    @override
    def on_batch(self, values: list[ShardInput]) -> tuple[Iterable[Any], bool]:
        detector = self.state.detector
        detector.stats = DetectorStats()
        out: list[Any] = []
        for value in values:
            if isinstance(value, ShardChunk):
                for chunk in self._in_order(value):
                    self._apply_or_hold(chunk, out)
            elif isinstance(value, Rearm):
                detector.rearm(value.key, value.fired_epoch)
            else:
                detector.disarm(value.key, value.epoch)
        if detector.stats != _NO_STATS:
            out.append(detector.stats)
        return out, StatefulBatchLogic.RETAIN

    def _in_order(self, chunk: ShardChunk) -> list[ShardChunk]:
        expected = self.state.next_seq.get(chunk.partition, chunk.start_seq)
        if chunk.seq == chunk.start_seq and expected != chunk.start_seq:
            raise RuntimeError(
                f"partition {chunk.partition} resumed at chunk {chunk.start_seq} but this shard "
                f"expects chunk {expected}: was the shard count or the store changed?")
        pending = self.state.pending.setdefault(chunk.partition, {})
        pending[chunk.seq] = chunk
        ready = []
        while expected in pending:
            ready.append(pending.pop(expected))
            expected += 1
        self.state.next_seq[chunk.partition] = expected
        return ready

    def _apply_or_hold(self, chunk: ShardChunk, out: list[Any]) -> None:
        """Apply a chunk that is next in its partition's order, unless it waits for a
        backlog not yet applied (then it is held, and so are its partition's later
        chunks); a chunk that releases a backlog applies what waited for it."""
        state = self.state
        held = state.held.get(chunk.partition)
        if held is not None or (chunk.waits_for is not None
                                and chunk.waits_for not in state.released):
            state.held.setdefault(chunk.partition, []).append(chunk)
            return
        if chunk.records:  # (most chunks bring a shard nothing to apply)
            self._apply(chunk.records, out)
        self._note_progress(chunk)
        if chunk.releases and chunk.partition not in state.released:
            state.released.add(chunk.partition)
            for partition, waiting in list(state.held.items()):
                if waiting[0].waits_for == chunk.partition:
                    del state.held[partition]
                    for later in waiting:
                        self._apply_or_hold(later, out)

    def _note_progress(self, chunk: ShardChunk) -> None:
        """Move the detector's clock to the slowest partition that is still sending.

        A partition that has sent nothing for `PARTITION_IDLE_S` (wall clock) does not
        hold the clock back, or a quiet partition would keep every window alive.
        """
        now = time.monotonic()
        self._partition_seen[chunk.partition] = now
        if chunk.max_ts is not None:
            known = self.state.partition_ts.get(chunk.partition, chunk.max_ts)
            self.state.partition_ts[chunk.partition] = max(known, chunk.max_ts)
        active = [ts for p, ts in self.state.partition_ts.items()
                  if now - self._partition_seen.get(p, -math.inf) <= PARTITION_IDLE_S]
        if active:
            self.state.detector.advance_clock(min(active))

    def _apply(self, records: list[tuple[Key, Candidate]], out: list[Any]) -> None:
        detector, parser = self.state.detector, self._parser
        ignores, observe = detector.ignores, detector.observe
        # Records from another process are packed: those ignored are never unpacked.
        kept: Iterable[tuple[Key, Candidate]] = (
            records.unignored(ignores) if isinstance(records, PackedRecords)
            else ((key, cand) for key, cand in records if not ignores(key, cand[3])))
        for _key, cand in kept:
            rec = full_record(cand, parser)
            seen = observe(rec)
            if seen.event is not None:
                out.append(seen.event)
            elif seen.status == "late":
                out.append(Late(rec))

    @override
    def snapshot(self) -> Any:
        return dump_shard(self.state)


@operator
def detect_friction(step_id: str, up: op.KeyedStream[ShardInput],
                    params: DetectionParams, shards: int, seed: Seed | None = None,
                    limits: RecordLimits = DEFAULT_LIMITS) -> DetectOut:
    """FRICTION-DETECT over shard-keyed chunks and control commands; a shard that starts
    without recovery state first disarms the `seed` keys."""
    detected = op.stateful_batch(
        "shards", up, lambda resume: DetectShard(params, shards, resume, seed, limits))
    values = op.key_rm("unkey", detected)
    stats = op.branch("stats", values, lambda x: isinstance(x, DetectorStats))
    late = op.branch("late", stats.falses, lambda x: isinstance(x, Late))
    return DetectOut(
        cast(Stream[BINEvent], late.falses),
        op.map("unwrap_late", cast(Stream[Late], late.trues), lambda x: x.record),
        cast(Stream[DetectorStats], stats.trues),
    )
