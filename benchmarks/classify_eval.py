"""How inferred failure modes compare with given ones on real telemetry.

    python -m benchmarks.classify_eval --input FILE --name NAME [--out DIR]

The input holds records with a `failure_mode` assigned by someone else (tau-bench's
converter; a second dataset's labels). The modes are removed and inferred from the
error texts (binloop.core.classify, `--failure-modes infer`), then:

- level 1: how often the inferred code equals the given one, with the confusion table;
- level 2: whether the records the given modes put together are put together by the
  templates (pairwise precision/recall of the two groupings, within a tool);
- BINEvents for each theta (session and global windows): the keys fired compared on
  (tool, level-1 code) — same, extra (inferred only), missing (given only) — and, on
  the evidence, which records end up in a fired key in both runs, in one only, and
  whether the evidence of each event of one run is exactly that of an event of the other.

Writes `<name>.json` and `<name>.md` into DIR (default benchmarks/results/classify).
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from binloop.core.classify import CLASSIFIER_VERSION
from binloop.core.detection import DetectionParams, detect
from binloop.core.schema import RecordLimits, RecordParser, ToolInvocation
from binloop.core.window import WindowSpec

THETAS = (2, 3, 4)
WINDOWS = ("session", "global")
FAILED = ("failure", "timeout")


def load(path: Path) -> tuple[list[ToolInvocation], list[ToolInvocation]]:
    """(records with their given modes, the same records with modes inferred)."""
    given_parser = RecordParser(RecordLimits(max_future_skew_ms=None))
    infer_parser = RecordParser(RecordLimits(max_future_skew_ms=None, failure_modes="infer"))
    given, inferred = [], []
    for line in path.read_bytes().splitlines():
        if not line.strip():
            continue
        given.append(given_parser.parse(line))
        inferred.append(infer_parser.parse(line))
    return given, inferred


def _code(mode: str | None) -> str | None:
    return None if mode is None else mode.split(".", 1)[0]


def level1(given: list[ToolInvocation], inferred: list[ToolInvocation]) -> dict[str, Any]:
    pairs = [(_code(g["failure_mode"]), _code(i["failure_mode"]))
             for g, i in zip(given, inferred, strict=True)
             if g["outcome"] in FAILED and g["failure_mode"] is not None]
    agree = sum(1 for g, i in pairs if g == i)
    confusion = Counter(f"{g} -> {i}" for g, i in pairs)
    return {"labelled_failures": len(pairs), "agree": agree,
            "agreement": round(agree / len(pairs), 4) if pairs else None,
            "confusion": dict(confusion.most_common())}


def _together(records: Iterable[tuple[str, str, str]]) -> set[tuple[str, str]]:
    """Pairs of record ids that share a key (tool, mode)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for rid, tool, mode in records:
        groups.setdefault((tool, mode), []).append(rid)
    return {tuple(sorted(p)) for ids in groups.values()  # type: ignore[misc]
            for p in itertools.combinations(ids, 2)}


def level2(given: list[ToolInvocation], inferred: list[ToolInvocation]) -> dict[str, Any]:
    rows = [(g, i) for g, i in zip(given, inferred, strict=True)
            if g["outcome"] in FAILED and g["failure_mode"] is not None]
    by_given = _together((g["id"], g["tool"], g["failure_mode"] or "") for g, _ in rows)
    by_inferred = _together((i["id"], i["tool"], i["failure_mode"] or "") for _, i in rows)
    both = len(by_given & by_inferred)
    return {
        "given_keys": len({(g["tool"], g["failure_mode"]) for g, _ in rows}),
        "inferred_keys": len({(i["tool"], i["failure_mode"]) for _, i in rows}),
        "pair_precision": round(both / len(by_inferred), 4) if by_inferred else None,
        "pair_recall": round(both / len(by_given), 4) if by_given else None,
        "templates": sorted({f"{i['tool']}: {i.get('error_template', '')}" for _, i in rows}),
    }


