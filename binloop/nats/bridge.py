"""A NATS connection for the build runner's threads: one asyncio loop in its own thread.

The runner is synchronous (worker threads, a re-arm timer); nats-py is asyncio. The
bridge runs one event loop forever in a daemon thread, so the connection keeps
answering pings and reconnecting while no build is running, and any thread can run a
coroutine on it with :meth:`NatsBridge.run` (bounded by a timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from binloop.nats.jetstream import connect

T = TypeVar("T")


class NatsBridge:
    def __init__(self, url: str, name: str, connect_timeout_s: float = 30.0) -> None:
        self.url = url
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"{name}-nats",
                                        daemon=True)
        self._thread.start()
        try:
            self.nc: NATS = self.run(connect(url, name, connect_timeout_s),
                                     connect_timeout_s + 5)
        except BaseException:
            self._stop_loop()
            raise
        self.js: JetStreamContext = self.nc.jetstream(timeout=5.0)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 30.0) -> T:
        """Run `coro` on the bridge's loop and wait for its result."""
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            future.cancel()
            raise

    def call_soon(self, fn: Callable[[], Any]) -> None:
        self._loop.call_soon_threadsafe(fn)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a dead connection
            self.run(self._drain(), 10.0)
        self._stop_loop()

    async def _drain(self) -> None:
        if not self.nc.is_closed:
            await self.nc.flush(timeout=5)
            await self.nc.close()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._loop.is_running():
            self._loop.close()
