"""Instructions the redactor spends on its miss path, counted by valgrind.

    python -m benchmarks.redaction_instructions [--rounds N]

On a shared machine timings swing with the neighbours' load; instruction counts do not.
Each case runs under `valgrind --tool=callgrind` twice, over N rounds and over none; the
difference over N is the case's instructions a round. Every round starts with the
redactor's caches empty, so that every text is new to it (the miss path: a fired event's
evidence, a dead letter, a span the receiver has not seen): `event` redacts one event of
the 10 first failing records of the real telemetry, `dead_letter` those 10 record lines
as dead letters, `texts` every string of the real telemetry's args and errors (1,164
calls) as evidence text. `event_seen` and `dead_letter_seen` keep the caches (the texts
were redacted in the round before: what `benchmarks.redaction_cost` times). Needs
valgrind (Debian package `valgrind`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from benchmarks.callgrind import added_instructions, require_valgrind

CASES = ("event", "dead_letter", "texts", "event_seen", "dead_letter_seen")
TELEMETRY = Path("/work/shared/data/tau_airline_telemetry.jsonl")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _forget() -> None:
    """Empty every cache of the redactor's module (each round meets new texts)."""
    from binloop.core import redact

    for name, held in vars(redact).items():
        if hasattr(held, "cache_clear") and name != "rules":
            held.cache_clear()
        elif isinstance(held, set):  # the texts and keys proven innocent
            held.clear()


def case_work(case: str) -> Callable[[], object]:
    from binloop.core.redact import Redactor, redact_dead_letter, redact_event
    from binloop.core.schema import DeadLetter

    lines = [line for line in TELEMETRY.read_bytes().splitlines() if line.strip()]
    records = [orjson.loads(line) for line in lines]
    failing = [line for line, rec in zip(lines, records, strict=True)
               if rec.get("outcome") != "success"][:10]
    if case.startswith("event"):
        event = {"event_id": "0" * 64, "tool": "t", "failure_mode": "ARGS",
                 "evidence": [orjson.loads(line) for line in failing]}
        return lambda: redact_event(event)
    if case.startswith("dead_letter"):
        letters = [DeadLetter(line.decode(), "bad ts") for line in failing]
        return lambda: [redact_dead_letter(letter) for letter in letters]
    texts = [t for rec in records for t in _strings([rec.get("args"), rec.get("error")])]
    return lambda: [Redactor().evidence_text(t) for t in texts]


def run_case(case: str, rounds: int) -> None:
    work = case_work(case)
    work()  # the rules compile once, outside the count
    for _ in range(rounds):
        if not case.endswith("_seen"):
            _forget()
        work()


HERE = "benchmarks.redaction_instructions"


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if args[:1] == ["case"]:
        run_case(args[1], int(args[2]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    options = parser.parse_args(args)
    require_valgrind()
    result = {}
    for case in options.cases:
        per_round = added_instructions(HERE, "case", case, options.rounds) / options.rounds
        result[case] = round(per_round)
        print(f"{case:>12}: {per_round:12,.0f} instructions a round", flush=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
