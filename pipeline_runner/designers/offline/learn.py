"""What the offline designer reads off the evidence: paths, kinds, numbers, schemas."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

from pipeline_runner.designers.offline.templates._common import kind_of, leaves, normalize

STOPWORDS: Final = frozenset((
    "error", "the", "and", "for", "not", "was", "were", "with", "this", "that", "from", "into",
    "have", "has", "been", "does", "did", "cannot", "can", "could", "would", "should", "must",
    "may", "might", "any", "all", "use", "used", "using", "found", "exist", "exists",
    "available", "enough", "invalid", "unknown", "failed", "failure", "please", "try", "again",
    "value", "values",
))
_WORD = re.compile(r"[a-z][a-z0-9]+")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def string_leaves(args: Any) -> list[tuple[str, str, str]]:
    return [(g, c, v) for g, c, v in leaves(args) if isinstance(v, str) and g]


def words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower().replace("_", " ")) if w not in STOPWORDS}


def mentioned_paths(args: Any, error: str) -> list[str]:
    """Generic paths whose string value the error message quotes."""
    lowered = error.lower()
    return _unique(g for g, _, v in string_leaves(args) if len(v) >= 3 and v.lower() in lowered)


def kind_paths(args: Any, error: str) -> list[tuple[str, str]]:
    """(generic path, kind) of values whose kind (e.g. `gift_card`) the error names."""
    text = " " + " ".join(_WORD.findall(error.lower().replace("_", " "))) + " "
    found: list[tuple[str, str]] = []
    for generic, _, value in string_leaves(args):
        kind = kind_of(value)
        spoken = " ".join(_WORD.findall(kind.replace("_", " ")))
        if len(spoken) >= 3 and f" {spoken} " in text and (generic, kind) not in found:
            found.append((generic, kind))
    return found


def noun_paths(args: Any, error: str) -> list[str]:
    """Generic paths of string values whose path names share a word with the error."""
    error_words = words(error) - {"id", "ids"}
    found = []
    for generic, _, _ in string_leaves(args):
        path_words = words(re.sub(r"\[\]", " ", generic).replace(".", " ")) - {"id", "ids"}
        if path_words & error_words:
            found.append(generic)
    return _unique(found)


def numbers(text: str) -> list[float]:
    return [float(n) for n in _NUMBER.findall(text)]


def signatures(errors: Iterable[str]) -> list[str]:
    return _unique(normalize(e) for e in errors if e)


def infer_schema(values: list[Any]) -> dict[str, Any]:
    """A loose JSON Schema that every value in `values` satisfies."""
    present = [v for v in values if v is not None]
    if not present:
        return {}
    if all(isinstance(v, dict) for v in present):
        keys = _unique(k for v in present for k in v)
        return {"type": "object",
                "properties": {k: infer_schema([v.get(k) for v in present]) for k in keys}}
    if all(isinstance(v, list) for v in present):
        items = [item for v in present for item in v]
        return {"type": "array", "items": infer_schema(items)} if items else {"type": "array"}
    if all(isinstance(v, bool) for v in present):
        return {"type": "boolean"}
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return {"type": "number"}
    if all(isinstance(v, str) for v in present):
        return {"type": "string"}
    return {}


def loosen(schema: dict[str, Any]) -> dict[str, Any]:
    """An object schema naming the known keys without constraining their values: the
    input of a checker must accept exactly the wrong values it is there to catch."""
    names = schema.get("properties", {}) if schema.get("type") == "object" else {}
    return {"type": "object", "properties": {key: {} for key in names}}


def bump_identifier(value: str, step: int = 1) -> str:
    """Another identifier of the same kind: the numeric suffix moved by `step`."""
    match = re.match(r"^(.*?)(\d+)$", value)
    if not match:
        return f"{value}_{step}"
    digits = match.group(2)
    return match.group(1) + str(int(digits) + step).zfill(len(digits))


def _unique(items: Iterable[Any]) -> list[Any]:
    seen: list[Any] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen
