"""Where an in-process engine (reference, polars) writes events, dead letters and lates."""

from __future__ import annotations

import sys
from collections.abc import Iterable

import orjson

from binloop.core.config import Config
from binloop.core.events import BINEvent, dumps_event
from binloop.core.schema import DeadLetter, ToolInvocation, dumps_record
from binloop.replay.jsonl import JsonlFileWriter, event_key


def late_letter(rec: ToolInvocation) -> DeadLetter:
    """A late record as a dead letter (when no separate late output is configured)."""
    return DeadLetter(dumps_record(rec).decode(), "late: more than the window behind its key",
                      "", str(rec["ts"]))


def dumps_dead(letter: DeadLetter) -> bytes:
    return orjson.dumps(letter.to_json())


class Outputs:
    """Events to `--out` (idempotent) or stdout; rejects to `--dead-letter` or stderr."""

    def __init__(self, config: Config) -> None:
        self._events = JsonlFileWriter(config.out, event_key) if config.out else None
        self._dead = JsonlFileWriter(config.dead_letter) if config.dead_letter else None
        self._late = JsonlFileWriter(config.late_out) if config.late_out else None
        self._stdout_closed = False

    def events(self, events: Iterable[BINEvent]) -> None:
        lines = [dumps_event(e) for e in events]
        if self._events is not None:
            self._events.write(lines)
        elif lines and not self._stdout_closed:
            try:
                sys.stdout.buffer.write(b"".join(line + b"\n" for line in lines))
                sys.stdout.flush()
            except BrokenPipeError:
                # The reader went away (`... | head`): stop printing, finish the replay.
                self._stdout_closed = True

    def dead(self, letters: Iterable[DeadLetter]) -> None:
        lines = [dumps_dead(letter) for letter in letters]
        if self._dead is not None:
            self._dead.write(lines)
        elif lines:
            sys.stderr.buffer.write(b"".join(b"dead-letter: " + ln + b"\n" for ln in lines))
            sys.stderr.flush()

    def late(self, records: Iterable[ToolInvocation]) -> None:
        if self._late is not None:
            self._late.write([dumps_record(rec) for rec in records])
        else:
            self.dead(late_letter(rec) for rec in records)

    def close(self) -> None:
        for writer in (self._events, self._dead, self._late):
            if writer is not None:
                writer.close()
