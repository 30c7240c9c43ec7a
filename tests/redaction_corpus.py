"""The redaction corpus (tests/data/redaction_corpus.json) as telemetry, and checks
that an output holds none of its secrets and all of its ordinary values."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

import orjson

from pipeline_runner.designers.offline import OfflineDesigner

CORPUS_PATH = Path(__file__).parent / "data" / "redaction_corpus.json"
T0 = 1_700_000_000_000
TOOL, MODE = "book_reservation", "ARGS.payment_total_mismatch"
SPY_ENV = "BINLOOP_TEST_DESIGNER_INPUT"


@cache
def corpus() -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(CORPUS_PATH.read_bytes())
    return data


def strings_in(value: object) -> list[str]:
    """Every string of a JSON value, its keys included, in order."""
    found: list[str] = []

    def walk(item: object) -> None:
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            for key, inner in item.items():
                found.append(str(key))
                walk(inner)
        elif isinstance(item, list):
            for inner in item:
                walk(inner)

    walk(value)
    return found


def secrets() -> list[dict[str, Any]]:
    return list(corpus()["secrets"])


def secret_values() -> list[bytes]:
    return [str(form["secret"]).encode() for form in secrets()]


def ordinary_args() -> dict[str, Any]:
    """Every ordinary value under its own key (its `key`, else its id)."""
    return {form.get("key", f"ordinary_{number}"): form["value"]
            for number, form in enumerate(corpus()["ordinary"])}


def failing_records(parts: int = 3) -> list[dict[str, Any]]:
    """`parts` failures of one key that together carry every secret form; each also
    carries the real arguments of a payment mismatch and every ordinary value."""
    records = []
    for part in range(parts):
        forms = secrets()[part::parts]
        args: dict[str, Any] = {
            "user_id": "mia_li_3668", "flight_number": "HAT001",
            "payment_methods": [{"payment_id": "gift_card_1", "amount": 10}],
            **ordinary_args()}
        notes, errors = [], []
        for form in forms:
            args.update(form.get("args", {}))
            if "arg_text" in form:
                notes.append(form["arg_text"])
            if "error" in form:
                errors.append(form["error"])
        args["note"] = " | ".join(notes)
        error = ("Error: payment amount does not add up, total price is 20, but paid 10. "
                 + " | ".join(errors))
        records.append({"session_id": 1, "ts": T0 + part * 1000, "tool": TOOL, "args": args,
                        "outcome": "failure", "failure_mode": MODE, "error": error})
    return records


def invalid_lines() -> list[bytes]:
    """Rejected inputs that quote secrets: bad JSON, a bad field, a wrong type."""
    texts = [form.get("error") or form.get("arg_text") for form in secrets()]
    lines = [orjson.dumps({"session_id": 2, "ts": "not-a-number", "tool": "x",
                           "args": form.get("args", {"q": text}), "outcome": "failure",
                           "failure_mode": MODE, "error": text})
             for form, text in zip(secrets(), texts, strict=True)]
    lines.append(b'{"broken json ' + b" ".join(t.encode() for t in texts if t and "\n" not in t))
    lines.append(orjson.dumps({"session_id": "ghp_" + "A1b2C3d4E5" * 4, "ts": T0, "tool": "x",
                               "args": [1], "outcome": "failure"}))
    return lines


def telemetry_lines() -> list[bytes]:
    return [orjson.dumps(r) for r in failing_records()] + invalid_lines()


def leaks(data: bytes) -> list[bytes]:
    """The corpus secrets found in `data` (also JSON-escaped: a PEM's newlines)."""
    found = []
    for value in secret_values():
        escaped = orjson.dumps(value.decode())[1:-1]
        if value in data or escaped in data:
            found.append(value)
    return found


def kept_ordinary(data: bytes) -> list[str]:
    """The ordinary values missing from `data` (empty when evidence kept them all)."""
    missing = []
    for form in corpus()["ordinary"]:
        value = form["value"]
        encoded = orjson.dumps(value)
        if encoded not in data:
            missing.append(form["id"])
    return missing


def files_under(root: Path) -> list[Path]:
    return [p for p in sorted(root.rglob("*")) if p.is_file()]


class SpyDesigner(OfflineDesigner):
    """The offline designer, writing what it was given to `$BINLOOP_TEST_DESIGNER_INPUT`
    (what an LLM provider would have received)."""

    name = "spy"

    def design(self, event: Any, manifest: Any) -> Any:
        with open(os.environ[SPY_ENV], "ab") as sink:
            sink.write(orjson.dumps({"event": event, "manifest": manifest}) + b"\n")
        return super().design(event, manifest)


def spy_factory(config: Any = None) -> SpyDesigner:
    return SpyDesigner()
