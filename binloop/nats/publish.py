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
import queue
import threading
import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice

import orjson
from nats.errors import Error as NatsError
from nats.errors import MaxPayloadError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import PubAck
from nats.js.errors import APIError, NoStreamResponseError

from binloop.core.config import default
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


def record_message(line: bytes, prefix: str = default("subject_prefix")) -> Message:
    """One record as one message."""
    session, tool, rid = _routing(line)
    return Message(telemetry_subject(prefix, session, tool), line, {MSG_ID_HEADER: rid}, 1)


def envelope_message(lines: list[bytes], session: str | int, tool: str, ids: list[str],
                     prefix: str = default("subject_prefix")) -> Message:
    """Records of one tool as one `Binloop-Batch: jsonl` message; its Nats-Msg-Id is a
    hash of the records' ids, so the same batch published twice is stored once."""
    return jsonl_envelope(b"\n".join(lines) + b"\n", session, tool, ids, prefix)


def jsonl_envelope(payload: bytes, session: str | int, tool: str, ids: list[str],
                   prefix: str = default("subject_prefix")) -> Message:
    """:func:`envelope_message` of lines already joined: `payload` is one line a record
    (each ending in a newline), `ids` the records' ids in the same order."""
    digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()
    return Message(telemetry_subject(prefix, session, tool), payload,
                   {MSG_ID_HEADER: digest, BATCH_HEADER: BATCH_JSONL}, len(ids))


@dataclass
class _ToolBatch:
    session: str | int
    lines: list[bytes] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)


def messages(lines: Iterable[bytes], batch: int = 1,
             prefix: str = default("subject_prefix")) -> Iterator[Message]:
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
    # Messages sent again after a failed or unanswered publish (stored once each).
    retries: int = 0


DEFAULT_DEADLINE_S: float = default("publish_deadline") / 1000


class NotStored(RuntimeError):
    """A message the stream did not store within the deadline: it, and every message
    after it, were not (all) published. Publishing the same input again is safe."""

    def __init__(self, record: int, msg: Message, reason: str, stats: PublishStats) -> None:
        what = f"record {record:,}" if msg.records == 1 else \
            f"records {record:,}-{record + msg.records - 1:,} (one envelope)"
        super().__init__(f"{what} not stored ({reason}); it and the records after it may "
                         f"be missing (id {msg.headers.get(MSG_ID_HEADER, '?'):.16}..., "
                         f"subject {msg.subject:.120}); the {record - 1:,} records before "
                         "it are stored; publishing again is safe")
        self.record, self.message, self.stats = record, msg, stats


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


@dataclass
class _Sent:
    record: int  # the number (from 1) of the message's first record
    msg: Message
    first_sent: float
    ack: asyncio.Future[PubAck] | None


class _Publisher:
    """In order, with up to `window` messages unacknowledged. A message whose ack
    fails or does not come within `ack_timeout_s` is sent again, with every message
    after it, one at a time until one is stored, then pipelined again; the stream's
    duplicate window (`Nats-Msg-Id`) stores each once. A message not stored within
    `deadline_s` of its first send ends the run with `NotStored`."""

    def __init__(self, js: JetStreamContext, window: int, deadline_s: float,
                 ack_timeout_s: float) -> None:
        self.js, self.window = js, window
        self.deadline_s, self.ack_timeout_s = deadline_s, ack_timeout_s
        self.stats = PublishStats()
        self.inflight: deque[_Sent] = deque()

    async def send(self, sent: _Sent) -> None:
        try:
            sent.ack = await self.js.publish_async(sent.msg.subject, sent.msg.payload,
                                                   headers=sent.msg.headers)
        except (NatsError, OSError) as exc:  # not even queued (closed, buffer full)
            sent.ack = _failed(exc)
        self.inflight.append(sent)
        if len(self.inflight) >= self.window:
            await self.settle(self.window // 2)

    async def settle(self, keep: int = 0) -> None:
        """Wait for acknowledgements until at most `keep` messages are in flight."""
        while len(self.inflight) > keep:
            oldest = islice(self.inflight, len(self.inflight) - keep)
            await asyncio.wait([s.ack for s in oldest if s.ack is not None],
                               timeout=self.ack_timeout_s)
            while len(self.inflight) > keep:
                ack = self.inflight[0].ack
                assert ack is not None
                error = _failure(ack)
                if error is not None:
                    await self._resend_from_oldest(error)
                    break
                self.inflight.popleft()
                self.stats.duplicates += ack.result().duplicate or 0

    async def _resend_from_oldest(self, first_error: BaseException) -> None:
        """Send the messages in flight again, in order, each until it is stored."""
        waiting = list(self.inflight)
        self.inflight.clear()
        for sent in waiting:
            if sent.ack is not None:
                sent.ack.cancel()
        error: BaseException = first_error
        for sent in waiting:
            while True:
                if time.monotonic() - sent.first_sent > self.deadline_s:
                    raise NotStored(sent.record, sent.msg, _reason(error), self.stats)
                self.stats.retries += 1
                try:
                    ack = await self.js.publish(sent.msg.subject, sent.msg.payload,
                                                timeout=self.ack_timeout_s,
                                                headers=sent.msg.headers)
                except (NatsError, OSError, asyncio.TimeoutError) as exc:
                    error = exc
                    if _refused(exc):
                        raise NotStored(sent.record, sent.msg, _reason(exc), self.stats) \
                            from None
                    await asyncio.sleep(0.25)
                    continue
                self.stats.duplicates += ack.duplicate or 0
                break


def _failure(ack: asyncio.Future[PubAck]) -> BaseException | None:
    """Why an acknowledgement is not (yet) a success; None when it is one."""
    if not ack.done() or ack.cancelled():
        return asyncio.TimeoutError()
    return ack.exception()


def _failed(exc: BaseException) -> asyncio.Future[PubAck]:
    future: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
    future.set_exception(exc)
    return future


def _refused(exc: BaseException) -> bool:
    """The stream answered and will not store it (too large, wrong stream...): sending
    it again cannot help. 503 is JetStream not ready yet (a restart)."""
    if isinstance(exc, MaxPayloadError):
        return True
    return isinstance(exc, APIError) and exc.code not in (None, 503)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError | NatsTimeoutError):
        return "no acknowledgement (NATS unreachable or restarting)"
    if isinstance(exc, NoStreamResponseError):
        return "no stream answered (JetStream down or restarting)"
    if isinstance(exc, MaxPayloadError):
        return "larger than the server's max_payload"
    if isinstance(exc, APIError):
        return f"the stream refused it: {exc.description or exc}"
    return f"{type(exc).__name__}: {exc}".rstrip(": ")


