"""The one way binloop drives nats-py (asyncio) from synchronous code.

A :class:`NatsLink` is a nats-py connection whose event loop runs forever in a daemon
thread of its own: the connection answers pings and reconnects while its users are
busy, and any thread runs a coroutine on it with :meth:`NatsLink.run` (bounded by a
timeout) or hands it a callback with :meth:`NatsLink.call_soon`. Its users are the
Bytewax source partitions and sinks (one link per process and server URL, shared and
counted with :func:`acquire_link` / :func:`release_link`), the build runner, the
agent's control channel, the telemetry client, the status publisher and the commands
(a link of their own, as a context manager).

Why not `asyncio.run` per call: a connection lives on the loop that made it, so each
call would pay a connect; why not a loop per calling thread: Bytewax closes sinks
from another thread, and a connection whose loop is not running misses the server's
pings and reconnects.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, TypeVar

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import DEFAULT_PREFIX

from binloop.nats.jetstream import CONNECT_TIMEOUT_S as CONNECT_TIMEOUT_S
from binloop.nats.jetstream import close_quietly, connect

T = TypeVar("T")
log = logging.getLogger("binloop.nats")


class NatsLink:
    """A connection to `url` on an event loop in its own thread (see the module docstring)."""

    def __init__(self, url: str, name: str, connect_timeout_s: float = CONNECT_TIMEOUT_S,
                 api_prefix: str = DEFAULT_PREFIX) -> None:
        self.url, self.name, self.api_prefix = url, name, api_prefix
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
        self.js: JetStreamContext = self.nc.jetstream(prefix=api_prefix, timeout=5.0)
        self.users = 0

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = 30.0) -> T:
        """Run `coro` on the link's loop and wait for its result (None: no timeout);
        on timeout the coroutine is cancelled and `TimeoutError` raised."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("NatsLink.run called on the link's own loop: await instead")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"NATS operation did not finish within {timeout_s:g}s") \
                from None

    def call_soon(self, fn: Callable[[], Any]) -> None:
        """Run `fn` on the link's loop (e.g. to end a wait from another thread)."""
        self._loop.call_soon_threadsafe(fn)

    @property
    def closed(self) -> bool:
        return not self._thread.is_alive()

    def close(self) -> None:
        """Flush and close the connection, then stop the loop; never raises."""
        if self.closed:
            return
        try:
            self.run(self._drain(), 15.0)
        except Exception as exc:
            log.debug("closing the NATS connection: %s", exc)
        self._stop_loop()

    async def _drain(self) -> None:
        if not self.nc.is_closed:
            try:
                await self.nc.flush(timeout=5)
            except Exception as exc:  # a dead server: nothing left to flush to
                log.debug("flush before close: %s", exc)
            await close_quietly(self.nc)
        # As asyncio.run does: a closed loop must hold no task (nats-py's, after a
        # close that timed out on a dead server), or each is reported when collected.
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        await self._loop.shutdown_asyncgens()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._loop.is_running():
            self._loop.close()

    def __enter__(self) -> NatsLink:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


_shared: dict[str, NatsLink] = {}
_shared_lock = threading.Lock()


def acquire_link(url: str, name: str,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S) -> NatsLink:
    """This process's shared link to `url` (connecting on first use, named by the
    first user); give it back with :func:`release_link`."""
    with _shared_lock:
        link = _shared.get(url)
        if link is None or link.closed:
            link = _shared[url] = NatsLink(url, name, connect_timeout_s)
        link.users += 1
        return link


def release_link(link: NatsLink) -> None:
    """Drop one use; the last one closes the link. Callable from any thread; never
    raises."""
    with _shared_lock:
        link.users -= 1
        if link.users > 0:
            return
        if _shared.get(link.url) is link:
            del _shared[link.url]
    link.close()
