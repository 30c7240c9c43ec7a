"""Secret redaction for everything that leaves the process or lands in the library.

Evidence records carry the failing call's arguments and error text; either may hold
an API key, a bearer token, a password or a private key. :func:`redact` replaces
them with `[REDACTED]` before a designer sees the evidence (and so before anything is
sent to an LLM provider), and the runner applies it again to the design, generated
files and the audit record. Two mechanisms: values under secret-looking keys, and
well-known secret shapes inside any string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

MASK: Final = "[REDACTED]"

_SECRET_KEY = re.compile(
    r"(?i)(?:^|[_\-.])(?:api[_-]?key|apikey|secret|client[_-]?secret|secret[_-]?key|token|"
    r"access[_-]?token|refresh[_-]?token|auth[_-]?token|id[_-]?token|session[_-]?token|"
    r"password|passwd|pwd|passphrase|pin|authorization|cookie|set[_-]?cookie|private[_-]?key|"
    r"access[_-]?key|credentials?|auth)$")

# Secret shapes: safe to apply to any text, generated code included.
_SHAPES: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    (re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE "
                r"KEY-----|[\s\S]*)"), MASK),
    (re.compile(r"(?i)\b(authorization\s*[:=]\s*)(?:bearer|basic|token|digest)?\s*[^\s,;\"']+"),
     r"\1" + MASK),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{8,}"), r"\1 " + MASK),
    (re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{10,}"), MASK),
    (re.compile(r"\bsk-(?:proj-|svcacct-)?[A-Za-z0-9_\-]{16,}"), MASK),
    (re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{10,}"), MASK),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"), MASK),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"), MASK),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), MASK),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"), MASK),
    (re.compile(r"\b(?:npm_[A-Za-z0-9]{36}|hf_[A-Za-z0-9]{30,}|glpat-[A-Za-z0-9_\-]{20,})"), MASK),
    (re.compile(r"\beyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}"), MASK),
    (re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]*://[^/\s:@]+):[^/\s@]+@"), r"\1:" + MASK + "@"),
)
# `password=...`, `token: ...` in free text (error messages); not applied to code.
_ASSIGNMENTS: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    (re.compile(r"(?i)\b((?:api[_-]?key|access[_-]?key|client[_-]?secret|secret|token|"
                r"password|passwd|pwd)[\"']?\s*[=:]\s*[\"']?)(?!\[REDACTED\])[^\s\"'&,;}]+"),
     r"\1" + MASK),
)


@dataclass
class Redactor:
    """Counts what it replaced, so the audit record can say that it did.

    :meth:`value` is for data (evidence args, errors): secret-looking keys and every
    text pattern. :meth:`document` is for designs and :meth:`code` for generated
    source, where a key called `token` is a schema property or a variable, not a
    secret: only the unmistakable secret shapes are replaced there.
    """

    count: int = 0

    def _apply(self, value: str, patterns: tuple[tuple[re.Pattern[str], str], ...]) -> str:
        for pattern, replacement in patterns:
            value, hits = pattern.subn(replacement, value)
            self.count += hits
        return value

    def text(self, value: str) -> str:
        return self._apply(self._apply(value, _SHAPES), _ASSIGNMENTS)

    def code(self, value: str) -> str:
        return self._apply(value, _SHAPES)

    def value(self, value: Any, key: str | None = None) -> Any:
        if (key is not None and _SECRET_KEY.search(key) and value not in (None, "", MASK)
                and isinstance(value, str | int | float) and not isinstance(value, bool)):
            self.count += 1
            return MASK
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v, str(k)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v, key) for v in value]
        return value

    def document(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.code(value)
        if isinstance(value, dict):
            return {k: self.document(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.document(v) for v in value]
        return value


def redact(value: Any) -> Any:
    """A copy of `value` (any JSON value) with secrets replaced by `[REDACTED]`."""
    return Redactor().value(value)


def redact_text(text: str) -> str:
    return Redactor().text(text)
