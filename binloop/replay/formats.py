"""The `--input-format` registry: each format's mapper onto binloop's record.

A mapper turns one raw line (with its file name and line number, which some formats
need for the session and a stable id) into a record dict, or into a list of them (an
OTLP export holds many spans), before binloop's own validation (`binloop.core.schema`, where
a missing failure mode is inferred), or raises `InvalidRecord` with the reason (a dead
letter for the line). `binloop` is the record itself (no mapper).

- `binloop`: the telemetry record (no mapper)
- `hanzo`: the Hanzo bot's telemetry files (`binloop.replay.hanzo`)
- `otlp-json`: one `ExportTraceServiceRequest` in OTLP JSON per line, as the
  OpenTelemetry Collector's file exporter writes (`binloop.replay.otlp`)
- `auto` (the default): any of these, decided per file

`auto` looks at the first non-blank line of each file (of stdin: of the input): a JSON
object with `resourceSpans` is `otlp-json`, one with `tool_id` and `timestamp_ms` is
`hanzo`, anything else `binloop` (whose validator gives the reasons). Parquet rows are
always `binloop`.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

import orjson

from binloop.core.input_formats import (
    AUTO,
    BINLOOP,
    HANZO,
    INPUT_FORMATS,
    OTLP_JSON,
    parse_format,
)
from binloop.core.schema import InvalidRecord
from binloop.replay import hanzo

LineMapper = Callable[[bytes, str, int], dict[str, Any] | list[dict[str, Any]]]



def _otlp_line(raw: bytes, source: str, line: int) -> list[dict[str, Any]]:
    # protobuf costs a replay of binloop's own records 30 ms of start-up: only on use.
    from binloop.replay import otlp

    try:
        request = otlp.decode_json(raw)
    except otlp.MalformedBody as exc:
        raise InvalidRecord(str(exc)) from None
    return otlp.map_request(request, validate=False).records


FORMATS: Final[dict[str, LineMapper | None]] = {
    BINLOOP: None,
    HANZO: hanzo.map_line,
    OTLP_JSON: _otlp_line,
}
DEFAULT_FORMAT: Final = AUTO
CHOICES: Final = INPUT_FORMATS
_SNIFF_BYTES: Final = 1 << 20
# An export line can be megabytes long: its first key tells, without parsing it.
_OTLP_START: Final = re.compile(rb'\s*(?:\xef\xbb\xbf)?\s*\{\s*"resource_?[sS]pans"\s*:')


def mapper(name: str) -> LineMapper | None:
    """The line mapper of a format (None: lines are binloop records already). `auto` must
    be resolved first (`resolve`, `sniff_file`)."""
    if parse_format(name) == AUTO:
        raise ValueError("input format auto is resolved per file before mapping")
    return FORMATS[name]


def mapped(line_mapper: LineMapper, raw: bytes, source: str, line: int) -> list[dict[str, Any]]:
    """The record dicts of one line (raises InvalidRecord for a line that maps to none)."""
    out = line_mapper(raw, source, line)
    return out if isinstance(out, list) else [out]


def sniff_line(raw: bytes | dict[str, Any]) -> str:
    """The format a first line is written in."""
    if isinstance(raw, dict):
        return BINLOOP
    if _OTLP_START.match(raw[:256]):
        return OTLP_JSON
    try:
        obj = orjson.loads(raw[:_SNIFF_BYTES])
    except orjson.JSONDecodeError:
        return BINLOOP
    if isinstance(obj, dict):
        if "resourceSpans" in obj or "resource_spans" in obj:
            return OTLP_JSON
        if hanzo.looks_like(obj):
            return HANZO
    return BINLOOP


def resolve(name: str, items: Iterable[bytes | dict[str, Any]]) -> str | None:
    """`name`, or for `auto` the format of the first non-blank item (None: all blank)."""
    if name != AUTO:
        return name
    for item in items:
        if item if isinstance(item, dict) else item.strip():
            return sniff_line(item)
    return None


def sniff_file(path: str, name: str = AUTO) -> str:
    """`name`, or for `auto` the format of the file's first non-blank line."""
    if name != AUTO:
        return name
    lowered = path.lower()
    if lowered.endswith((".parquet", ".pq")):
        return BINLOOP
    try:
        opener: Any = gzip.open if lowered.endswith(".gz") else open
        with opener(Path(path), "rb") as handle:
            head = handle.read(_SNIFF_BYTES)
    except (OSError, EOFError):
        return BINLOOP  # the reader reports the damage
    return resolve(AUTO, head.split(b"\n")) or BINLOOP


__all__ = ["AUTO", "BINLOOP", "CHOICES", "FORMATS", "HANZO", "OTLP_JSON", "LineMapper",
           "mapped", "mapper", "parse_format", "resolve", "sniff_file", "sniff_line"]
