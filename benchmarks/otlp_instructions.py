"""Instructions a span of each step of the OTLP receiver, counted by valgrind.

    python -m benchmarks.otlp_instructions [--bodies N]

On a shared machine timings swing with the neighbours' load; instruction counts do not.
Each step runs under `valgrind --tool=callgrind` twice, over N bodies of 512 spans (the
load generator's, see benchmarks.otlp_bench) and over none; the difference over N*512
is the step's instructions a span, cumulative: decode, + attribute maps, + mapping
(records, not validated), + validation, + redaction (its caches cold: every body is
new), + the JSONL encoding. Needs valgrind (Debian package `valgrind`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from benchmarks.callgrind import added_instructions, require_valgrind

STEPS = ("decode", "attributes", "map", "validate", "redact", "encode")


def run_step(step: str, bodies: int) -> None:
    """The work of `step` over `bodies` bodies (the bodies are built either way)."""
    from benchmarks.otlp_bench import body
    from binloop.core.schema import RecordParser
    from binloop.receiver.redacting import redact_record
    from binloop.receiver.sinks import record_line
    from binloop.replay.otlp import decode_protobuf, map_request

    encoded = [body(1 + i) for i in range(10)]
    redact_record({"args": {"warm": "up"}, "error": "the rules compile once"})
    upto = STEPS.index(step)
    for i in range(bodies):
        request = decode_protobuf(encoded[i % len(encoded)])
        if upto == STEPS.index("attributes"):
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        {kv.key: kv for kv in span.attributes}
        elif upto >= STEPS.index("map"):
            parser = RecordParser()
            redact: Any = redact_record if upto >= STEPS.index("redact") else None
            records = map_request(request, parser, validate=upto >= STEPS.index("validate"),
                                  redact=redact).records
            if upto >= STEPS.index("encode"):
                b"".join(record_line(rec) + b"\n" for rec in records)


HERE = "benchmarks.otlp_instructions"


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if args[:1] == ["step"]:
        run_step(args[1], int(args[2]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bodies", type=int, default=10)
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS),
                        help="count only these steps (default: all)")
    options = parser.parse_args(args)
    require_valgrind()
    spans = options.bodies * 512
    result = {}
    for step in options.steps:
        per_span = added_instructions(HERE, "step", step, options.bodies) / spans
        result[step] = round(per_span)
        print(f"{step:>10}: {per_span:9,.0f} instructions a span (cumulative)", flush=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
