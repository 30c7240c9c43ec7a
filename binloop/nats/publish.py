"""Putting telemetry on the JetStream stream: one record per message, or batch envelopes.

A record goes to `telemetry.{session_id}.{tool}` (escaped tokens) with
`Nats-Msg-Id = id`, so a record published twice is stored once. A batch envelope
(header `Binloop-Batch: jsonl`) carries many records of ONE tool as JSONL, on that
tool's subject, so that every record of a tool stays in one partition and in order.
Lines are sent as they are (the job validates them); a line that is not a valid
record still gets a subject (from whatever fields it has) and is dead-lettered by
the job.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import orjson
from nats.js import JetStreamContext
from nats.js.api import PubAck

from binloop.core.schema import InvalidRecord, parse_record
from binloop.nats.subjects import BATCH_HEADER, BATCH_JSONL, MSG_ID_HEADER, telemetry_subject

UNKNOWN_TOKEN = "_"


@dataclass(frozen=True, slots=True)
class Message:
    subject: str
    payload: bytes
    headers: dict[str, str]
    records: int


def _routing(line: bytes) -> tuple[str | int, str, str]:
    """(session_id, tool, id) of a line; fields it lacks become `_`."""
    try:
        rec = parse_record(line)
        return rec["session_id"], rec["tool"], rec["id"]
    except InvalidRecord:
        pass
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        obj = None
    fields = obj if isinstance(obj, dict) else {}
    session, tool = fields.get("session_id"), fields.get("tool")
    return (session if isinstance(session, int | str) and session != "" else UNKNOWN_TOKEN,
            tool if isinstance(tool, str) and tool else UNKNOWN_TOKEN,
            hashlib.sha256(line).hexdigest())


def record_message(line: bytes, prefix: str = "telemetry") -> Message:
    """One record as one message."""
    session, tool, rid = _routing(line)
    return Message(telemetry_subject(prefix, session, tool), line, {MSG_ID_HEADER: rid}, 1)


def envelope_message(lines: list[bytes], session: str | int, tool: str, ids: list[str],
                     prefix: str = "telemetry") -> Message:
    """Records of one tool as one `Binloop-Batch: jsonl` message; its Nats-Msg-Id is a
    hash of the records' ids, so the same batch published twice is stored once."""
    digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()
    return Message(telemetry_subject(prefix, session, tool), b"\n".join(lines) + b"\n",
                   {MSG_ID_HEADER: digest, BATCH_HEADER: BATCH_JSONL}, len(lines))


@dataclass
class _ToolBatch:
    session: str | int
    lines: list[bytes] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)


def messages(lines: Iterable[bytes], batch: int = 1,
             prefix: str = "telemetry") -> Iterator[Message]:
    """The messages for `lines` in order: one per record, or envelopes of up to `batch`
    records of one tool (a tool's envelope is sent when full, and all at the end)."""
    if batch <= 1:
        for line in lines:
            if line.strip():
                yield record_message(line, prefix)
        return
    open_batches: dict[str, _ToolBatch] = {}
    for line in lines:
        if not line.strip():
            continue
        session, tool, rid = _routing(line)
        group = open_batches.setdefault(tool, _ToolBatch(session))
        group.lines.append(line)
        group.ids.append(rid)
        if len(group.lines) >= batch:
            del open_batches[tool]
            yield envelope_message(group.lines, group.session, tool, group.ids, prefix)
    for tool, group in open_batches.items():
        yield envelope_message(group.lines, group.session, tool, group.ids, prefix)


@dataclass
class PublishStats:
    messages: int = 0
    records: int = 0
    duplicates: int = 0
    elapsed_s: float = 0.0


class Pacer:
    """Keeps a sender at `rate` records per second (None: as fast as possible)."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.started = time.perf_counter()
        self.sent = 0

    async def wait(self, records: int) -> None:
        self.sent += records
        if self.rate:
            ahead = self.sent / self.rate - (time.perf_counter() - self.started)
            if ahead > 0.002:
                await asyncio.sleep(ahead)


async def publish_messages(js: JetStreamContext, items: Iterable[Message],
                           rate: float | None = None, window: int = 2000) -> PublishStats:
    """Publish in order with up to `window` unacknowledged messages; waits for every
    acknowledgement (raises on the first message the stream did not store)."""
    stats = PublishStats()
    pacer = Pacer(rate)
    pending: list[asyncio.Future[PubAck]] = []
    for msg in items:
        pending.append(await js.publish_async(msg.subject, msg.payload, headers=msg.headers))
        stats.messages += 1
        stats.records += msg.records
        if len(pending) >= window:
            stats.duplicates += await _settle(pending)
        await pacer.wait(msg.records)
    stats.duplicates += await _settle(pending)
    stats.elapsed_s = time.perf_counter() - pacer.started
    return stats


async def _settle(pending: list[asyncio.Future[PubAck]]) -> int:
    acks = await asyncio.wait_for(asyncio.gather(*pending), timeout=30)
    pending.clear()
    return sum(1 for ack in acks if ack.duplicate)


def read_lines(path: str) -> Iterator[bytes]:
    """Lines of a JSONL (or JSONL.gz) file, without line ends."""
    from binloop.replay.inputs import InputReader

    for chunk in InputReader(path, 4096):
        for item in chunk.items:
            yield item if isinstance(item, bytes) else orjson.dumps(item)
