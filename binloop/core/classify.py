"""Failure modes from the error text: one pure, stateless, versioned classifier.

A failure or timeout that arrives without a `failure_mode` (OpenTelemetry spans, the
Hanzo bridge, most frameworks: they record the exception text, not a code) gets one
here, once, in binloop's parse step. Two levels:

* level 1, a code of the paper's taxonomy: TIMEOUT for an `outcome` of timeout (the
  outcome already says what happened); otherwise the ordered rules of `LEVEL1_RULES`
  over the text (the first rule that matches wins; `error.type` is part of the text: the
  OTLP mapper writes it in front of the message), and RUNTIME when none matches (an
  error that names no cause is a fault of the tool's run).
* level 2, the message's *template*: its message line with the variable parts masked
  (quoted values, URLs, e-mail addresses, UUIDs, timestamps and dates, paths, IP
  addresses, hex, words holding a digit, hyphen-joined or not, numbers), so "total
  price is 570, but paid 520" and "total price is 340, but paid 310" share one key. It
  is written as a token the record schema accepts, `[a-z0-9_]{1,40}`: a slug of the
  template's words and 6 hex of the template's sha256 (two templates with the same
  leading words still differ).

No learned state: the same text gives the same mode in every engine, worker, batch and
restart, nothing is evicted, and a cache in front of it is invisible. Any change to the
rules or the masks that can change a mode must bump `CLASSIFIER_VERSION`: it is part of
the detection-configuration digest, so events of another classifier get other ids.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Final

# rules-2: a hyphen-joined word holding a digit (`PT-84201`, `ORD-2024-77`) is one id.
CLASSIFIER_VERSION: Final = "rules-2"

# `--failure-modes`: keep the given mode only, infer every counted record's mode, or
# infer only where none is given (the default).
GIVEN: Final = "given"
INFER: Final = "infer"
GIVEN_ELSE_INFER: Final = "given-else-infer"
FAILURE_MODE_SETTINGS: Final = (GIVEN, INFER, GIVEN_ELSE_INFER)

TOKEN_MAX_CHARS: Final = 40
_HASH_HEX: Final = 6
_SLUG_MAX_CHARS: Final = TOKEN_MAX_CHARS - _HASH_HEX - 1
# Only the start of a message is read: error texts may be whole tracebacks or logs.
TEXT_MAX_CHARS: Final = 4096
TEMPLATE_MAX_CHARS: Final = 512
NO_MESSAGE: Final = "<no message>"


@dataclass(frozen=True, slots=True)
class Classification:
    """What the classifier says about one error text."""

    code: str  # level 1, a taxonomy code
    token: str  # level 2, [a-z0-9_]{1,40}
    template: str  # the masked message the token stands for

    @property
    def failure_mode(self) -> str:
        return f"{self.code}.{self.token}"


def _rule(code: str, *patterns: str) -> tuple[str, str]:
    return code, "|".join(f"(?:{p})" for p in patterns)


def _source(pattern: str, flags: int = 0) -> tuple[str, int]:
    return pattern, flags


# Ordered: the first match wins. The order resolves texts that name two things, e.g.
# "connection timed out" is a TIMEOUT, "bash: jq: command not found" a TOOL_GAP and not
# a NOTFOUND, "invalid api key" a PERM and not an ARGS, "Invalid JSON" a SYNTAX.
# (code, pattern source), matched case-insensitively; compiled on first use.
LEVEL1_RULES: Final[tuple[tuple[str, str], ...]] = (
    _rule("TIMEOUT",
          r"\btime(?:d)?[ _-]?out", r"timeouterror", r"\betimedout\b", r"deadline[ _]exceeded",
          r"took too long", r"time ?limit (?:exceeded|reached)", r"\b(?:http|status)\W{0,3}40[8]\b",
          r"\b504\b", r"execution expired"),
    _rule("TOOL_GAP",
          r"command not found", r"\bno such (?:tool|command|function)\b",
          r"\bunknown (?:tool|command|function)\b",
          r"\btool\b[^.\n]{0,60}\bnot (?:found|available|installed|registered|supported)",
          r"notimplemented(?:error)?", r"not (?:yet )?implemented", r"\bunsupported\b",
          r"not supported", r"\bis not installed\b", r"executable file not found",
          r"no (?:installed |available )?(?:tool|plugin|handler|reader|parser|converter)s? "
          r"(?:for|provides|can|available|found)",
          r"\bno tool\b", r"\bcapabilit(?:y|ies) (?:missing|unavailable)"),
    _rule("PERM",
          r"permission(?:error| denied)?\b", r"\beacces\b", r"\beperm\b", r"\bforbidden\b",
          r"\bunauthori[sz]ed\b", r"\bunauthenticated\b", r"access (?:is )?denied",
          r"not (?:authori[sz]ed|permitted|allowed to access)", r"operation not permitted",
          r"authenticat\w* (?:failed|required|error)", r"\bauth(?:entication)?error\b",
          r"invalid (?:api[ _-]?key|token|credentials?|password|signature)",
          r"(?:token|credentials?|session|certificate)s? (?:has |have )?expired",
          r"expired (?:token|credentials?|session)", r"read-only file ?system", r"\berofs\b",
          r"insufficient (?:permissions?|privileges?|scopes?|rights)", r"missing scopes?",
          r"\b(?:http|status(?: code)?|error|code)\W{0,3}40[13]\b", r"\b40[13] (?:forbidden|"
          r"unauthori[sz]ed)", r"sandbox(?:ed)? (?:blocked|denied|violation)",
          r"\bblocked by (?:policy|sandbox)"),
    _rule("SYNTAX",
          r"syntaxerror", r"syntax error", r"invalid syntax", r"jsondecodeerror",
          r"parse ?error", r"parsing (?:error|failed)", r"(?:could not|cannot|can't|unable to|"
          r"failed to) (?:parse|decode)", r"unexpected (?:token|end of|character|eof|indent)",
          r"unterminated", r"\bmalformed\b", r"invalid (?:json|yaml|xml|toml|escape|character)",
          r"expecting (?:value|property name|',' delimiter|':' delimiter)",
          r"yaml(?:error|\.scanner|\.parser)", r"scannererror", r"indentationerror",
          r"\bunbalanced\b", r"mismatched (?:quotes?|brackets?|parenthes[ie]s)",
          r"unmatched ['\"(\[{]", r"no closing quotation"),
    _rule("NETWORK",
          r"connection (?:refused|reset|aborted|closed|error|failed|lost)", r"connectionerror",
          r"networkerror",
          r"\beconn(?:refused|reset|aborted)\b", r"\benotfound\b", r"\behostunreach\b",
          r"\benetunreach\b", r"network (?:is )?(?:unreachable|error|down)",
          r"name or service not known", r"nodename nor servname", r"getaddrinfo",
          r"temporary failure in name resolution", r"\bdns\b", r"could not resolve host",
          r"ssl(?:error)?\b", r"\btls\b", r"certificate verify failed", r"handshake",
          r"\bproxy\b", r"rate[ _-]?limit", r"too many requests", r"throttl",
          r"\b(?:http|status(?: code)?|error|code)\W{0,3}(?:429|502|503)\b",
          r"bad gateway", r"service (?:temporarily )?unavailable", r"remote end closed",
          r"broken pipe", r"\bsocket\b", r"host unreachable", r"\bno route to host\b",
          r"upstream", r"max retries exceeded"),
    _rule("NOTFOUND",
          r"not[ _]found", r"notfound", r"no such (?:file|directory|key|object|bucket|"
          r"record|user|branch|ref|table|column|resource)", r"does ?n[o']t exist",
          r"\benoent\b", r"no module named", r"\bcannot find\b", r"\bcould not find\b",
          r"\bunable to find\b", r"\bunknown (?:user|id|file|path|branch|record|resource|key|"
          r"reservation|order|account|table|column)\b",
          r"\b(?:http|status(?: code)?|error|code)\W{0,3}(?:404|410)\b", r"\bno (?:results?|"
          r"matches|entries) found\b", r"\bmissing (?:file|module|resource)\b",
          r"did not match any"),
    _rule("CONFLICT",
          r"conflict", r"already (?:exists?|taken|in use|booked|cancell?ed|reserved|locked|"
          r"running|closed)", r"\bduplicate\b", r"not enough", r"\binsufficient\b",
          r"\bnot available\b", r"\bunavailable\b", r"\bno longer available\b", r"sold out",
          r"fully booked", r"\blocked\b", r"\block (?:wait|timeout|held)", r"\bstale\b",
          r"concurrent (?:modification|update|write)", r"version mismatch",
          r"precondition failed", r"\b(?:http|status(?: code)?|error|code)\W{0,3}(?:409|412)\b",
          r"\bin use\b", r"resource busy", r"\bebusy\b", r"non-fast-forward",
          r"rejected.{0,40}fetch first", r"out of stock", r"\bexceeds? (?:the )?(?:balance|"
          r"limit|quota|capacity)", r"\bquota\b"),
    _rule("ARGS",
          r"invalid (?:argument|value|parameter|input|option|request|format|date|type|"
          r"choice|enum)", r"\binvalid\b", r"missing (?:required )?(?:argument|field|parameter|"
          r"property|key|value|option)s?", r"\brequired\b", r"\bmust (?:be|have|not|contain|"
          r"match)\b", r"\bexpected\b.{0,80}\b(?:got|but|received|found)\b",
          r"\bvalueerror\b", r"\bvalidation\b", r"validationerror", r"bad request",
          r"unprocessable", r"\b(?:http|status(?: code)?|error|code)\W{0,3}(?:400|422)\b",
          r"out of (?:range|bounds)", r"too (?:long|short|large|small|many|few)",
          r"not a valid", r"\bunknown (?:field|option|argument|parameter|key|value|format)\b",
          r"unrecognized (?:argument|option|field|parameter)", r"\bunexpected (?:keyword )?"
          r"argument\b", r"does not match", r"\bmismatch\b", r"\bargument\b", r"\bparameter\b",
          r"\bnot allowed\b", r"\bcannot be (?:empty|null|blank|negative)\b"),
)

# Masks, in order: a later mask must not see what an earlier one already replaced
# (quoted values may hold paths and numbers; a UUID holds hex and digits).
_MASKS: Final[tuple[tuple[tuple[str, int], str], ...]] = (
    (_source(r"'[^'\n]{0,200}'|\"[^\"\n]{0,200}\"|`[^`\n]{0,200}`|"
                "\u2018[^\u2019\n]{0,200}\u2019|\u201c[^\u201d\n]{0,200}\u201d"), "<STR>"),
    (_source(r"\b[a-z][a-z0-9+.\-]*://[^\s<>'\"]+", re.IGNORECASE), "<URL>"),
    (_source(r"\b[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+\b"), "<EMAIL>"),
    (_source(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",
                re.IGNORECASE), "<UUID>"),
    (_source(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?"
                r"(?:Z|[+-]\d{2}:?\d{2})?)?\b|\b\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?\b"),
     "<TS>"),
    (_source(r"(?:\b[A-Za-z]:)?(?:~|\.{1,2})?(?:[/\\][\w.\-@+~]+){2,}[/\\]?|"
                r"(?:~|\.{1,2})[/\\][\w.\-@+~/\\]*|\b[\w.\-]+(?:/[\w.\-]+)+"), "<PATH>"),
    (_source(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<IP>"),
    (_source(r"\b0x[0-9a-f]+\b|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b",
                re.IGNORECASE), "<HEX>"),
    (_source(r"\b(?=[\w-]*\d)\w+(?:-\w+)+\b"), "<ID>"),
    (_source(r"\b(?=\w*[A-Za-z_])(?=\w*\d)\w+\b"), "<ID>"),
    (_source(r"[-+]?\b\d+(?:[.,]\d+)*\b"), "<NUM>"),
)
_SPACE: Final = re.compile(r"\s+")
_WORD: Final = re.compile(r"[a-z]+")
_PLACEHOLDER: Final = re.compile(r"<[A-Z]+>")
# Leading words that name the kind of message rather than its content: left out of the
# slug (not of the template, nor of its hash).
_GENERIC_LEAD: Final = frozenset({"error", "exception", "failed", "failure", "fatal", "err"})
_TRACEBACK: Final = "traceback (most recent call last)"


# Compiled on first use, not at import: compiling them was most of the classifier's import
# time, which every command's start-up paid (`binloop --help` among them).
@cache
def _level1_patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((code, re.compile(source, re.IGNORECASE)) for code, source in LEVEL1_RULES)


@cache
def _mask_patterns() -> tuple[tuple[re.Pattern[str], str], ...]:
    return tuple((re.compile(pattern, flags), placeholder)
                 for (pattern, flags), placeholder in _MASKS)


def classify(error: str | None, outcome: str = "failure",
             error_type: str | None = None) -> Classification:
    """The failure mode of one failed or timed-out call from its error text.

    `error_type` (OpenTelemetry's `error.type`, an exception class) is read before the
    text when a caller has it separately; records carry it inside `error`.
    """
    return _classify(error or "", outcome == "timeout", error_type or "")


@lru_cache(maxsize=8192)
def _classify(error: str, timed_out: bool, error_type: str) -> Classification:
    text = error[:TEXT_MAX_CHARS]
    template = message_template(text) if text.strip() else NO_MESSAGE
    return Classification(level1(text, timed_out, error_type), template_token(template),
                          template)


def level1(text: str, timed_out: bool = False, error_type: str = "") -> str:
    """The taxonomy code of an error text (see `LEVEL1_RULES`)."""
    if timed_out:
        return "TIMEOUT"
    for subject in (error_type, text) if error_type else (text,):
        for code, pattern in _level1_patterns():
            if pattern.search(subject):
                return code
    return "RUNTIME"


def message_line(text: str) -> str:
    """The line of a message that says what went wrong: the last line of a Python
    traceback (the exception), else the first non-blank line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    if _TRACEBACK in text.lower():
        return lines[-1]
    return lines[0]


def message_template(text: str) -> str:
    """The message line with its variable parts masked, whitespace collapsed."""
    line = message_line(text)
    for pattern, placeholder in _mask_patterns():
        line = pattern.sub(placeholder, line)
    return _SPACE.sub(" ", line).strip()[:TEMPLATE_MAX_CHARS]


def template_token(template: str) -> str:
    """`[a-z0-9_]{1,40}`: the template's words (slug) and 6 hex of its sha256."""
    words = _WORD.findall(_PLACEHOLDER.sub(" ", template).lower())
    while len(words) > 1 and words[0] in _GENERIC_LEAD:
        words.pop(0)
    slug = ""
    for word in words:
        candidate = f"{slug}_{word}" if slug else word
        if len(candidate) > _SLUG_MAX_CHARS:
            if not slug:
                slug = word[:_SLUG_MAX_CHARS]
            break
        slug = candidate
    digest = hashlib.sha256(template.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_HEX]
    return f"{slug or 'msg'}_{digest}"


def digest_fields(failure_modes: str) -> dict[str, str]:
    """What failure-mode inference adds to the detection-configuration digest: the
    setting, and the classifier's version when it infers anything."""
    if failure_modes == GIVEN:
        return {"failure_modes": GIVEN}
    return {"failure_modes": failure_modes, "classifier": CLASSIFIER_VERSION}
