"""Promotions from live telemetry: the uses of library tools, read from the stream.

A thread follows the telemetry stream with a consumer filtered to the subjects of the
library's tools (`telemetry.*.<tool>` and its partitioned form), re-created from its
position whenever the set of tools changes, and hands the records to
`BuildService.observe` (promotion after successful uses, quarantine after failed ones
on probation). Its position is saved to a file after each batch, so a restart goes on
where it stopped; a record counted twice anyway is skipped by its id.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from pathlib import Path

from binloop.core.fsutil import atomic_write_bytes
from binloop.core.schema import InvalidRecord, parse_record
from binloop.nats.consumer import OrderedConsumer
from binloop.nats.link import NatsLink
from binloop.nats.subjects import tool_filters
from pipeline_runner.service import BuildService

log = logging.getLogger("binloop.builds")


def use_filters(prefix: str, names: list[str]) -> list[str]:
    return [subject for name in names for subject in tool_filters(prefix, name)]


class UseWatcher:
    def __init__(self, link: NatsLink, service: BuildService, stream: str, prefix: str,
                 position_file: Path, poll_s: float = 0.5) -> None:
        self.link, self.service = link, service
        self.stream, self.prefix = stream, prefix
        self.position_file = position_file
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: OrderedConsumer | None = None
        self._names: list[str] = []

    def position(self) -> int:
        try:
            return int(self.position_file.read_text())
        except (OSError, ValueError):
            return 0

    def start(self) -> UseWatcher:
        self._thread = threading.Thread(target=self._loop, name="binloop-uses", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._consumer is not None:
            with contextlib.suppress(Exception):  # the consumer also expires by itself
                self.link.run(self._consumer.close(), 5)

    def poll_once(self) -> int:
        """Read the uses available now; returns how many records were observed."""
        names = sorted(self.service.library.read()["tools"])
        if not names:
            return 0
        if names != self._names or self._consumer is None:
            if self._consumer is not None:
                self.link.run(self._consumer.close(), 5)
            self._names = names
            self._consumer = OrderedConsumer(self.link.nc, self.link.js, self.stream,
                                             use_filters(self.prefix, names), self.position(),
                                             "tool-uses", api_prefix=self.link.api_prefix)
        delivery = self.link.run(self._consumer.poll(1024, self.poll_s), self.poll_s + 30)
        records = []
        for item in delivery.items:
            try:
                records.append(parse_record(item))
            except InvalidRecord:
                continue
        if records:
            self.service.observe(records)
        if delivery.messages:
            atomic_write_bytes(self.position_file, str(self._consumer.position).encode())
        return len(records)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:  # NATS restarting, library busy: try again
                log.exception("reading tool uses")
                self._stop.wait(1.0)
