"""Hypothesis strategies: telemetry streams and detection settings for agreement tests.

A stream is JSONL lines: records of a few keys and sessions (int and str session ids,
`1` and `"1"` among them), written in several encodings (the client's sorted compact
form, Python's `json.dumps`, unsorted keys, no `id`), out of ts order by up to
`max_lag` ms behind the newest ts so far, with exact duplicates of recent lines,
invalid lines (bad JSON, wrong types, blank lines), damaged lines (a record cut short),
and records with a skewed clock: dated up to a day ahead of or behind the stream (within
the future-skew allowance, usually of a key of their own), a day behind (beyond every
allowed lateness drawn), ahead of the wall clock within the allowance (valid), or beyond it
(ahead of the wall clock by more than a day: dead letters).
"""

from __future__ import annotations

import json
import time
from typing import Any, Final

import orjson
from hypothesis import strategies as st

from binloop.core.window import WindowSpec
from tests.engine_runs import content_id

TOOLS: Final = ("search", "book.flight")
MODES: Final = ("ARGS.date", "ARGS.payment", "NETWORK.reset", "TIMEOUT")
SESSIONS: Final = (1, 2, "1", "s-2")
OUTCOMES: Final = ("failure", "timeout", "success", "Failure")
INVALID_LINES: Final = (
    b"not json", b"[1, 2]", b"", b"   ", b'{"tool": "x"}', b"\xff\xfe",
    b'{"session_id": 1, "ts": -5, "tool": "t", "outcome": "failure"}',
    b'{"session_id": 1, "ts": 5, "tool": "", "outcome": "failure"}',
    b'{"session_id": 1, "ts": 5.0, "tool": "t", "outcome": "failure"}',
    b'{"session_id": true, "ts": 5, "tool": "t", "outcome": "failure"}',
    b'{"session_id": 1, "ts": 5, "tool": "t", "outcome": "failure", "failure_mode": "NOPE"}',
)
STYLES: Final = ("client", "client", "json.dumps", "unsorted", "no-id")
WINDOWS: Final = ("session", "global", "sliding:40ms", "sliding:150ms")
START: Final = 1_700_000_000_000  # unix ms (a ts below 10^11 would be read as seconds)
HOUR: Final = 3_600_000
# Clock skews of a record against the stream: within and beyond a day ahead, a little
# ahead, a little behind (within or beyond the allowed lateness drawn) and a day behind.
SKEWS: Final = (23 * HOUR, 25 * HOUR, 2 * HOUR, -(HOUR // 2), -(25 * HOUR))
# Against the wall clock: within the 1-day future-skew allowance, and beyond it.
WALL_SKEWS: Final = (23 * HOUR, 2 * 24 * HOUR)


def encode(body: dict[str, Any], style: str) -> bytes:
    """A record as one of the writers we meet would write it."""
    if style == "no-id":
        return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    with_id = {**body, "id": content_id(body)}
    if style == "client":
        return orjson.dumps(with_id, option=orjson.OPT_SORT_KEYS)
    if style == "json.dumps":
        return json.dumps(with_id, sort_keys=True).encode()
    return orjson.dumps({"id": with_id["id"], **body})


@st.composite
def record_body(draw: st.DrawFn, n: int, ts: int) -> dict[str, Any]:
    outcome = draw(st.sampled_from(OUTCOMES))
    failing = outcome.lower() != "success"
    mode = draw(st.sampled_from(MODES)) if failing or draw(st.booleans()) else None
    body: dict[str, Any] = {"session_id": draw(st.sampled_from(SESSIONS)), "ts": ts,
                            "tool": draw(st.sampled_from(TOOLS)), "args": {"n": n},
                            "outcome": outcome, "failure_mode": mode}
    if failing and draw(st.booleans()):
        body["error"] = 'server said "no"'
    return body


@st.composite
def telemetry_lines(draw: st.DrawFn, max_lag: int, max_size: int = 50) -> list[bytes]:
    """Lines whose record ts is never more than `max_lag` behind the newest ts before it
    (duplicates are drawn among recent records for the same reason)."""
    lines: list[bytes] = []
    recent: list[tuple[int, bytes]] = []
    clock = START
    for n in range(draw(st.integers(0, max_size))):
        kind = draw(st.integers(0, 23))
        if kind == 0:
            lines.append(draw(st.sampled_from(INVALID_LINES)))
            continue
        if kind == 20 and lines:  # a damaged line: a record cut short
            cut = draw(st.sampled_from(lines))
            lines.append(cut[: draw(st.integers(1, max(1, len(cut) - 1)))])
            continue
        if kind in (21, 22):  # a skewed clock (usually an unrelated key's)
            body = draw(record_body(n, max(0, clock + draw(st.sampled_from(SKEWS)))))
            if draw(st.booleans()):
                body["tool"] = "clock.skewed"
            lines.append(encode(body, draw(st.sampled_from(STYLES))))
            continue
        if kind == 23:  # ahead of the wall clock: within the future-skew allowance or not
            future = int(time.time() * 1000) + draw(st.sampled_from(WALL_SKEWS))
            lines.append(encode(draw(record_body(n, future)), draw(st.sampled_from(STYLES))))
            continue
        fresh = [line for ts, line in recent if ts >= clock - max_lag]
        if kind in (1, 2) and fresh:
            lines.append(draw(st.sampled_from(fresh)))
            continue
        clock += draw(st.integers(0, 40))
        ts = clock - draw(st.integers(0, max_lag))
        line = encode(draw(record_body(n, ts)), draw(st.sampled_from(STYLES)))
        recent = [*recent[-5:], (ts, line)]
        lines.append(line)
    return lines


@st.composite
def detection_settings(draw: st.DrawFn, allowed_lateness: int | None = None) -> dict[str, Any]:
    """Config settings of detection: every window kind, theta 1..5, small gaps and
    widths so that slices restart and records are late."""
    lateness = allowed_lateness if allowed_lateness is not None else draw(
        st.sampled_from((0, 60, 500, 3_600_000)))
    return {
        "theta": draw(st.integers(1, 5)),
        "window": WindowSpec.parse(draw(st.sampled_from(WINDOWS))),
        "mode_level": draw(st.sampled_from((None, 1))),
        "evidence_max": draw(st.integers(1, 3)),
        "session_gap": draw(st.sampled_from((30, 100, 400))),
        "allowed_lateness": lateness,
        "dedup_max": draw(st.sampled_from((0, 2, 64))),
    }


# Field values a validator has to think about: valid ones, normalised ones (upper-case
# outcome, lower-case failure code, upper-case id, long strings cut), and invalid ones.
FIELD_VALUES: Final[dict[str, tuple[Any, ...]]] = {
    "session_id": (1, 0, -5, "1", "s", "é", "", True, 1.5, 1.0, None, 2**63, 2**64, [1],
                   "x" * 257),
    "ts": (1000, 0, 1715800632000, -1, 1.0, "5", None, True, 2**63 - 1, 2**64 - 1, 10**20),
    "tool": ("t", "a\"b", "a\\b", "é😀", "x" * 256, "", "a\nb", "x" * 257, 5, None),
    "args": ({}, {"a": 1}, {"x": [1, {"y": "z"}]}, {"ts": 5}, {"f": 1.5}, {"e": 1e15},
             {"big": 10**19}, {"u": "\u00e9"}, {"s": "x" * 9000}, None, [1], "s"),
    "outcome": ("failure", "timeout", "success", "FAILURE", "Cancelled", "bad", None, 5),
    "failure_mode": (None, "ARGS.x", "args.y", "NETWORK", "NOTFOUND.a.b", "BAD.x", "ARGS..x",
                     "ARGS.x y", "", 5, "A" * 300),
    "duration_ms": (5, 0, None, -1, 1.5, "5", True),
    "agent_id": ("a", 'q"uote', None, "x" * 5000, 5),
    "error": ("e", "new\nline", "tab\t", 'q"t', "c\u0001", None, "x" * 5000, 7),
    "id": ("a" * 64, "B" * 64, "0123456789abcdef" * 4, "g" * 64, "a" * 63, None, 5,
           "é" * 64, "0123456789abcdeF" * 4, "a" * 31 + "-" + "a" * 32),
    "extra": (1, None),
}
RAW_LINES: Final = (b"", b"   ", b"not json", b"[1,2]", b"{", b"\xff\xfe{}", b"\xef\xbb\xbf{}",
                    b"{}", b'{"ts":1,"ts":2}', b"null", b'{"a":"\\ud800"}', b'{"x":1}\r')
LINE_STYLES: Final = ("client", "json.dumps", "json.dumps-utf8", "unsorted")


@st.composite
def odd_lines(draw: st.DrawFn, max_size: int = 40) -> list[bytes]:
    """Lines mixing clean records, records with odd or invalid fields, raw junk."""
    lines = []
    for _ in range(draw(st.integers(0, max_size))):
        if draw(st.integers(0, 9)) == 0:
            lines.append(draw(st.sampled_from(RAW_LINES)))
            continue
        body: dict[str, Any] = {}
        for name, values in FIELD_VALUES.items():
            present = draw(st.integers(0, 9))
            if present < 7:
                # mostly the first (valid) values, so that whole records are often valid
                pick = draw(st.integers(0, len(values) - 1)) if present == 0 else min(
                    draw(st.integers(0, 3)), len(values) - 1)
                body[name] = values[pick]
        lines.append(_styled(body, draw(st.sampled_from(LINE_STYLES)),
                             draw(st.integers(0, 19))))
    return lines


def _styled(body: dict[str, Any], style: str, twist: int) -> bytes:
    if style == "client":
        try:
            line = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:  # an int beyond 64 bits
            line = json.dumps(body, sort_keys=True).encode()
    elif style == "unsorted":
        line = json.dumps(dict(reversed(list(body.items())))).encode()
    else:
        line = json.dumps(body, sort_keys=True, ensure_ascii=style == "json.dumps").encode()
    if twist == 0:
        line = line.replace(b'"ts":', b'"ts":7,"ts":', 1)  # a duplicate key
    elif twist == 1:
        line += b"\r"
    return line
