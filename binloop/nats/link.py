"""One asyncio event loop and NATS connection per thread, shared by everything of
binloop that runs on that thread (a Bytewax worker's source partitions and sinks).

The loop runs only while a caller runs a coroutine on it (`Link.run`), which is how
a Bytewax source or sink drives async nats-py without blocking the dataflow for long.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from binloop.nats.jetstream import connect

T = TypeVar("T")
log = logging.getLogger("binloop.nats")


@dataclass
class Link:
    url: str
    loop: asyncio.AbstractEventLoop
    nc: NATS
    js: JetStreamContext
    registry: dict[str, Link]
    users: int = 0

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)


_local = threading.local()


def acquire_link(url: str, name: str, connect_timeout_s: float = 30.0) -> Link:
    """This thread's link to `url` (connecting on first use); release it when done."""
    links: dict[str, Link] = getattr(_local, "links", None) or {}
    _local.links = links
    link = links.get(url)
    if link is None:
        loop = asyncio.new_event_loop()
        try:
            nc = loop.run_until_complete(connect(url, name, connect_timeout_s))
        except BaseException:
            loop.close()
            raise
        link = links[url] = Link(url, loop, nc, nc.jetstream(timeout=5.0), links)
    link.users += 1
    return link


def release_link(link: Link) -> None:
    """Drop one use; the last one closes the connection and the loop. Callable from
    any thread once the link's own thread no longer uses it (Bytewax closes sinks
    from a thread of its own) and never raises."""
    link.users -= 1
    if link.users > 0:
        return
    link.registry.pop(link.url, None)
    try:
        link.run(link.nc.close())
    except Exception as exc:
        log.debug("closing the NATS connection: %s", exc)
    finally:
        link.loop.close()
