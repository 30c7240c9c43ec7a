"""The live job's status in a NATS KV bucket (`--status-bucket`, default BINLOOP_STATUS).

Keys, for a job named `--job-name` (default `binloop`):

* `<job>.summary`: the job's counters (`RunSummary` JSON: records read, valid, invalid,
  counted, duplicates, late, events fired...), exactly-once across restarts (they come
  from the summary partition's snapshots), written by the process that holds that
  partition, plus `updated` (unix seconds) and `process_id`;
* `<job>.process.<i>`: what process `i` sees itself: `state` (running | stopped), host,
  pid, workers, `started`, `updated`, and its metrics (`binloop.ops.metrics.local_values`:
  records it parsed, its source partitions' positions and pending messages, builds).

Every process publishes every `--status-interval` (5s) and once when it stops.
Delivery: best effort. Publishing runs on a thread of its own with its own
connection; when NATS is unreachable an update is skipped, never queued, and the
dataflow is never slowed down. The bucket keeps one value per key for a day
(`STATUS_TTL_S`); `binloop status` shows how old each value is.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Final

import orjson
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KeyValue

from binloop.core.summary import RunSummary
from binloop.nats.link import CONNECT_TIMEOUT_S, NatsLink
from binloop.ops import metrics

STATUS_TTL_S: Final = 86_400.0
log = logging.getLogger("binloop.status")


def summary_key(job: str) -> str:
    return f"{job}.summary"


def process_key(job: str, process_id: int) -> str:
    return f"{job}.process.{process_id}"


async def status_bucket(js: JetStreamContext, bucket: str, create: bool) -> KeyValue | None:
    """The status bucket; created when missing if `create`, else None."""
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        if not create:
            return None
    try:
        return await js.create_key_value(KeyValueConfig(bucket=bucket, history=1,
                                                        ttl=STATUS_TTL_S))
    except Exception:  # another process created it at the same time
        return await js.key_value(bucket)


@dataclass(frozen=True)
class PublisherSettings:
    url: str
    bucket: str
    job: str
    interval_s: float
    process_id: int
    processes: int
    workers: int
    create_bucket: bool = True
    connect_timeout_s: float = CONNECT_TIMEOUT_S


class StatusPublisher:
    """Publishes this process's status (and the summary, if it holds it) on a thread."""

    def __init__(self, settings: PublisherSettings) -> None:
        self.settings = settings
        self.started = time.time()
        self._summary: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="binloop-status", daemon=True)
        self.published = 0

    def start(self) -> StatusPublisher:
        self._thread.start()
        return self

    def note_summary(self, summary: RunSummary) -> None:
        """The summary partition's totals changed (called on the worker holding it)."""
        self._summary = summary.to_json()

    def close(self) -> None:
        """Publish a last status (`stopped`) and end the thread."""
        self._stop.set()
        self._thread.join(self.settings.connect_timeout_s + 10)

    def _main(self) -> None:
        s = self.settings
        try:
            with NatsLink(s.url, f"binloop-status-{s.process_id}", s.connect_timeout_s) as link:
                kv = link.run(status_bucket(link.js, s.bucket, s.create_bucket))
                if kv is None:
                    log.warning("status bucket %s does not exist (creation is off: "
                                "--no-manage-stream); the job's status is not published",
                                s.bucket)
                    return
                while not self._stop.is_set():
                    link.run(self._publish(kv, "running"))
                    self._stop.wait(s.interval_s)
                link.run(self._publish(kv, "stopped"))
        except Exception as exc:  # never take the job down
            log.warning("status publishing stopped: %s", exc)

    async def _publish(self, kv: KeyValue, state: str) -> None:
        s = self.settings
        now = time.time()
        entries = {process_key(s.job, s.process_id): self._process_status(state, now)}
        if self._summary is not None:
            entries[summary_key(s.job)] = {**self._summary, "updated": now,
                                           "process_id": s.process_id}
        for key, value in entries.items():
            try:
                await asyncio.wait_for(kv.put(key, orjson.dumps(value)), 5.0)
                self.published += 1
            except Exception as exc:  # NATS away: skip this update
                log.debug("status %s not published: %s", key, exc)

    def _process_status(self, state: str, now: float) -> dict[str, Any]:
        s = self.settings
        return {"state": state, "process_id": s.process_id, "processes": s.processes,
                "workers": s.workers, "host": socket.gethostname(), "pid": os.getpid(),
                "started": self.started, "updated": now, "metrics": metrics.local_values()}


async def read_job_status(js: JetStreamContext, bucket: str, job: str) -> dict[str, Any] | None:
    """The job's published status: {"summary": ..., "processes": {id: ...}}, or None
    when the bucket does not exist."""
    kv = await status_bucket(js, bucket, create=False)
    if kv is None:
        return None
    out: dict[str, Any] = {"summary": None, "processes": {}}
    watcher = await kv.watch(f"{job}.>", ignore_deletes=True)
    try:
        async for entry in watcher:
            if entry is None:
                break
            try:
                value = orjson.loads(entry.value or b"null")
            except orjson.JSONDecodeError:
                continue
            if entry.key == summary_key(job):
                out["summary"] = value
            elif entry.key.startswith(f"{job}.process."):
                out["processes"][entry.key.rpartition(".")[2]] = value
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]
    return out
