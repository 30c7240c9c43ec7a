"""Helpers inlined into every generated Python tool of the offline designer."""

from __future__ import annotations

import copy
import re
from typing import Any

# binloop:body
_NUMBER_SUFFIX = re.compile(r"^(.*?)[_\-]?(\d+)$")
_PATH_TOKEN = re.compile(r"[^.\[\]]+|\[\d+\]")


def leaves(value: Any, generic: str = "", concrete: str = "") -> list[tuple[str, str, Any]]:
    """(generic path, concrete path, value) of every scalar inside `value`."""
    out: list[tuple[str, str, Any]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            out.extend(leaves(item, f"{generic}.{key}" if generic else str(key),
                              f"{concrete}.{key}" if concrete else str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out.extend(leaves(item, f"{generic}[]", f"{concrete}[{index}]"))
    else:
        out.append((generic, concrete, value))
    return out


def values_at(args: Any, generic_path: str) -> list[tuple[str, Any]]:
    """(concrete path, value) of the scalars at a generic path like `a[].b`."""
    return [(c, v) for g, c, v in leaves(args) if g == generic_path]


def set_at(args: dict[str, Any], concrete_path: str, value: Any) -> dict[str, Any]:
    """A copy of `args` with the value at a concrete path like `a[0].b` replaced."""
    result = copy.deepcopy(args)
    tokens = _PATH_TOKEN.findall(concrete_path)
    node: Any = result
    for token in tokens[:-1]:
        node = node[int(token[1:-1])] if token.startswith("[") else node[token]
    last = tokens[-1]
    if last.startswith("["):
        node[int(last[1:-1])] = value
    else:
        node[last] = value
    return result


def kind_of(text: str) -> str:
    """The kind of an identifier: `certificate_7504069` -> `certificate`, `HAT229` -> `hat`."""
    match = _NUMBER_SUFFIX.match(text)
    return match.group(1).lower() if match and match.group(1) else ""


def normalize(message: str) -> str:
    """An error message without its variable parts (quoted text and numbers)."""
    text = re.sub(r"^\s*error:\s*", "", message.lower())
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "?", text)
    text = re.sub(r"\d+(?:\.\d+)?", "#", text)
    return re.sub(r"\s+", " ", text).strip()


def distance(a: str, b: str) -> int:
    """Levenshtein distance."""
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i]
        for j, char_b in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1,
                               previous[j - 1] + (char_a != char_b)))
        previous = current
    return previous[-1]


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
