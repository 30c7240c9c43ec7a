"""Where an in-process engine (reference, polars) writes events, dead letters and lates;
and the checks every engine makes of its outputs before it starts.

An events file is idempotent for a re-run of the same detection configuration (a line
whose `event_id` is already there is not written again). A run of another
configuration into a file that holds events refuses to start, with a one-line error
naming both configurations (exit 73): its events would have other ids, so mixing them
would put two answers to one question in one file. Remove the file or choose another.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from binloop.core.config import Config
from binloop.core.errors import OutputError
from binloop.core.events import BINEvent, dumps_event
from binloop.core.redact import redact_dead_letter, redact_record
from binloop.core.schema import DeadLetter, ToolInvocation, dumps_record
from binloop.replay.jsonl import CheckLine, JsonlFileWriter, check_output_path, event_key


def describe_config(config: dict[str, Any]) -> str:
    """An event's `config` in one line: its digest and the main settings."""
    digest = config.get("digest")
    head = f"digest {digest[:12]}" if isinstance(digest, str) else "no digest (an older binloop)"
    shown = " ".join(f"{name}={config[name]}" for name in ("theta", "window", "count_outcomes",
                                                            "mode_level", "session_gap_ms")
                     if name in config)
    return f"{head}: {shown}" if shown else head


def same_configuration(path: str | Path, config: dict[str, Any]) -> CheckLine:
    """A check of the lines of an events file: each must be of `config` (its digest)."""
    digest = config["digest"]

    def check(line: bytes) -> None:
        try:
            held = orjson.loads(line).get("config")
        except (orjson.JSONDecodeError, AttributeError):
            return  # not an event: not ours to judge
        if not isinstance(held, dict) or held.get("digest") != digest:
            old = describe_config(held if isinstance(held, dict) else {})
            raise OutputError(f"{path} holds events of another detection configuration "
                              f"({old}); this run is {describe_config(config)}: write to "
                              "another file or remove it")

    return check


def check_outputs(config: Config, events_path: str | None = None) -> None:
    """Before a run: every configured output can be written, and the events file holds
    no events of another configuration (raises :class:`OutputError`)."""
    events = events_path if events_path is not None else config.out
    for path in (events, config.dead_letter, config.late_out):
        if path:
            check_output_path(path, config.mkdirs)
    if events and Path(events).is_file():
        check = same_configuration(events, config.detection().describe())
        with open(events, "rb") as held:
            for line in held:
                if line.endswith(b"\n"):
                    check(line)


def late_letter(rec: ToolInvocation) -> DeadLetter:
    """A late record as a dead letter (when no separate late output is configured)."""
    return DeadLetter(dumps_record(rec).decode(), "late: more than the window behind its key",
                      "", str(rec["ts"]))


def dumps_dead(letter: DeadLetter) -> bytes:
    """A dead letter as JSON, redacted (its raw input may hold secrets)."""
    return orjson.dumps(redact_dead_letter(letter).to_json())


def dumps_late(rec: ToolInvocation) -> bytes:
    """A late record as JSON, its args and error redacted."""
    return dumps_record(redact_record(rec))


class Outputs:
    """Events to `--out` (idempotent) or stdout; rejects to `--dead-letter` or stderr."""

    def __init__(self, config: Config) -> None:
        described = config.detection().describe()
        mkdirs = config.mkdirs
        self._events = (JsonlFileWriter(config.out, event_key, mkdirs=mkdirs,
                                        check_line=same_configuration(config.out, described))
                        if config.out else None)
        self._dead = (JsonlFileWriter(config.dead_letter, mkdirs=mkdirs)
                      if config.dead_letter else None)
        self._late = JsonlFileWriter(config.late_out, mkdirs=mkdirs) if config.late_out else None
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
            self._late.write([dumps_late(rec) for rec in records])
        else:
            self.dead(late_letter(rec) for rec in records)

    def close(self) -> None:
        for writer in (self._events, self._dead, self._late):
            if writer is not None:
                writer.close()
