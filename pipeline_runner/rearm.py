"""Re-arming after a failed build: the key fires again, after a back-off.

A build that does not gate a tool (rolled back, deferred, error) schedules a re-arm of
its `(tool, failure_mode)` for `fired_epoch = event.arm_epoch`, due after
`base * 2**arm_epoch` (capped): each failed attempt of the same key waits twice as long,
which is how the paper's convergence argument retries a failed build in a later session.
Schedules are files (`rearm/<event_id>.json`), so a restart loses none; a due re-arm is
handed to `publish` and then deleted (at-least-once; the detector's re-arm is idempotent
per epoch, so a repeat is harmless). A gated build schedules nothing: its key stays
disarmed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from binloop.core.config import default
from binloop.core.events import BINEvent
from binloop.core.fsutil import atomic_write_bytes
from binloop.core.names import check_event_id
from pipeline_runner.runner import BuildResult

Publish = Callable[[dict[str, Any]], None]
log = logging.getLogger("binloop.builds")


def backoff_s(arm_epoch: int, base_s: float, max_s: float) -> float:
    return float(min(max_s, base_s * 2 ** min(arm_epoch, 30)))


class RearmScheduler:
    def __init__(self, directory: str | Path, publish: Publish,
                 base_s: float = default("rearm_backoff") / 1000,
                 max_s: float = default("rearm_backoff_max") / 1000) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._publish = publish
        self.base_s, self.max_s = base_s, max_s
        self._cond = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None

    def schedule(self, event: BINEvent, result: BuildResult) -> float | None:
        """Schedule the re-arm a failed build calls for; returns its delay (None: gated)."""
        if result.outcome == "gated":
            return None
        delay = backoff_s(event["arm_epoch"], self.base_s, self.max_s)
        record = {"tool": event["tool"], "failure_mode": event["failure_mode"],
                  "fired_epoch": event["arm_epoch"], "event_id": event["event_id"],
                  "due_ms": int((time.time() + delay) * 1000), "reason": result.reason[:500]}
        name = f"{check_event_id(event['event_id'])}.json"
        atomic_write_bytes(self.directory / name, orjson.dumps(record))
        with self._cond:
            self._cond.notify()
        return delay

    def pending(self) -> list[dict[str, Any]]:
        records = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                records.append(orjson.loads(path.read_bytes()))
            except (OSError, orjson.JSONDecodeError):
                continue
        return records

    def publish_due(self, now_ms: int | None = None) -> float | None:
        """Publish every due re-arm; returns seconds until the next one (None: none left)."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        next_due: float | None = None
        for record in self.pending():
            if record["due_ms"] <= now_ms:
                try:
                    self._publish(record)
                except Exception:  # retried on the next round
                    log.exception("re-arm of %s could not be published", record["event_id"])
                    next_due = 1.0 if next_due is None else min(next_due, 1.0)
                    continue
                (self.directory / f"{check_event_id(record['event_id'])}.json").unlink(
                    missing_ok=True)
            else:
                wait = (record["due_ms"] - now_ms) / 1000
                next_due = wait if next_due is None else min(next_due, wait)
        return next_due

    def start(self) -> RearmScheduler:
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="binloop-rearm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while True:
            wait = self.publish_due()
            with self._cond:
                if self._stop:
                    return
                self._cond.wait(timeout=30.0 if wait is None else max(0.01, wait))
                if self._stop:
                    return
