"""Turning raw chunks into valid records and dead letters (shared by every engine)."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from binloop.inputs import RawChunk, RawItem
from binloop.schema import (
    DEFAULT_LIMITS,
    DeadLetter,
    InvalidRecord,
    RecordLimits,
    ToolInvocation,
    parse_record,
    raw_text,
    validate_record,
)


@dataclass(slots=True)
class ParsedChunk:
    """The valid records of a chunk in arrival order, and its rejects."""

    records: list[ToolInvocation]
    dead: list[DeadLetter]
    blank: int


def parse_item(item: RawItem, limits: RecordLimits = DEFAULT_LIMITS) -> ToolInvocation:
    """One line (bytes) or decoded row (dict) as a record; raises InvalidRecord."""
    if isinstance(item, dict):
        return validate_record(item, limits)
    return parse_record(item, limits)


def parse_chunk(chunk: RawChunk, limits: RecordLimits = DEFAULT_LIMITS) -> ParsedChunk:
    records: list[ToolInvocation] = []
    dead: list[DeadLetter] = []
    blank = 0
    for index, item in enumerate(chunk.items):
        if not item:
            blank += 1
            continue
        try:
            records.append(parse_item(item, limits))
        except InvalidRecord as exc:
            raw = raw_text(item) if isinstance(item, bytes) else raw_text(orjson.dumps(item))
            dead.append(DeadLetter(raw, str(exc), chunk.source, str(chunk.first_line + index)))
    return ParsedChunk(records, dead, blank)
