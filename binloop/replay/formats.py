"""The `--input-format` registry: each format's mapper onto binloop's record.

A mapper turns one raw line (with its file name and line number, which some formats
need for the session and a stable id) into a record dict, before binloop's own
validation (`binloop.core.schema`), or raises `InvalidRecord` with the reason (a dead letter).
`binloop` is the record itself (no mapper). Minimal registry added with the Hanzo format
(issue 14); the OpenTelemetry work (issue 15) adds `auto` and `otlp-json` here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from binloop.replay import hanzo

LineMapper = Callable[[bytes, str, int], dict[str, Any]]

FORMATS: Final[dict[str, LineMapper | None]] = {
    "binloop": None,
    "hanzo": hanzo.map_line,
}
DEFAULT_FORMAT: Final = "binloop"


def parse_format(text: str) -> str:
    if text not in FORMATS:
        raise ValueError(f"unknown input format {text!r} (one of {', '.join(FORMATS)})")
    return text


def mapper(name: str) -> LineMapper | None:
    """The line mapper of a format (None: lines are binloop records already)."""
    return FORMATS[parse_format(name)]