async def publish_messages(js: JetStreamContext,
                           items: Iterable[Message] | AsyncIterable[Message],
                           rate: float | None = None, window: int = 2000,
                           deadline_s: float = DEFAULT_DEADLINE_S,
                           ack_timeout_s: float = 5.0) -> PublishStats:
    """Publish in order with up to `window` unacknowledged messages, retrying each
    until the stream stores it (see `_Publisher`); returns once every message is
    acknowledged, or raises `NotStored` naming the first one that was not within
    `deadline_s` of its first send (keep it below the stream's duplicate window, so
    that a message stored but not acknowledged is never stored twice)."""
    publisher = _Publisher(js, window, deadline_s, ack_timeout_s)
    stats = publisher.stats
    pacer = Pacer(rate)
    async for msg in _each(items):
        await publisher.send(_Sent(stats.records + 1, msg, time.monotonic(), None))
        stats.messages += 1
        stats.records += msg.records
        await pacer.wait(msg.records)
    await publisher.settle()
    stats.elapsed_s = time.perf_counter() - pacer.started
    return stats


async def _each(items: Iterable[Message] | AsyncIterable[Message]) -> AsyncIterator[Message]:
    if isinstance(items, AsyncIterable):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item


async def read_in_thread(items: Iterable[Message], depth: int = 8192
                         ) -> AsyncIterator[Message]:
    """`items` produced by a thread: a source that waits for its input (a pipe) does not
    stop the event loop, so what was read is stored (and acknowledged) meanwhile
    (`tail -F FILE | binloop publish -` follows FILE)."""
    handoff: queue.Queue[Message | _End] = queue.Queue(depth)

    def pump() -> None:
        try:
            for item in items:
                handoff.put(item)
        except BaseException as exc:  # handed to the publishing side, raised there
            handoff.put(_End(exc))
            return
        handoff.put(_End(None))

    threading.Thread(target=pump, name="binloop-publish-read", daemon=True).start()
    while True:
        try:
            got = handoff.get_nowait()
        except queue.Empty:
            try:  # a bounded wait: an executor thread never outlives a cancelled publish
                got = await asyncio.to_thread(handoff.get, True, 0.25)
            except queue.Empty:
                continue
        if isinstance(got, _End):
            if got.error is not None:
                raise got.error
            return
        yield got


@dataclass(frozen=True)
class _End:
    error: BaseException | None


# A line longer than any NATS server accepts (its max_payload is at most 64 MiB) is
# refused while it is read, not held whole; shorter ones go to the server, which judges.
PUBLISH_LINE_MAX_BYTES = 64 << 20


def read_lines(path: str, damaged: list[str] | None = None) -> Iterator[bytes]:
    """Lines of a JSONL (or JSONL.gz) file, without line ends. What the reader refuses
    (a line no server can take, a damaged file's rest) is not published: each is a dead
    letter on stderr, and its `source:position` is added to `damaged`."""
    import sys

    from binloop.core.reading import ReadOptions
    from binloop.replay.readers import InputReader

    options = ReadOptions(max_line_bytes=PUBLISH_LINE_MAX_BYTES)
    for chunk in InputReader(path, 4096, options=options):
        for letter in chunk.rejects:
            sys.stderr.write("dead-letter: " + orjson.dumps(letter.to_json()).decode() + "\n")
            if damaged is not None:
                damaged.append(f"{letter.source}:{letter.position}")
        for item in chunk.items:
            yield item if isinstance(item, bytes) else orjson.dumps(item)
