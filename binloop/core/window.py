"""Window specifications (`session`, `global`, `sliding:<d>`) and duration strings."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)")
_UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

WindowKind = Literal["session", "global", "sliding"]
# The longest duration a setting takes: 100 years (event-time arithmetic stays far inside
# 64-bit integers, as the polars engine needs).
MAX_DURATION_MS: Final = 36_500 * 86_400_000


def parse_duration_ms(text: str) -> int:
    """`"90s"` -> 90000. Units ms, s, m, h, d; compound forms like `1h30m` are allowed."""
    cleaned = text.strip().lower()
    pos, total = 0, 0
    for match in _DURATION.finditer(cleaned):
        if match.start() != pos:
            break
        total += int(match.group(1)) * _UNIT_MS[match.group(2)]
        pos = match.end()
    if pos != len(cleaned) or not cleaned:
        raise ValueError(f"invalid duration {text!r}: use e.g. 500ms, 90s, 10m, 1h, 2d")
    if total <= 0:
        raise ValueError(f"duration {text!r} must be positive")
    if total > MAX_DURATION_MS:
        raise ValueError(f"duration {text!r} is longer than the limit of 36500d (100 years)")
    return total


def format_duration_ms(ms: int) -> str:
    for unit in ("d", "h", "m", "s"):
        if ms % _UNIT_MS[unit] == 0:
            return f"{ms // _UNIT_MS[unit]}{unit}"
    return f"{ms}ms"


@dataclass(frozen=True, slots=True)
class WindowSpec:
    """Which window counts failures of a key; `size_ms` is the sliding width."""

    kind: WindowKind
    size_ms: int = 0

    @classmethod
    def parse(cls, text: str) -> WindowSpec:
        name, _, arg = text.strip().partition(":")
        if name in ("session", "global") and not arg:
            return cls(name)  # type: ignore[arg-type]
        if name == "sliding" and arg:
            return cls("sliding", parse_duration_ms(arg))
        raise ValueError(f"invalid window {text!r}: use session, global or sliding:<duration>")

    def __str__(self) -> str:
        if self.kind == "sliding":
            return f"sliding:{format_duration_ms(self.size_ms)}"
        return self.kind
