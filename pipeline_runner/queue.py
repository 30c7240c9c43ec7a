"""A durable, bounded, idempotent queue of BINEvents, drained by a pool of build workers.

Delivery guarantees:
* :meth:`BuildQueue.submit` never blocks on a build: it writes the event to
  `pending/` (atomic write + fsync) and returns. An event whose `event_id` is pending or
  done is a duplicate and is ignored (a replayed event builds nothing new).
* Events survive restarts: every event in `pending/` is (re)queued on :meth:`start`,
  in submission order. An event is removed from `pending/` only after its result is in
  `done/`, so a crash mid-build builds it again (the runner itself is idempotent on
  `event_id`, so a build that had reached the gate is not repeated).
* Bounded: with `max_pending` events waiting, a new event is *deferred* instead of
  queued: it gets a `deferred` result at once (the caller re-arms its key after a
  back-off, so it fires again later), never a silent drop.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from binloop.core.config import default
from binloop.core.events import BINEvent, dumps_event
from binloop.core.fsutil import atomic_write_bytes
from pipeline_runner.event_input import InvalidEvent, check_event
from pipeline_runner.runner import BuildResult

Submitted = Literal["queued", "duplicate", "deferred", "invalid"]
Build = Callable[[BINEvent], BuildResult]
OnResult = Callable[[BINEvent, BuildResult], None]
log = logging.getLogger("binloop.builds")


@dataclass
class QueueStats:
    submitted: int = 0
    duplicates: int = 0
    deferred: int = 0
    invalid: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"submitted": self.submitted, "duplicates": self.duplicates,
                "deferred": self.deferred, "invalid": self.invalid, "outcomes": self.outcomes}


class BuildQueue:
    def __init__(self, directory: str | Path, build: Build, *, workers: int = 1,
                 max_pending: int = default("build_queue_max"),
                 on_result: OnResult | None = None) -> None:
        self.directory = Path(directory)
        self.pending_dir = self.directory / "pending"
        self.done_dir = self.directory / "done"
        for path in (self.pending_dir, self.done_dir):
            path.mkdir(parents=True, exist_ok=True)
        self._build = build
        self._on_result = on_result
        self._workers = max(1, workers)
        self.max_pending = max_pending
        self.stats = QueueStats()
        self._queue: deque[Path] = deque()
        self._known: set[str] = set()
        self._running = 0
        self._cond = threading.Condition()
        self._stop = False
        self._threads: list[threading.Thread] = []
        self._seq = 0

    # -- producer side -----------------------------------------------------------------
    def submit(self, event: Any) -> Submitted:
        """Queue an event for building (fast: one small file write)."""
        try:
            checked = check_event(event)
        except InvalidEvent as exc:
            log.warning("build queue: invalid event dropped to the log: %s", exc)
            self.stats.invalid += 1
            return "invalid"
        event_id = checked["event_id"]
        with self._cond:
            if event_id in self._known or (self.done_dir / f"{event_id}.json").exists():
                self.stats.duplicates += 1
                return "duplicate"
            if len(self._known) >= self.max_pending:
                self.stats.deferred += 1
                deferred = True
            else:
                deferred = False
                self._known.add(event_id)
                self._seq += 1
                seq = self._seq
        if deferred:
            self._finish(checked, None, BuildResult("", event_id, "rolled_back",
                                                    "deferred: the build queue is full"))
            return "deferred"
        path = self.pending_dir / f"{time.time_ns():020d}-{seq:06d}-{event_id}.json"
        atomic_write_bytes(path, dumps_event(checked))
        with self._cond:
            self.stats.submitted += 1
            self._queue.append(path)
            self._cond.notify()
        return "queued"

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> BuildQueue:
        """Requeue what a previous run left pending, then start the workers."""
        with self._cond:
            self._stop = False
            for path in sorted(self.pending_dir.glob("*.json")):
                event_id = path.stem.rsplit("-", 1)[-1]
                if event_id not in self._known:
                    self._known.add(event_id)
                    self._queue.append(path)
        for number in range(self._workers):
            thread = threading.Thread(target=self._work, name=f"binloop-build-{number}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Let running builds finish (queued ones stay pending for the next start)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout)
        self._threads = []

    def wait_idle(self, timeout: float) -> bool:
        """True once nothing is queued or running (within `timeout` seconds)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._running:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def depth(self) -> int:
        with self._cond:
            return len(self._queue) + self._running

    # -- workers -----------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                path = self._queue.popleft()
                self._running += 1
            try:
                self._build_one(path)
            finally:
                with self._cond:
                    self._running -= 1
                    self._cond.notify_all()

    def _build_one(self, path: Path) -> None:
        try:
            event = check_event(orjson.loads(path.read_bytes()))
        except (OSError, orjson.JSONDecodeError, InvalidEvent) as exc:
            log.error("build queue: unreadable pending event %s: %s", path.name, exc)
            with contextlib.suppress(OSError):
                path.rename(path.with_suffix(".bad"))
            return
        try:
            result = self._build(event)
        except Exception as exc:  # a runner bug must not kill the worker
            log.exception("build of %s failed inside the runner", event["event_id"])
            result = BuildResult("", event["event_id"], "error", f"runner error: {exc!r}")
        self._finish(event, path, result)

    def _finish(self, event: BINEvent, path: Path | None, result: BuildResult) -> None:
        if path is not None:
            record = {"event": {key: event[key] for key in
                                ("event_id", "tool", "failure_mode", "arm_epoch", "session_id")},
                      "result": result.summary()}
            atomic_write_bytes(self.done_dir / f"{event['event_id']}.json", orjson.dumps(record))
            path.unlink(missing_ok=True)
            with self._cond:
                self._known.discard(event["event_id"])
        with self._cond:
            self.stats.outcomes[result.outcome] = self.stats.outcomes.get(result.outcome, 0) + 1
        if self._on_result is not None:
            try:
                self._on_result(event, result)
            except Exception:  # publishing a result must not kill the worker
                log.exception("build result of %s could not be delivered", event["event_id"])