def compare_events(given: list[ToolInvocation], inferred: list[ToolInvocation],
                   theta: int, window: str) -> dict[str, Any]:
    params = DetectionParams(theta=theta, window=WindowSpec.parse(window))
    ours, theirs = detect(params, inferred), detect(params, given)
    keys_inf = {(e["tool"], _code(e["failure_mode"])) for e in ours}
    keys_giv = {(e["tool"], _code(e["failure_mode"])) for e in theirs}
    ev_inf = [frozenset(r["id"] for r in e["evidence"]) for e in ours]
    ev_giv = [frozenset(r["id"] for r in e["evidence"]) for e in theirs]
    rec_inf = set().union(*ev_inf) if ev_inf else set()
    rec_giv = set().union(*ev_giv) if ev_giv else set()
    return {
        "theta": theta, "window": window,
        "events_given": len(theirs), "events_inferred": len(ours),
        "keys_same": sorted(map(list, keys_inf & keys_giv)),
        "keys_extra": sorted(map(list, keys_inf - keys_giv)),
        "keys_missing": sorted(map(list, keys_giv - keys_inf)),
        "events_same_evidence": sum(1 for e in ev_giv if e in ev_inf),
        "evidence_records_both": len(rec_inf & rec_giv),
        "evidence_records_extra": len(rec_inf - rec_giv),
        "evidence_records_missing": len(rec_giv - rec_inf),
    }


def evaluate(path: Path, name: str) -> dict[str, Any]:
    given, inferred = load(path)
    return {
        "dataset": name, "input": str(path), "classifier": CLASSIFIER_VERSION,
        "records": len(given),
        "failures": sum(1 for r in given if r["outcome"] in FAILED),
        "level1": level1(given, inferred),
        "level2": level2(given, inferred),
        "events": [compare_events(given, inferred, t, w) for w in WINDOWS for t in THETAS],
    }


def markdown(result: dict[str, Any]) -> str:
    l1, l2 = result["level1"], result["level2"]
    lines = [
        f"# Inferred vs given failure modes: {result['dataset']}",
        "",
        f"classifier `{result['classifier']}`; {result['records']} records, "
        f"{result['failures']} failures/timeouts, {l1['labelled_failures']} with a given mode.",
        "",
        f"**Level 1**: {l1['agree']}/{l1['labelled_failures']} agree "
        f"({l1['agreement']:.1%})." if l1["agreement"] is not None else "**Level 1**: -",
        "",
        "| given -> inferred | records |", "|---|---|",
        *(f"| {k} | {v} |" for k, v in l1["confusion"].items()),
        "",
        f"**Level 2**: {l2['given_keys']} given keys, {l2['inferred_keys']} inferred keys; "
        f"pairs of records that share a given key and share an inferred one: recall "
        f"{l2['pair_recall']}, precision {l2['pair_precision']}.",
        "",
        "| window | θ | events given | events inferred | (tool, level 1) same / extra / "
        "missing | events with the same evidence | evidence records both / extra / missing |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in result["events"]:
        lines.append(
            f"| {e['window']} | {e['theta']} | {e['events_given']} | {e['events_inferred']} | "
            f"{len(e['keys_same'])} / {len(e['keys_extra'])} / {len(e['keys_missing'])} | "
            f"{e['events_same_evidence']} | {e['evidence_records_both']} / "
            f"{e['evidence_records_extra']} / {e['evidence_records_missing']} |")
    lines += ["", "Keys (θ=3, session window):", ""]
    third = next(e for e in result["events"] if e["theta"] == 3 and e["window"] == "session")
    for label in ("same", "extra", "missing"):
        shown = ", ".join(f"{t}/{c}" for t, c in third[f"keys_{label}"]) or "-"
        lines.append(f"- {label}: {shown}")
    lines += ["", "Templates (tool: template):", "",
              *(f"- `{t}`" for t in l2["templates"][:40])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, type=Path)
    parser.add_argument("--name", required=True)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/classify"))
    args = parser.parse_args(argv)
    result = evaluate(args.input, args.name)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    (args.out / f"{args.name}.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["evaluate", "json", "main"]
