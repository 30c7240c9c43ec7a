"""The bookkeeping of an ordered JetStream pull consumer, without I/O.

Both readers of the telemetry stream (`binloop.nats.consumer` on nats-py and
`binloop.nats.wire_consumer` on `binloop.nats.wire`) follow the same protocol; this module
is that protocol once: the consumer's configuration, the pull requests that keep one to
two batches in flight, what a delivery's sequences and a status message mean, when a
silent consumer must be recreated, and how a message becomes records of a `Delivery`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Literal

import orjson
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, ReplayPolicy, StatusCode

from binloop.core.reading import BOM, has_bom
from binloop.core.schema import DeadLetter, raw_text
from binloop.nats.subjects import BATCH_HEADER, BATCH_JSONL

log = logging.getLogger("binloop.nats")

# A request that ended (expired, max_bytes hit, batch completed): its undelivered
# messages are in this header (nats-py reads it but names no constant for it).
PENDING_MESSAGES_HEADER = "Nats-Pending-Messages"
_REQUEST_ENDED = ("request timeout", "exceeds maxbytes", "batch completed")

Arrival = Literal["new", "seen", "gap"]


@dataclass(frozen=True)
class PullSettings:
    batch: int = 512
    max_bytes: int = 1 << 20
    expires_s: float = 30.0
    heartbeat_s: float = 1.0
    # Deliver records as runs of whole lines (`Delivery.runs`), not cut into lines.
    runs: bool = False


@dataclass(slots=True)
class Delivery:
    """Raw records of consecutive messages (a batch envelope gives many), and the
    messages that could not be read as records at all.

    The records are `items`, one per line; or, read with `PullSettings.runs`, `runs`:
    each message's records as one run of lines joined by `\n`, so that a consumer can
    decode them as one block without a Python object per record (`lines()` gives the
    same lines either way). A record that holds a newline itself (a message of one
    pretty-printed record) cannot be a line of a run: from there on the delivery is
    cut into `items`."""

    items: list[bytes] = field(default_factory=list)
    rejects: list[DeadLetter] = field(default_factory=list)
    first_seq: int = 0
    last_seq: int = 0
    messages: int = 0
    runs: list[bytes] = field(default_factory=list)
    records: int = 0  # lines in `items` and `runs`

    def lines(self) -> list[bytes]:
        """The records one per line, in order."""
        if not self.runs:
            return self.items
        return self.items + b"\n".join(self.runs).split(b"\n")

    def block(self) -> bytes:
        """`b"\n".join(self.lines())` (no copy for a single run)."""
        if self.items:
            return b"\n".join(self.lines())
        return self.runs[0] if len(self.runs) == 1 else b"\n".join(self.runs)


def envelope_run(data: bytes) -> bytes:
    """`b"\n".join(split_envelope(data))`, without cutting the common envelope (no
    `\r`, no byte order mark) into lines."""
    if b"\r" in data or has_bom(data):
        return b"\n".join(split_envelope(data))
    return data[:-1] if data.endswith(b"\n") else data


def split_envelope(data: bytes) -> list[bytes]:
    """The lines of a `Binloop-Batch: jsonl` payload: split at \\n, a last empty line
    dropped, a trailing \\r and a leading byte order mark removed from each."""
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    if b"\r" in data:
        lines = [line.rstrip(b"\r") for line in lines]
    if has_bom(data):
        lines = [line[3:] if line.startswith(BOM) else line for line in lines]
    return lines


class PullTracker:
    """Where an ordered pull consumer stands: `position` (the last stream sequence
    handed out), the messages requested and not yet delivered, the next consumer
    sequence expected."""

    def __init__(self, stream: str, position: int, source: str, pull: PullSettings) -> None:
        self.stream, self.position, self.source, self.pull = stream, position, source, pull
        timing = {"expires": int(pull.expires_s * 1e9),
                  "idle_heartbeat": int(pull.heartbeat_s * 1e9)}
        self._request = orjson.dumps({"batch": pull.batch, "max_bytes": pull.max_bytes,
                                      **timing})
        # One message whatever its size: after a request stopped at max_bytes, the next
        # message may be larger than max_bytes (the server's max_payload bounds it).
        self._one_any_size = orjson.dumps({"batch": 1, **timing})
        self.restart()

    def restart(self) -> None:
        """A new server-side consumer: nothing requested, consumer sequences from 1."""
        self._big_next = False
        self._credit = 0  # messages requested and neither delivered nor given up
        self.next_dseq = 1
        self.last_activity = time.monotonic()

    def consumer_config(self, filters: list[str]) -> ConsumerConfig:
        """The ephemeral consumer right after `position` (`as_dict()` is its API form)."""
        return ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=self.position + 1,
            ack_policy=AckPolicy.NONE, replay_policy=ReplayPolicy.INSTANT, mem_storage=True,
            num_replicas=1, inactive_threshold=max(30.0, 10 * self.pull.heartbeat_s),
            filter_subject=filters[0] if len(filters) == 1 else None,
            filter_subjects=filters if len(filters) > 1 else None)

    def requests(self) -> list[bytes]:
        """Pull requests to send now to keep between one and two batches requested."""
        out = []
        if self._big_next:
            self._big_next = False
            out.append(self._one_any_size)
            self._credit += 1
        while self._credit < self.pull.batch:
            out.append(self._request)
            self._credit += self.pull.batch
        return out

    def stale(self, reconnected: bool, connected: bool) -> bool:
        """Whether the consumer must be recreated: the connection was re-established,
        or neither a message nor a heartbeat came for three heartbeats."""
        if reconnected:
            log.info("%s: reconnected to NATS; resuming after stream seq %d",
                     self.source, self.position)
            return True
        silent = time.monotonic() - self.last_activity
        if silent > 3 * self.pull.heartbeat_s and connected:
            log.info("%s: no message or heartbeat for %.1fs; resuming after stream seq %d",
                     self.source, silent, self.position)
            return True
        return False

    def arrive(self, sseq: int, dseq: int) -> Arrival:
        """A data message's sequences: `gap` (a consumer sequence was skipped: recreate
        the consumer), `seen` (at or before `position`: skip it) or `new`."""
        self._credit -= 1
        if dseq != self.next_dseq:
            log.info("%s: consumer sequence gap (%d, expected %d); resuming after %d",
                     self.source, dseq, self.next_dseq, self.position)
            return "gap"
        self.next_dseq = dseq + 1
        return "seen" if sseq <= self.position else "new"

    def take(self, out: Delivery, sseq: int, data: bytes, batch: str | None) -> None:
        """Add the new message `sseq` to `out`: one record, the lines of a batch
        envelope (`batch` is its Binloop-Batch header), or a reject."""
        self.position = sseq
        out.messages += 1
        out.first_seq = out.first_seq or sseq
        out.last_seq = sseq
        # A UTF-8 byte order mark before a record is removed, as the file reader does
        # (binloop.replay.readers): a Windows-written line published as it is stays one.
        if data.startswith(BOM):
            data = data[3:]
        if not data or data.isspace():  # (`strip` would copy a whole envelope)
            # A file's blank line is no record; a message is meant to be one (or an
            # envelope of some): an empty one is a publisher's bug, to be seen.
            what = "message" if batch is None else f"{BATCH_HEADER} envelope"
            out.rejects.append(self._reject(data, f"empty {what}: no record", sseq))
        elif batch is None:
            if self.pull.runs and not out.items and b"\n" not in data:
                out.runs.append(data)
            else:
                self._cut(out).append(data)
            out.records += 1
        elif batch.strip().lower() == BATCH_JSONL:
            if self.pull.runs and not out.items:
                run = envelope_run(data)
                out.runs.append(run)
                out.records += run.count(b"\n") + 1
            else:
                lines = split_envelope(data)
                self._cut(out).extend(lines)
                out.records += len(lines)
        else:
            out.rejects.append(self._reject(data, f"unknown {BATCH_HEADER} encoding "
                                            f"{batch!r:.40} (expected {BATCH_JSONL!r})", sseq))

    @staticmethod
    def _cut(out: Delivery) -> list[bytes]:
        """`out.items`, with the runs before cut into it (the records from here on are
        lines of their own)."""
        if out.runs:
            out.items, out.runs = out.lines(), []
        return out.items

    def _reject(self, data: bytes, reason: str, sseq: int) -> DeadLetter:
        return DeadLetter(raw_text(data), reason, f"nats:{self.stream}", f"stream seq {sseq}")

    def status(self, status: str | None, description: str, pending_messages: int) -> bool:
        """Heartbeats keep us alive; a request that ended early returns its credit;
        anything else (consumer deleted, leadership change...) recreates (False)."""
        if status == StatusCode.CONTROL_MESSAGE.value:
            return True
        lowered = description.lower()
        if status == StatusCode.REQUEST_TIMEOUT.value or (
                status == StatusCode.CONFLICT.value and any(e in lowered for e in _REQUEST_ENDED)):
            self._credit = max(0, self._credit - pending_messages)
            self._big_next = self._big_next or "maxbytes" in lowered
            return True
        log.info("%s: pull status %s %s; resuming after stream seq %d", self.source, status,
                 description, self.position)
        return False

    def caught_up(self, num_pending: int, delivered: int) -> bool:
        """From consumer info: whether the server has nothing more for us now.

        Everything the server delivered has reached us (`delivered` is its consumer
        sequence; its stream sequence moves past messages the filter skipped)."""
        return num_pending == 0 and delivered == self.next_dseq - 1


class TrackedConsumer:
    """A reader whose bookkeeping is `self.tracker`: its `position` is the tracker's."""

    tracker: PullTracker

    @property
    def position(self) -> int:
        """The last stream sequence handed out (set it to skip ahead)."""
        return self.tracker.position

    @position.setter
    def position(self, seq: int) -> None:
        self.tracker.position = seq
