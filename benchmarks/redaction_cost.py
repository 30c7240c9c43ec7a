"""What the one redactor costs, as ratios within one run (shared, noisy machines).

    python -m benchmarks.redaction_cost [--input TELEMETRY] [--repeat 200]

The redactor runs on the evidence of fired events and on dead letters, never on valid
records: this reports, for the real telemetry's failing records, the time to redact one
event of 10 evidence records and one dead letter (a record line rejected as it is), each
as a ratio to the plain parse (`orjson.loads`) of the same lines, and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from binloop.core.redact import redact_dead_letter, redact_event
from binloop.core.schema import DeadLetter

DEFAULT_INPUT = Path("/work/shared/data/tau_airline_telemetry.jsonl")


def per_call(function: Callable[[], object], repeat: int) -> float:
    """Median seconds of one call over `repeat` calls, in 5 rounds."""
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(repeat):
            function()
        rounds.append((time.perf_counter() - started) / repeat)
    return statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    lines = [line for line in args.input.read_bytes().splitlines() if line.strip()]
    failing = [line for line in lines if orjson.loads(line).get("outcome") != "success"][:10]
    event = {"event_id": "0" * 64, "tool": "t", "failure_mode": "ARGS",
             "evidence": [orjson.loads(line) for line in failing]}
    letters = [DeadLetter(line.decode(), "bad ts") for line in failing]
    parse = per_call(lambda: [orjson.loads(line) for line in failing], args.repeat)
    event_s = per_call(lambda: redact_event(event), args.repeat)
    dead_s = per_call(lambda: [redact_dead_letter(d) for d in letters], args.repeat)
    print(orjson.dumps({
        "load_average": os.getloadavg()[0], "records": len(failing),
        "redact_event_ms": round(event_s * 1e3, 3),
        "redact_dead_letter_ms": round(dead_s / len(letters) * 1e3, 4),
        "event_vs_parse_of_its_records": round(event_s / parse, 1),
        "dead_letter_vs_parse_of_its_line": round(dead_s / parse, 1),
    }, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
