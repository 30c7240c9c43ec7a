"""Acceptance cases must reproduce the evidence they were designed from.

Checked by the runner on the design, against the (redacted) event the designer saw:

* every case names, in `reproduces`, one of the event's evidence ids;
* its first step starts from that record's real arguments (after redaction): they are
  the step's params, or its params' `args`, possibly with keys added (a case may add
  an input such as `known` or `wait_ms`, or a probe flag) but none changed or dropped;
  later steps may go on from the tool's own output (`$prev.<key>`);
* every distinct evidence record (distinct by its arguments) is reproduced by a case.

A design that fails this is an invalid design (a clean rollback). What this proves and
what it cannot is in docs/sandbox.md.
"""

from __future__ import annotations

from typing import Any

from binloop.core.events import BINEvent
from pipeline_runner.design import Design, InvalidDesign


def starts_from(params: Any, args: Any) -> bool:
    """Whether step params carry `args` (as a whole, or under `args`), keys only added."""
    if not isinstance(params, dict) or not isinstance(args, dict):
        return False
    candidates = [params]
    if isinstance(params.get("args"), dict):
        candidates.append(params["args"])
    return any(all(key in c and c[key] == value for key, value in args.items())
               for c in candidates)


def check_reproduction(design: Design, event: BINEvent) -> None:
    """Raise :class:`InvalidDesign` unless the cases reproduce the event's evidence."""
    records = {rec["id"]: rec for rec in event["evidence"]}
    covered: list[Any] = []
    for case in design.acceptance:
        if not case.reproduces:
            raise InvalidDesign(f"case {case.name!r} names no evidence record it reproduces")
        record = records.get(case.reproduces)
        if record is None:
            raise InvalidDesign(f"case {case.name!r} reproduces {case.reproduces[:80]!r}, "
                                "which is not an evidence record of this event")
        if not starts_from(case.steps[0].params, record["args"]):
            raise InvalidDesign(f"case {case.name!r} does not start from the arguments of "
                                f"evidence record {record['id'][:16]}")
        covered.append(record["args"])
    for rec in event["evidence"]:
        if rec["args"] not in covered:
            raise InvalidDesign(f"no acceptance case reproduces evidence record "
                                f"{rec['id'][:16]} (args {str(rec['args'])[:120]})")
