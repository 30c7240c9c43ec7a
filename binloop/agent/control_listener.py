"""The agent's side of binloop's control plane on NATS: pause, resume, registry updates.

* `bin.control.{session}.pause` (request/reply): the agent stops calling tools once
  the step in progress ends, and replies with its task state (a JSON object).
* `bin.control.{session}.resume`: the checkpoint (`{"build_id", "session_id",
  "state", "answered", "path", ...}`); the agent continues from `state`.
* `bin.registry.updated`: `{"version", "tool"}`; the agent reloads its registry from the
  library's manifest (the notice only says when to look).

`{session}` is the session id escaped into one subject token
(`binloop.nats.subjects.subject_token`). Messages are handled one at a time, in arrival
order, on a worker thread (a reload or a pause may take a while; NATS keeps being
served meanwhile).

:class:`PauseGate` is how the agent stops: every tool call runs inside
`gate.step()`; `pause` waits for the running step to end and holds the next one until
every pausing build has resumed it (or `resume_timeout_s` has passed: an agent never
waits forever on a runner that died).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

import orjson

from binloop.core.config import default
from binloop.nats.link import NatsLink
from binloop.nats.subjects import subject_token

log = logging.getLogger("binloop.agent")
T = TypeVar("T")


class PauseGate:
    def __init__(self, resume_timeout_s: float = 300.0) -> None:
        self.resume_timeout_s = resume_timeout_s
        self._cond = threading.Condition()
        self._paused_by: set[str] = set()
        self._paused_since = 0.0
        self._busy = False

    @property
    def paused(self) -> bool:
        with self._cond:
            return bool(self._paused_by)

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Run one step of work (its tool calls) unless paused; waits while paused."""
        with self._cond:
            while self._paused_by:
                left = self._paused_since + self.resume_timeout_s - time.monotonic()
                if left <= 0:
                    log.warning("no resume for %.0fs after pause (builds %s): going on",
                                self.resume_timeout_s, sorted(self._paused_by))
                    self._paused_by.clear()
                    break
                self._cond.wait(left)
            self._busy = True
        try:
            yield
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def pause(self, build_id: str, snapshot: Callable[[], T]) -> T:
        """Hold further steps for `build_id`; returns `snapshot()` taken between steps."""
        with self._cond:
            if not self._paused_by:
                self._paused_since = time.monotonic()
            self._paused_by.add(build_id)
            while self._busy:
                self._cond.wait()
            return snapshot()

    def held_by(self, build_id: str) -> bool:
        """True while `build_id` holds the agent paused."""
        with self._cond:
            return build_id in self._paused_by

    def resume(self, build_id: str | None) -> bool:
        """Release the pause of `build_id` (None: every pause); True when running again."""
        with self._cond:
            if build_id is None:
                self._paused_by.clear()
            else:
                self._paused_by.discard(build_id)
            self._cond.notify_all()
            return not self._paused_by


class ControlHandlers(Protocol):
    def on_pause(self, reason: dict[str, Any]) -> dict[str, Any]: ...

    def on_resume(self, checkpoint: dict[str, Any]) -> None: ...

    def on_registry_updated(self, notice: dict[str, Any]) -> None: ...


class ControlChannel:
    """Subscriptions of one agent session (see the module docstring)."""

    def __init__(self, nats_url: str, session_id: str | int, handlers: ControlHandlers, *,
                 prefix: str = default("control_subject_prefix"),
                 registry_subject: str = default("registry_subject"),
                 connect_timeout_s: float = 10.0) -> None:
        self.handlers = handlers
        self.subject = f"{prefix}.{subject_token(session_id)}"
        self.registry_subject = registry_subject
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="binloop-agent-control")
        self.link = NatsLink(nats_url, "binloop-agent", connect_timeout_s)
        self.link.run(self._subscribe())

    async def _subscribe(self) -> None:
        nc = self.link.nc
        await nc.subscribe(f"{self.subject}.pause", cb=self._on_pause)
        await nc.subscribe(f"{self.subject}.resume", cb=self._on_resume)
        await nc.subscribe(self.registry_subject, cb=self._on_registry)
        await nc.flush()

    async def _handle(self, handler: Callable[[dict[str, Any]], T], data: bytes) -> T | None:
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            payload = None
        if not isinstance(payload, dict):
            log.warning("control message is not a JSON object: %.200r", data)
            return None
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._worker, handler, payload)
        except Exception:
            log.exception("control handler %s failed", getattr(handler, "__name__", handler))
            return None

    async def _on_pause(self, msg: Any) -> None:
        state = await self._handle(self.handlers.on_pause, msg.data)
        if msg.reply and state is not None:
            await msg.respond(orjson.dumps(state, default=str))

    async def _on_resume(self, msg: Any) -> None:
        await self._handle(self.handlers.on_resume, msg.data)

    async def _on_registry(self, msg: Any) -> None:
        await self._handle(self.handlers.on_registry_updated, msg.data)

    def close(self) -> None:
        self.link.close()
        self._worker.shutdown(wait=False, cancel_futures=True)
