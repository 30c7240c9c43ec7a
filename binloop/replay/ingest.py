"""Turning raw chunks into valid records and dead letters (shared by every engine)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from binloop.core.schema import (
    DEFAULT_LIMITS,
    DeadLetter,
    InvalidRecord,
    RecordLimits,
    RecordParser,
    ToolInvocation,
    parse_record,
    raw_text,
    validate_record,
)
from binloop.replay.formats import LineMapper, mapped, mapper
from binloop.replay.readers import RawChunk, RawItem


@dataclass(slots=True)
class ParsedChunk:
    """The valid records of a chunk in arrival order, and its rejects."""

    records: list[ToolInvocation]
    dead: list[DeadLetter]
    blank: int
    ts_converted: int = 0


def parse_item(item: RawItem, limits: RecordLimits = DEFAULT_LIMITS) -> ToolInvocation:
    """One line (bytes) or decoded row (dict) as a record; raises InvalidRecord."""
    if isinstance(item, dict):
        return validate_record(item, limits)
    return parse_record(item, limits)


def parse_chunk(chunk: RawChunk, limits: RecordLimits = DEFAULT_LIMITS) -> ParsedChunk:
    records: list[ToolInvocation] = []
    dead: list[DeadLetter] = list(chunk.rejects)  # the reader's own rejects come first
    blank = 0
    parser = RecordParser(limits)
    line_mapper = mapper(chunk.input_format)
    for index, item in enumerate(chunk.items):
        if not item:
            blank += 1
            continue
        if line_mapper is not None and isinstance(item, bytes):
            records += _mapped_line(line_mapper, parser.validate, item, chunk, index, dead)
            continue
        try:
            records.append(parser.validate(item) if isinstance(item, dict)
                           else parser.parse(item))
        except InvalidRecord as exc:
            raw = raw_text(item) if isinstance(item, bytes) else raw_text(orjson.dumps(item))
            dead.append(DeadLetter(raw, str(exc), chunk.source, str(chunk.first_line + index)))
    return ParsedChunk(records, dead, blank, parser.ts_converted)


@dataclass(slots=True)
class CountedChunk:
    """What the detector needs of a chunk: its counted records in arrival order, its
    rejects, how many records were valid, and the newest ts among them (None if none)."""

    counted: list[ToolInvocation]
    dead: list[DeadLetter]
    valid: int
    blank: int
    max_ts: int | None
    ts_converted: int = 0


def parse_counted(chunk: RawChunk, count_outcomes: frozenset[str],
                  limits: RecordLimits = DEFAULT_LIMITS) -> CountedChunk:
    """`parse_chunk` keeping only the records that count (outcome in `count_outcomes`
    and a failure mode, as `DetectionParams.counts`): the same records, rejects and
    counters, without a list of every valid record."""
    parser = RecordParser(limits)
    parse, validate = parser.parse, parser.validate
    counted: list[ToolInvocation] = []
    dead: list[DeadLetter] = list(chunk.rejects)  # the reader's own rejects come first
    valid = blank = 0
    max_ts = -1
    line_mapper = mapper(chunk.input_format)
    for index, item in enumerate(chunk.items):
        if not item:
            blank += 1
            continue
        if line_mapper is not None and isinstance(item, bytes):
            good = _mapped_line(line_mapper, validate, item, chunk, index, dead)
            valid += len(good)
            for rec in good:
                max_ts = max(max_ts, rec["ts"])
                if rec["failure_mode"] is not None and rec["outcome"] in count_outcomes:
                    counted.append(rec)
            continue
        try:
            rec = validate(item) if isinstance(item, dict) else parse(item)
        except InvalidRecord as exc:
            raw = raw_text(item) if isinstance(item, bytes) else raw_text(orjson.dumps(item))
            dead.append(DeadLetter(raw, str(exc), chunk.source, str(chunk.first_line + index)))
            continue
        valid += 1
        if rec["ts"] > max_ts:
            max_ts = rec["ts"]
        if rec["failure_mode"] is not None and rec["outcome"] in count_outcomes:
            counted.append(rec)
    return CountedChunk(counted, dead, valid, blank, max_ts if valid else None,
                        parser.ts_converted)


def _mapped_line(line_mapper: LineMapper, validate: Callable[[dict[str, Any]], ToolInvocation],
                 item: bytes, chunk: RawChunk, index: int,
                 dead: list[DeadLetter]) -> list[ToolInvocation]:
    """The valid records of a line of another input format; its rejects go to `dead`
    (each with the line's position)."""
    position = str(chunk.first_line + index)
    try:
        fields = mapped(line_mapper, item, chunk.source, chunk.first_line + index)
    except InvalidRecord as exc:
        dead.append(DeadLetter(raw_text(item), str(exc), chunk.source, position))
        return []
    good: list[ToolInvocation] = []
    for one in fields:
        try:
            good.append(validate(one))
        except InvalidRecord as exc:
            dead.append(DeadLetter(raw_text(item), str(exc), chunk.source, position))
    return good
