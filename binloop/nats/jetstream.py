"""JetStream plumbing shared by the live source, the event sink and the publishers:
connecting (with endless reconnects), and the telemetry and event streams.

The telemetry stream (default `TELEMETRY`, subjects `telemetry.>`) is partitioned by
the server: its subject transform stores `telemetry.<session>.<tool>` as
`telemetry_p.<p>.<tool>` where `p = partition(N, tool token)`, a hash of
the escaped tool name. Every record of a tool is in one partition, in stream order.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import (
    StorageType,
    StreamConfig,
    StreamInfo,
    SubjectTransform,
)
from nats.js.errors import BadRequestError, NotFoundError

from binloop.core.config import default
from binloop.nats.subjects import partition_prefix, partition_transform, unpartitioned_backlog

log = logging.getLogger("binloop.nats")

_PARTITION_DEST = re.compile(r"^(?P<prefix>.+)\.\{\{\s*partition\((?P<n>\d+),\s*2\)\s*\}\}\.")

# How long to keep trying to reach NATS at start (the `connect_timeout` setting).
CONNECT_TIMEOUT_S: float = default("connect_timeout") / 1000


class StreamSetupError(RuntimeError):
    """A stream is missing (and may not be created) or is configured incompatibly."""


@dataclass(frozen=True)
class StreamSpec:
    """A stream binloop creates when it is missing (settings of `binloop.core.config`)."""

    name: str
    subjects: tuple[str, ...]
    max_age_s: float | None = None
    max_bytes: int | None = None
    replicas: int = default("stream_replicas")
    storage: str = default("stream_storage")
    duplicate_window_s: float = default("duplicate_window") / 1000
    transform: tuple[str, str] | None = None

    def config(self) -> StreamConfig:
        transform = None
        if self.transform is not None:
            transform = SubjectTransform(src=self.transform[0], dest=self.transform[1])
        return StreamConfig(
            name=self.name,
            subjects=list(self.subjects),
            max_age=self.max_age_s or 0,
            max_bytes=self.max_bytes or -1,
            num_replicas=self.replicas,
            storage=StorageType.MEMORY if self.storage == "memory" else StorageType.FILE,
            duplicate_window=self.duplicate_window_s,
            subject_transform=transform,
        )


def telemetry_stream_spec(name: str, prefix: str, partitions: int, **limits: Any) -> StreamSpec:
    return StreamSpec(name, (f"{prefix}.>",), transform=partition_transform(prefix, partitions),
                      **limits)


async def _quiet_error_cb(exc: Exception) -> None:
    log.debug("nats: %s", exc)


async def connect(url: str, name: str, connect_timeout_s: float = CONNECT_TIMEOUT_S,
                  **options: Any) -> NATS:
    """Connect (trying for up to `connect_timeout_s`), then reconnect forever.

    Publishes made while disconnected are buffered by the client (up to its pending
    size) and flushed on reconnect.
    """
    servers = [s.strip() for s in url.split(",") if s.strip()]
    try:
        # With endless reconnects nats-py also retries the first connect without end.
        nc: NATS = await asyncio.wait_for(nats.connect(
            servers, name=name, allow_reconnect=True, max_reconnect_attempts=-1,
            reconnect_time_wait=0.25, connect_timeout=2, ping_interval=5,
            max_outstanding_pings=2, error_cb=_quiet_error_cb, **options), connect_timeout_s)
    except (asyncio.TimeoutError, OSError) as exc:
        raise ConnectionError(f"cannot connect to NATS at {redact_url(url)} within "
                              f"{connect_timeout_s:g}s ({exc or 'timed out'})") from None
    return nc


async def close_quietly(nc: NATS, timeout_s: float = 5.0) -> None:
    """Close a connection without letting a dead server's error (or a hang) mask what
    the caller is reporting."""
    try:
        await asyncio.wait_for(nc.close(), timeout_s)
    except (asyncio.TimeoutError, nats.errors.Error, OSError) as exc:
        log.debug("closing the NATS connection: %s", exc)


def redact_url(url: str) -> str:
    """The server URL(s) without credentials (`nats://user:secret@host` -> `nats://***@host`)."""
    return re.sub(r"(?<=://)[^@/,]*@", "***@", url)


async def ensure_stream(js: JetStreamContext, spec: StreamSpec, manage: bool = True) -> StreamInfo:
    """The stream's info, creating it from `spec` when it is missing (if `manage`)."""
    try:
        return await js.stream_info(spec.name)
    except NotFoundError:
        if not manage:
            raise StreamSetupError(f"stream {spec.name} does not exist "
                                   "(creation is off: --no-manage-stream)") from None
    try:
        info = await js.add_stream(spec.config())
        log.info("created stream %s (subjects %s)", spec.name, ", ".join(spec.subjects))
        return info
    except BadRequestError as refused:
        # Most often another worker or process created it at the same time; otherwise
        # the server refused the config (e.g. its subjects overlap another stream's).
        try:
            return await js.stream_info(spec.name)
        except NotFoundError:
            raise StreamSetupError(
                f"cannot create stream {spec.name} (subjects {', '.join(spec.subjects)}): "
                f"{refused.description}") from None


async def ensure_telemetry_stream(js: JetStreamContext, spec: StreamSpec,
                                  manage: bool = True) -> int:
    """Make sure the telemetry stream exists and is partitioned; returns its partition
    count, which is the stream's (an existing partitioned stream keeps its count)."""
    assert spec.transform is not None
    prefix = spec.subjects[0].removesuffix(".>")
    wanted = int(_PARTITION_DEST.match(spec.transform[1]).group("n"))  # type: ignore[union-attr]
    info = await ensure_stream(js, spec, manage)
    current = info.config.subject_transform
    if current is None:
        if not manage:
            log.warning("stream %s has no partition transform: all telemetry goes to "
                        "partition 0", spec.name)
            return wanted
        info.config.subject_transform = SubjectTransform(*spec.transform)
        await js.update_stream(info.config)
        log.info("stream %s: added the partition transform %s -> %s (messages stored "
                 "before stay on partition 0)", spec.name, *spec.transform)
        return wanted
    match = _PARTITION_DEST.match(current.dest or "")
    if current.src != spec.transform[0] or match is None \
            or match.group("prefix") != partition_prefix(prefix):
        raise StreamSetupError(
            f"stream {spec.name} has a subject transform binloop does not know "
            f"({current.src} -> {current.dest}); use another stream or remove it")
    existing = int(match.group("n"))
    if existing != wanted:
        log.warning("stream %s is partitioned %d ways; using %d partitions, not %d",
                    spec.name, existing, existing, wanted)
    return existing


def stream_partitions(info: StreamInfo) -> int | None:
    """The partitions of a stream with binloop's partition transform (None: none)."""
    transform = info.config.subject_transform
    match = _PARTITION_DEST.match(transform.dest or "") if transform is not None else None
    return int(match.group("n")) if match else None


async def backlog_end(js: JetStreamContext, stream: str, prefix: str) -> int | None:
    """The stream sequence of the last record stored *before* the partition transform
    was added (on `{prefix}.<session>.<tool>`, read by partition 0), or None when
    the stream has no such backlog or no transform.

    Once the transform is in place the server stores nothing more under that subject
    shape, so the answer is fixed (it only shrinks when the stream's limits drop old
    messages), the same for every process that asks."""
    info = await js.stream_info(stream)
    if stream_partitions(info) is None:
        return None
    try:
        last = await js.get_last_msg(stream, unpartitioned_backlog(prefix))
    except NotFoundError:
        return None
    return int(last.seq) if last.seq is not None else None
