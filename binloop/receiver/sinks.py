"""Where the OTLP receiver puts records: a JSONL file or the NATS telemetry stream.

A sink's `write` returns only once the records are stored (appended and flushed, fsynced
unless told otherwise; or acknowledged by JetStream), so the receiver answers 200 only
for spans that are safe: an accepted span is never dropped. When a sink cannot store
now it raises :class:`SinkUnavailable` and the receiver answers 503 with Retry-After;
the exporter retries, and a retried record is a duplicate (same id, same
`Nats-Msg-Id`), not a second failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import orjson

from binloop.nats.publish import Message, jsonl_envelope, publish_messages

DEFAULT_ENVELOPE: Final = 512


class SinkUnavailable(RuntimeError):
    """The sink cannot store records now; retry after `retry_after_s`."""

    def __init__(self, reason: str, retry_after_s: int = 1) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s


class Sink(Protocol):
    def write(self, records: list[dict[str, Any]]) -> None: ...

    def close(self) -> None: ...


def record_line(rec: dict[str, Any]) -> bytes:
    """One record as a JSON line (no newline), its keys in the mapping's order: the same
    span always gives the same bytes. Sorting the keys cost as much as the encoding."""
    return orjson.dumps(rec)


def jsonl(records: list[dict[str, Any]]) -> bytes:
    """The records as JSONL. Each line is copied out of orjson's output at once: that
    buffer is larger than the line, and keeping hundreds alive until the join cost
    several times the encoding (fresh memory touched for each)."""
    return b"".join([record_line(rec) + b"\n" for rec in records])


class JsonlSink:
    """Appends records as JSONL lines, one write per request (whole lines: O_APPEND).

    With `fsync`, a request returns once an fsync that began after its write has ended;
    requests that wait together share one fsync (group commit)."""

    def __init__(self, path: str | Path, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._written = 0  # writes done
        self._synced = 0  # writes covered by a finished fsync
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        data = jsonl(records)
        try:
            with self._lock:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view):]
                self._written += 1
                mine = self._written
            if self.fsync:
                self._sync(mine)
        except OSError as exc:
            raise SinkUnavailable(f"cannot append to {self.path}: {exc}", 5) from None

    def _sync(self, mine: int) -> None:
        with self._sync_lock:
            if self._synced >= mine:  # an fsync that began after our write covered it
                return
            with self._lock:
                upto = self._written
            os.fsync(self._fd)
            self._synced = upto

    def close(self) -> None:
        with self._lock:
            os.close(self._fd)


def envelopes(records: list[dict[str, Any]], prefix: str, size: int) -> list[Message]:
    """The records as batch envelopes of up to `size` records of one tool each (a tool's
    records in their order), as `binloop.nats.publish.envelope_message` builds them."""
    by_tool: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        by_tool.setdefault(rec["tool"], []).append(rec)
    out = []
    for tool, recs in by_tool.items():
        for start in range(0, len(recs), size):
            part = recs[start:start + size]
            out.append(jsonl_envelope(jsonl(part), part[0]["session_id"], tool,
                                      [r["id"] for r in part], prefix))
    return out


@dataclass(frozen=True)
class NatsTarget:
    """How to reach the telemetry stream (built by the CLI from binloop's settings)."""

    url: str
    subject_prefix: str
    connect: Callable[[], Any]  # async () -> (nats client, jetstream context)
    ack_timeout_s: float = 10.0
    envelope: int = DEFAULT_ENVELOPE


class NatsSink:
    """Publishes records as batch envelopes (one tool per envelope, `Nats-Msg-Id` from
    the records' ids) on a nats-py connection run by its own event loop thread."""

    def __init__(self, target: NatsTarget) -> None:
        self.target = target
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="otlp-nats",
                                        daemon=True)
        self._thread.start()
        self._nc, self._js = self._call(target.connect(), 60.0)

    def _call(self, coro: Any, timeout: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise SinkUnavailable("the NATS server did not answer in time", 2) from None

    def messages(self, records: list[dict[str, Any]]) -> list[Message]:
        return envelopes(records, self.target.subject_prefix, self.target.envelope)

    def write(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        if not self._nc.is_connected:
            raise SinkUnavailable("not connected to the NATS server", 2)
        try:
            self._call(publish_messages(self._js, self.messages(records)),
                       self.target.ack_timeout_s)
        except SinkUnavailable:
            raise
        except Exception as exc:  # nats-py's timeouts, no responders, reconnecting
            raise SinkUnavailable(f"the stream did not store the records: {exc}", 2) from None

    def close(self) -> None:
        with contextlib.suppress(SinkUnavailable):
            self._call(self._nc.close(), 10.0)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
