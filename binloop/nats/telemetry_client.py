"""The agent side of Loop 0: record each tool call, locally first, then on NATS.

`TelemetryClient.record(...)` appends the record to a local JSONL log (flushed, and
fsynced with `fsync=True`) and returns at once; a background thread publishes the
log, in order, to `telemetry.{session_id}.{tool}` with `Nats-Msg-Id = id` and waits
for JetStream's acknowledgements. The log is the buffer: while NATS is down nothing
blocks or fails, records pile up in the log, and the thread catches up when the
server is back. How far the log is published is kept in `<log>.offset`, so a
restarted agent goes on where it stopped.

Delivery guarantee: at-least-once from the log to the stream, and exactly-once in
the stream within its duplicate window (records re-sent after a crash carry the same
`Nats-Msg-Id`). Order: the log's order. After a failed publish the thread sends one
message at a time until one succeeds, so a half-failed window cannot reorder records.
A record that does not validate is still logged and published (the job dead-letters
it with the reason) unless `strict=True`, where :meth:`record` raises instead.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import logging
import os
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson
from nats.aio.client import Client as NATS

from binloop.core.config import default
from binloop.core.schema import (
    InvalidRecord,
    SessionId,
    ToolInvocation,
    dumps_record,
    validate_record,
)
from binloop.nats.link import NatsLink
from binloop.nats.subjects import MSG_ID_HEADER, telemetry_subject

log = logging.getLogger("binloop.telemetry")

DEFAULT_ROTATE_BYTES = 64 << 20


class TelemetryClient:
    """Record tool calls to `log_path` and publish them to NATS (see module docstring)."""

    def __init__(self, log_path: str | Path, nats_url: str | None = None, *,
                 subject_prefix: str = default("subject_prefix"), agent_id: str | None = None,
                 fsync: bool = False, strict: bool = False, window: int = 256,
                 ack_timeout_s: float = 5.0, rotate_bytes: int = DEFAULT_ROTATE_BYTES) -> None:
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.nats_url = nats_url
        self.subject_prefix = subject_prefix
        self.agent_id = agent_id
        self.fsync = fsync
        self.strict = strict
        self.window = window
        self.ack_timeout_s = ack_timeout_s
        self.rotate_bytes = rotate_bytes
        self._lock_file = open(self.log_path.with_name(self.log_path.name + ".lock"), "a")  # noqa: SIM115
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            raise RuntimeError(f"{self.log_path} is used by another TelemetryClient") from None
        self._offset_path = self.log_path.with_name(self.log_path.name + ".offset")
        self._write_lock = threading.Lock()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed by close()
        _end_torn_line(self._log)
        self._published = _read_offset(self._offset_path, self.log_path)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.published_records = 0
        self.connected = False
        if nats_url:
            self._thread = threading.Thread(target=self._run, name="binloop-telemetry",
                                            daemon=True)
            self._thread.start()

    # -- the agent's side --------------------------------------------------------

    def record(self, tool: str, outcome: str, *, session_id: SessionId,
               failure_mode: str | None = None, args: dict[str, Any] | None = None,
               duration_ms: int | None = None, error: str | None = None,
               ts: int | None = None, agent_id: str | None = None) -> ToolInvocation:
        """Log one tool call (never blocks on the network); returns the record."""
        fields: dict[str, Any] = {
            "session_id": session_id, "tool": tool, "outcome": outcome,
            "failure_mode": failure_mode, "args": args or {},
            "ts": ts if ts is not None else int(time.time() * 1000)}
        for name, value in (("duration_ms", duration_ms), ("error", error),
                            ("agent_id", agent_id or self.agent_id)):
            if value is not None:
                fields[name] = value
        try:
            rec = validate_record(fields)
            line = dumps_record(rec)
        except InvalidRecord as exc:
            if self.strict:
                raise
            log.warning("invalid telemetry record logged as is (the job will dead-letter "
                        "it): %s", exc)
            rec = fields  # type: ignore[assignment]
            line = orjson.dumps(fields, default=str)
        self._append(line)
        return rec

    async def arecord(self, tool: str, outcome: str, **fields: Any) -> ToolInvocation:
        """:meth:`record` for async code (appending to the log does not wait on NATS)."""
        return self.record(tool, outcome, **fields)

    def _append(self, line: bytes) -> None:
        with self._write_lock:
            self._log.write(line + b"\n")
            self._log.flush()
            if self.fsync:
                os.fsync(self._log.fileno())
        self._wake.set()

    @property
    def pending_bytes(self) -> int:
        """Bytes of the log not yet acknowledged by the stream."""
        with self._write_lock:
            return max(0, self._log.tell() - self._published)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the whole log is in the stream; False on timeout (or no NATS)."""
        if self._thread is None:
            return False
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.pending_bytes:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            self._wake.set()
            time.sleep(0.01)
        return True

    async def aflush(self, timeout: float | None = None) -> bool:
        return await asyncio.to_thread(self.flush, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Publish what can be published within `timeout`, then stop; the rest stays
        in the log for the next client."""
        if self._thread is not None:
            self.flush(timeout)
            self._stop.set()
            self._wake.set()
            self._thread.join(timeout + 5)
        with self._write_lock:
            self._log.close()
        self._lock_file.close()

    def __enter__(self) -> TelemetryClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- the publishing thread ----------------------------------------------------

    def _run(self) -> None:
        link: NatsLink | None = None
        window = self.window
        try:
            while not self._stop.is_set():
                if link is None:
                    link = self._try_connect()
                    if link is None:
                        continue
                lines = self._unpublished(window)
                if not lines:
                    self._wake.wait(0.5)
                    self._wake.clear()
                    continue
                try:
                    published = link.run(self._publish(link.nc, lines), self.ack_timeout_s + 10)
                except TimeoutError:
                    published = False
                if published:
                    window = self.window
                else:
                    window = 1
                    self._stop.wait(0.25)
        finally:
            if link is not None:
                link.close()

    def _try_connect(self) -> NatsLink | None:
        try:
            link = NatsLink(self.nats_url or "", "binloop-telemetry", connect_timeout_s=1.0)
        except ConnectionError:
            self._stop.wait(0.5)
            return None
        self.connected = True
        return link

    def _unpublished(self, limit: int) -> list[bytes]:
        """Up to `limit` complete lines of the log after the published offset."""
        with open(self.log_path, "rb") as reader:
            reader.seek(self._published)
            lines = []
            for line in reader:
                if not line.endswith(b"\n"):
                    break
                lines.append(line)
                if len(lines) >= limit:
                    break
        return lines

    async def _publish(self, nc: NATS, lines: list[bytes]) -> bool:
        """Publish `lines` and wait for every acknowledgement; False (at once) when the
        connection is down or drops meanwhile, or the stream refuses or times out."""
        if not nc.is_connected:
            await asyncio.sleep(0.1)
            return False
        js = nc.jetstream()
        futures = []
        reconnects = nc.stats["reconnects"]
        try:
            for line in lines:
                subject, msg_id = self._route(line[:-1])
                futures.append(await js.publish_async(subject, line[:-1],
                                                      headers={MSG_ID_HEADER: msg_id}))
            acks = asyncio.gather(*futures)
            # A failed wait is retried from the log: nobody needs this gather's outcome.
            acks.add_done_callback(lambda done: done.cancelled() or done.exception())
            deadline = time.monotonic() + self.ack_timeout_s
            while not acks.done():
                if (not nc.is_connected or nc.stats["reconnects"] != reconnects
                        or time.monotonic() > deadline):
                    raise ConnectionError("connection lost or no acknowledgement in time")
                await asyncio.wait({acks}, timeout=0.05)
            acks.result()
        except Exception as exc:  # NATS down, no stream yet, timeouts...
            for future in futures:
                future.cancel()
            log.debug("telemetry not published yet: %s", exc)
            return False
        self._advance(sum(len(line) for line in lines), len(lines))
        return True

    def _route(self, line: bytes) -> tuple[str, str]:
        """Subject and Nats-Msg-Id of a logged line (whatever the line holds)."""
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            rec = None
        fields = rec if isinstance(rec, dict) else {}
        session, tool, msg_id = fields.get("session_id"), fields.get("tool"), fields.get("id")
        if not isinstance(msg_id, str):
            msg_id = hashlib.sha256(line).hexdigest()
        return (telemetry_subject(self.subject_prefix,
                                  session if isinstance(session, int | str) else "_",
                                  tool if isinstance(tool, str) and tool else "_"), msg_id)

    def _advance(self, nbytes: int, records: int) -> None:
        self._published += nbytes
        self.published_records += records
        _write_offset(self._offset_path, self.log_path, self._published)
        self._maybe_rotate()

    def _maybe_rotate(self) -> None:
        """Start a new log once everything in a large one is published."""
        with self._write_lock:
            size = self._log.tell()
            if size < self.rotate_bytes or self._published != size:
                return
            self._log.close()
            os.replace(self.log_path, self.log_path.with_name(self.log_path.name + ".1"))
            self._log = open(self.log_path, "ab")  # noqa: SIM115
            self._published = 0
            _write_offset(self._offset_path, self.log_path, 0)


def _end_torn_line(log_file: Any) -> None:
    """End a last line cut by a crash, so the next record starts on its own line."""
    size = log_file.tell()
    if size == 0:
        return
    with open(log_file.name, "rb") as reader:
        reader.seek(size - 1)
        if reader.read(1) != b"\n":
            log_file.write(b"\n")
            log_file.flush()


def _read_offset(path: Path, log_path: Path) -> int:
    """The published offset, if it belongs to this log file (same inode)."""
    try:
        inode, offset = path.read_text().split()
        if int(inode) == log_path.stat().st_ino:
            return int(offset)
    except (FileNotFoundError, ValueError):
        pass
    return 0


def _write_offset(path: Path, log_path: Path, offset: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{log_path.stat().st_ino} {offset}")
    os.replace(tmp, path)
