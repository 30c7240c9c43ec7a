"""A small seeded generator of telemetry lines for engine benchmarks and tests.

Not the product's simulator (`binloop simulate`): this one only needs a stream with a
known shape: mostly successes, a share of failures spread over `keys` (tool,
failure_mode) pairs and `sessions` sessions, ts rising about 1 s per record, optional
bounded disorder, duplicated lines and invalid lines. Lines are written as the
telemetry client writes them (sorted keys, compact, content-hash `id`).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

MODES: Final = ("ARGS.bad_date", "ARGS.payment_total_mismatch", "NOTFOUND.user", "TIMEOUT",
                "NETWORK.reset", "PERM.denied", "SYNTAX.json", "RUNTIME.crash", "CONFLICT",
                "TOOL_GAP")
INVALID: Final = (b"not json", b'{"tool": "x"}', b"[1, 2]",
                  b'{"session_id": 1, "ts": -5, "tool": "t", "outcome": "failure"}',
                  b'{"session_id": 1, "ts": 5, "tool": "t", "outcome": "exploded"}')
START_TS: Final = 1_715_800_000_000


@dataclass(frozen=True)
class Shape:
    """What the generated stream looks like."""

    keys: int = 1000
    sessions: int = 1000
    failure_rate: float = 0.07
    max_lag_ms: int = 0
    duplicate_rate: float = 0.0
    invalid_rate: float = 0.0
    step_ms: int = 2000


def synthetic_lines(n: int, seed: int = 0, shape: Shape = Shape()) -> Iterator[bytes]:
    """`n` JSONL lines (without newlines)."""
    rnd = random.Random(seed)
    tools = max(1, shape.keys // len(MODES))
    clock = START_TS
    recent: list[bytes] = []
    for i in range(n):
        roll = rnd.random()
        if roll < shape.invalid_rate:
            yield rnd.choice(INVALID)
            continue
        if roll < shape.invalid_rate + shape.duplicate_rate and recent:
            yield rnd.choice(recent)
            continue
        clock += rnd.randint(0, shape.step_ms)
        line = _record_line(rnd, i, clock - rnd.randint(0, shape.max_lag_ms), tools, shape)
        recent = [*recent[-7:], line]
        yield line


def _record_line(rnd: random.Random, i: int, ts: int, tools: int, shape: Shape) -> bytes:
    session = rnd.randrange(shape.sessions)
    fails = rnd.random() < shape.failure_rate
    body: dict[str, Any] = {
        "agent_id": f"agent-{session % 7}",
        "args": {"n": i, "q": f"v{rnd.randrange(1000)}"},
        "duration_ms": rnd.randrange(5000),
        "failure_mode": rnd.choice(MODES) if fails else None,
        "outcome": rnd.choice(("failure", "failure", "timeout")) if fails else "success",
        "session_id": session,
        "tool": f"tool_{rnd.randrange(tools)}",
        "ts": ts,
    }
    if fails:
        body["error"] = 'upstream said "no"'
    body["id"] = hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def write_synthetic(path: Path, n: int, seed: int = 0, shape: Shape = Shape()) -> Path:
    with path.open("wb") as out:
        batch: list[bytes] = []
        for line in synthetic_lines(n, seed, shape):
            batch.append(line)
            if len(batch) == 65536:
                out.write(b"\n".join(batch) + b"\n")
                batch = []
        if batch:
            out.write(b"\n".join(batch) + b"\n")
    return path
