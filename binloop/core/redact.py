"""The one secret redactor: evidence, dead letters, designs, generated code, logs.

Every output that can carry telemetry text goes through here before it is written or
sent: the events file, `BIN_EVENTS` and the build queue (`binloop.core.events.dumps_event`),
dead letters (:func:`redact_dead_letter`), the designer's input and the audit record
(`pipeline_runner.event_input.for_design`), the library (designs and generated files)
and log lines (:class:`RedactingFilter`). The rules are data,
`binloop/core/redaction_rules.json` (shipped in the package), so that the Hanzo
bridge plugin applies the very same ones; docs/redaction.md says what they catch and
what they cannot.

Four mechanisms, all replacing with `[REDACTED]`:

1. key names: a value under a key whose words (camelCase, snake, kebab, dots, any case)
   name a secret — every scalar under it (containers included) is masked;
2. text rules: known key shapes and PEM blocks (`scope: any`, safe on source code too),
   and free-text patterns (`scope: text`): `KEY=value` with a secret name, `-u user:pw`,
   `Authorization:`/`Cookie:` headers, `Bearer x`, `password is x`;
3. high entropy: long mixed-case alphanumeric tokens, only inside a record's `args`
   values and `error` text (and a dead letter's text) — never ids, which dedup and
   `reproduces` need;
4. nothing else: record ids, event ids, tools, failure modes, session and agent ids
   are identifiers and are never changed.

It runs on the evidence of fired events, on dead letters and on every record of the
OTLP receiver, so its miss path (a text with no secret: nearly all of them) is cheap:
a gate absent from a text rules out a group of needles at once, the key-name rules
run only where the text's letters hold a secret word, no entropy scan of a text too
short for a token, and texts and keys proven innocent lately are skipped by a set
lookup (bounded). Each shortcut only skips work whose result is known:
tests/test_redact_fast_path.py compares the redactor with the plain rules.
"""

from __future__ import annotations

import itertools
import logging
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import orjson

if TYPE_CHECKING:
    from binloop.core.schema import DeadLetter, ToolInvocation

# A BINEvent (binloop.core.events encodes through this module, so it is not imported).
Event = TypeVar("Event", bound=Mapping[str, Any])

RULES_PATH: Final = Path(__file__).with_name("redaction_rules.json")
MASK: Final = "[REDACTED]"


@dataclass(frozen=True)
class TextRule:
    """One text rule of the rules file, compiled."""

    id: str
    pattern: re.Pattern[str]
    secret_group: int
    key_group: int | None
    in_code: bool
    # The rule can match only a text holding one of these (lower-case if `folded`).
    needles: frozenset[str]
    folded: bool


@dataclass(frozen=True)
class Rules:
    """The redaction rules, loaded and compiled once (`rules()`)."""

    word: re.Pattern[str]
    secret_words: frozenset[str]
    secret_phrases: frozenset[tuple[str, str]]
    not_secret_last: frozenset[str]
    text: tuple[TextRule, ...]
    needles: tuple[str, ...]
    folded_needles: tuple[str, ...]
    entropy_token: re.Pattern[str]
    # The token pattern matches nothing shorter (checked when the rules load): a shorter
    # text needs no entropy scan.
    entropy_min_chars: int
    entropy_bits: float
    entropy_skip_prefixes: tuple[str, ...]
    entropy_exempt: tuple[re.Pattern[str], ...]
    entropy_exempt_within: tuple[re.Pattern[str], ...]
    # Finds, in a text's letters and digits (lower-cased, all else removed), every secret
    # word and phrase: where it finds none, no key in the text is a secret key, and the
    # key-name text rules cannot mask anything. None for another word pattern.
    secret_in_squashed: re.Pattern[bytes] | None
    # The rules (positions in `text`) that have no needle: they can match any text.
    rules_without_needles: tuple[int, ...]
    # Which rules can match a text holding a needle, as gates: (gate, ((needle, rule
    # positions), ...)), the gate a substring of each of its needles, so that a text
    # without the gate holds none of them (one `in` rules out a whole group).
    # Case-sensitive needles, then lower-case ones.
    gated_needles: tuple[Gate, ...]
    gated_folded_needles: tuple[Gate, ...]
    # The same groups by their gate character, for a short text, whose few distinct
    # characters one set intersection finds: only the groups of those are looked at.
    needles_by_char: Mapping[str, Group]
    folded_needles_by_char: Mapping[str, Group]
    needle_chars: frozenset[str]
    folded_needle_chars: frozenset[str]


Group = tuple[tuple[str, tuple[int, ...]], ...]  # (needle, rule positions), ...
Gate = tuple[str, Group]


# The word pattern for which a key's words, joined, are exactly its letters and digits
# lower-cased (what makes `secret_in_squashed` sound).
_ALNUM_WORDS: Final = "[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+"


def _flags(letters: str) -> int:
    flags = re.ASCII
    if "i" in letters:
        flags |= re.IGNORECASE
    if "m" in letters:
        flags |= re.MULTILINE
    return flags


@cache
def rules() -> Rules:
    """The rule set, compiled once from the shipped JSON file."""
    data = orjson.loads(RULES_PATH.read_bytes())
    if data["mask"] != MASK:
        raise ValueError(f"{RULES_PATH}: mask must be {MASK!r}")
    keys, entropy = data["keys"], data["entropy"]
    text = tuple(TextRule(r["id"], re.compile(r["pattern"], _flags(r["flags"])),
                          r["secret_group"], r.get("key_group"), r["scope"] == "any",
                          frozenset(r.get("needles", ())), "i" in r["flags"])
                 for r in data["text_rules"])
    by_needle = _rules_by_needle(text, folded=False)
    by_folded_needle = _rules_by_needle(text, folded=True)
    return Rules(
        word=re.compile(keys["word_pattern"], re.ASCII),
        secret_words=frozenset(keys["secret_words"]),
        secret_phrases=frozenset((a, b) for a, b in keys["secret_phrases"]),
        not_secret_last=frozenset(keys["not_secret_last_words"]), text=text,
        needles=tuple(sorted({n for r in text if not r.folded for n in r.needles})),
        folded_needles=tuple(sorted({n for r in text if r.folded for n in r.needles})),
        entropy_token=_entropy_token(entropy),
        entropy_min_chars=int(entropy["min_length"]),
        entropy_bits=float(entropy["min_bits_per_char"]),
        entropy_skip_prefixes=tuple(entropy["skip_if_starts_with"]),
        entropy_exempt=tuple(re.compile(p, re.ASCII) for p in entropy["exempt_patterns"]),
        entropy_exempt_within=tuple(re.compile(p, re.ASCII)
                                    for p in entropy["exempt_if_contains"]),
        secret_in_squashed=_secret_in_squashed(keys),
        rules_without_needles=tuple(i for i, r in enumerate(text) if not r.needles),
        gated_needles=_gates(by_needle), gated_folded_needles=_gates(by_folded_needle),
        needles_by_char=_by_gate_char(by_needle),
        folded_needles_by_char=_by_gate_char(by_folded_needle),
        needle_chars=frozenset(_by_gate_char(by_needle)),
        folded_needle_chars=frozenset(_by_gate_char(by_folded_needle)))


def _entropy_token(entropy: dict[str, Any]) -> re.Pattern[str]:
    pattern = re.compile(entropy["token_pattern"], re.ASCII)
    shortest = int(entropy["min_length"])
    # The length shortcut is sound only if no shorter text can hold a token; the
    # pattern's own minimum width says so (tests/test_redact_fast_path.py checks both).
    if _min_width(pattern) < shortest:
        raise ValueError(f"{RULES_PATH}: entropy.min_length {shortest} exceeds the "
                         "token pattern's shortest match")
    return pattern


def _min_width(pattern: re.Pattern[str]) -> int:
    """The length of the shortest text `pattern` can match (0 when unknown)."""
    try:
        from re import _parser  # type: ignore[attr-defined]  # Python >= 3.11
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_parse as _parser
    width: int = _parser.parse(pattern.pattern, pattern.flags).getwidth()[0]
    return width


# Characters from rarest to commonest in telemetry text: a needle's gate is its rarest
# character (only the speed depends on this order, never the result).
_GATE_ORDER: Final = ("=:_./-\\@#$%^&*~|0123456789JQXZVKWYBGFPUHDMLCNRTIOSEA"
                      "jqxzvkwybgfp\t hdmulcnrtioesa\n")


def _by_gate_char(by_needle: dict[str, tuple[int, ...]]) -> dict[str, Group]:
    """The needles grouped by their rarest character."""
    groups: dict[str, list[tuple[str, tuple[int, ...]]]] = {}
    for needle, positions in sorted(by_needle.items()):
        gate = min(needle, key=lambda c: _GATE_ORDER.find(c) % (len(_GATE_ORDER) + 1))
        groups.setdefault(gate, []).append((needle, positions))
    return {gate: tuple(members) for gate, members in sorted(groups.items())}


def _gates(by_needle: dict[str, tuple[int, ...]]) -> tuple[Gate, ...]:
    # A gate of one needle is the needle itself: one `in` instead of two.
    return tuple((members[0][0] if len(members) == 1 else gate, members)
                 for gate, members in _by_gate_char(by_needle).items())


def _rules_by_needle(text: tuple[TextRule, ...], folded: bool) -> dict[str, tuple[int, ...]]:
    found: dict[str, list[int]] = {}
    for position, rule in enumerate(text):
        if rule.folded == folded:
            for needle in rule.needles:
                found.setdefault(needle, []).append(position)
    return {needle: tuple(positions) for needle, positions in found.items()}


def _secret_in_squashed(keys: dict[str, Any]) -> re.Pattern[bytes] | None:
    if keys["word_pattern"] != _ALNUM_WORDS:
        return None
    found = set(keys["secret_words"]) | {a + b for a, b in keys["secret_phrases"]}
    return re.compile(_trie_pattern(found).encode("ascii"))


def _trie_pattern(words: set[str]) -> str:
    """A pattern matching exactly the words, written as a trie (`pass|passwd` ->
    `pass(?:wd)?`): at each position of a text the regex engine then tries the words
    sharing its first letter, not every word (an alternation of 40 words was the cost
    of the prefilter)."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}  # a word ends here

    def branches(node: dict[str, Any]) -> str:
        parts = [re.escape(char) + branches(child) for char, child in sorted(node.items())
                 if char]
        if not parts:
            return ""
        inner = parts[0] if len(parts) == 1 and "" not in node else f"(?:{'|'.join(parts)})"
        return inner + "?" if "" in node else inner

    return branches(trie)


def may_name_a_secret(text: str) -> bool:
    """False only when no key in `text` can be a secret key (see `is_secret_key`): a
    secret key's words hold a secret word or phrase, and its words joined are its letters
    and digits, a run of the text's letters and digits."""
    pattern = rules().secret_in_squashed
    return pattern is None or pattern.search(squashed(text)) is not None


# ASCII letters lower-cased, digits kept, every other byte deleted.
_SQUASH_TABLE: Final = bytes(range(256)).lower()
_SQUASH_DELETE: Final = bytes(c for c in range(256) if not chr(c).isascii()
                              or not chr(c).isalnum())


def squashed(text: str) -> bytes:
    """The ASCII letters (lower-cased) and digits of `text`, all else removed, as bytes
    (UTF-8 writes every other character as bytes >= 0x80, which are deleted; lone
    surrogates too): one C pass, where a regex substitution was the prefilter's cost."""
    return text.encode("utf-8", "surrogatepass").translate(_SQUASH_TABLE, _SQUASH_DELETE)


def key_words(key: str) -> list[str]:
    """The lower-case words of a key: `awsSecretAccessKey` -> aws, secret, access, key."""
    return [w.lower() for w in rules().word.findall(key)]


# Keys come from telemetry: a bounded cache, so that hostile input cannot grow it.
@lru_cache(maxsize=8192)
def is_secret_key(key: str) -> bool:
    """Whether values under `key` are secrets (see the module docstring)."""
    ruleset = rules()
    if not may_name_a_secret(key):
        return False  # no secret word or phrase among its words (most keys: one search)
    words = key_words(key)
    if not words or words[-1] in ruleset.not_secret_last:
        return False
    if "".join(words) in ruleset.secret_words or not ruleset.secret_words.isdisjoint(words):
        return True
    return not ruleset.secret_phrases.isdisjoint(itertools.pairwise(words))


def shannon_bits(token: str) -> float:
    """Shannon entropy of the characters of `token`, in bits per character."""
    counts = Counter(token)
    size = len(token)
    return -sum(n / size * math.log2(n / size) for n in counts.values())


def is_high_entropy(token: str) -> bool:
    ruleset = rules()
    if token.startswith(ruleset.entropy_skip_prefixes):
        return False
    if not (any(c.islower() for c in token) and any(c.isupper() for c in token)
            and any(c.isdigit() for c in token)):
        return False
    if any(p.fullmatch(token) for p in ruleset.entropy_exempt) or any(
            p.search(token) for p in ruleset.entropy_exempt_within):
        return False
    return shannon_bits(token) >= ruleset.entropy_bits


@dataclass
class Redactor:
    """Counts what it replaced, so the audit record can say that it did.

    :meth:`value` is for data (evidence args, errors): secret-looking keys and every
    text rule. :meth:`document` is for designs and :meth:`code` for generated source,
    where a key called `token` is a schema property or a variable, not a secret: only
    the unmistakable secret shapes are replaced there.
    """

    count: int = 0

    def _apply(self, text: str, code: bool) -> str:
        ruleset = rules()
        lower = text.lower()
        # The rules that can match: those with a needle in the text, and those without
        # needles, in the rule set's order (one rule's masks are the next one's input).
        # A gate absent from the text rules out every needle behind it (the miss path:
        # most texts hold no needle, or only `-`, `:`, `=`).
        if len(text) <= _SHORT_TEXT_CHARS:
            by_char, by_folded_char = ruleset.needles_by_char, ruleset.folded_needles_by_char
            found = [positions for char in ruleset.needle_chars.intersection(text)
                     for needle, positions in by_char[char] if needle in text]
            found += [positions for char in ruleset.folded_needle_chars.intersection(lower)
                      for needle, positions in by_folded_char[char] if needle in lower]
        else:
            found = [positions for gate, group in ruleset.gated_needles if gate in text
                     for needle, positions in group if needle in text]
            found += [positions for gate, group in ruleset.gated_folded_needles
                      if gate in lower for needle, positions in group if needle in lower]
        if not found and not ruleset.rules_without_needles:
            return text
        keyed: bool | None = None  # whether a key-name rule can mask (None: not judged)
        for position in sorted(set(ruleset.rules_without_needles).union(*found)):
            rule = ruleset.text[position]
            if code and not rule.in_code:
                continue
            if rule.key_group is not None:
                if keyed is None:
                    keyed = may_name_a_secret(text)
                if not keyed:
                    continue
            # Masking only removes text, and MASK adds no needle a rule needs: the
            # needles found in the original text stay a superset.
            before = self.count
            text = self._apply_rule(rule, text)
            if self.count != before:
                keyed = None  # the text changed: judged again
        return text

    def _apply_rule(self, rule: TextRule, text: str) -> str:
        """Mask the union of the secret spans of every accepted match of `rule`
        (a value may sit in a lookahead, so that a non-secret `key=` does not hide
        the secret `KEY=` that follows it)."""
        spans: list[tuple[int, int]] = []
        for match in rule.pattern.finditer(text):
            if rule.key_group is not None and not is_secret_key(match.group(rule.key_group)):
                continue
            start, end = match.span(rule.secret_group)
            if start < end:
                spans.append((start, end))
        if not spans:
            return text
        out, done = [], 0
        for start, end in sorted(spans):
            if end <= done:
                continue
            if start >= done:
                out.append(text[done:start])
                self.count += 1
                out.append(MASK)
            done = end
        out.append(text[done:])
        return "".join(out)

    def _entropy(self, text: str) -> str:
        ruleset = rules()
        if len(text) < ruleset.entropy_min_chars:
            return text  # too short to hold a token
        def mask(match: re.Match[str]) -> str:
            if is_high_entropy(match.group(0)):
                self.count += 1
                return MASK
            return match.group(0)
        return ruleset.entropy_token.sub(mask, text)

    def text(self, value: str) -> str:
        """Free text (an error message, a log line): every text rule, no entropy rule."""
        if len(value) <= _REMEMBERED_TEXT_CHARS:
            # A dead letter's fields (tool, outcome, failure mode) repeat endlessly.
            return self._remembered(value, _text, _CLEAN_TEXTS)
        return self._apply(value, code=False)

    def evidence_text(self, value: str) -> str:
        """Text inside a record's args or error: every text rule and the entropy rule."""
        if len(value) <= _REMEMBERED_TEXT_CHARS:
            # Dead letters repeat a few reasons endlessly (a damaged file: one per line).
            # A text it leaves alone no text rule masks either: clean for `text` too.
            return self._remembered(value, _evidence_text, _CLEAN_EVIDENCE, _CLEAN_TEXTS)
        return self._entropy(self._apply(value, code=False))

    def _remembered(self, value: str, redacted: Callable[[str], tuple[str, int]],
                    clean: set[str], *also_clean: set[str]) -> str:
        """A short text as the cached `redacted` gives it, or as it is when it is in
        `clean`; one left without a mask is remembered in `clean` and `also_clean`."""
        if type(value) is str and value in clean:
            return value
        result, replaced = redacted(value)
        if replaced:
            self.count += replaced
        else:
            _remember(value, clean, *also_clean)
        return result

    def code(self, value: str) -> str:
        return self._apply(value, code=True)

    def value(self, value: Any, key: str | None = None, entropy: bool = False) -> Any:
        """A copy of a JSON value: secrets under secret keys, and in every string."""
        if key is not None and is_secret_key(key):
            return self._mask_all(value)
        if entropy:
            return self._walk(value, self.evidence_text, _CLEAN_EVIDENCE)
        return self._walk(value, self.text, _CLEAN_TEXTS)

    def _walk(self, value: Any, redact: Callable[[str], str], clean: set[str]) -> Any:
        """`value` of a value under no secret key: `redact` for its strings, except
        those in `clean` (`redact` leaves them as they are)."""
        # Exact types first (what JSON decoders give), texts and keys already proven
        # innocent by a set lookup (no call); subclasses take the isinstance paths below.
        kind = type(value)
        if kind is str:
            return value if value in clean else redact(value)
        if kind in _SCALARS:
            return value
        if kind is dict:
            keys = _INNOCENT_KEYS
            return {k: (self._mask_all(v) if not (type(k) is str and k in keys)
                        and _is_secret(k)
                        else v if type(v) in _SCALARS or (type(v) is str and v in clean)
                        else redact(v) if type(v) is str
                        else self._walk(v, redact, clean))
                    for k, v in value.items()}
        if kind is list or kind is tuple:
            return [v if type(v) in _SCALARS or (type(v) is str and v in clean)
                    else redact(v) if type(v) is str
                    else self._walk(v, redact, clean) for v in value]
        if isinstance(value, str):
            return redact(value)
        if isinstance(value, dict):
            return {k: (self._mask_all(v) if is_secret_key(str(k))
                        else self._walk(v, redact, clean)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._walk(v, redact, clean) for v in value]
        return value

    def _mask_all(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: self._mask_all(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._mask_all(v) for v in value]
        if value in (None, "", MASK) or isinstance(value, bool):
            return value
        if isinstance(value, str | int | float):
            self.count += 1
            return MASK
        return value

    def record(self, rec: ToolInvocation) -> ToolInvocation:
        """An evidence record: args and error texts redacted; ids and keys untouched."""
        clean = dict(rec)
        if isinstance(clean.get("args"), dict):
            clean["args"] = self.value(clean["args"], None, entropy=True)
        # The error text, and what the parse step derives from it (`error_template`).
        for key, value in rec.items():
            if key.startswith("error") and isinstance(value, str):
                clean[key] = self.evidence_text(value)
        return clean  # type: ignore[return-value]

    def event(self, event: Event) -> Event:
        """A BINEvent whose evidence records are redacted (everything else is ids)."""
        clean = dict(event)
        clean["evidence"] = [self.record(r) if isinstance(r, dict) else r  # type: ignore[arg-type]
                             for r in event.get("evidence", ())]
        return clean  # type: ignore[return-value]

    def dead_letter(self, letter: DeadLetter) -> DeadLetter:
        """A dead letter: its raw input as a record when it parses, else as text."""
        before = self.count
        raw = self._raw(letter.raw)
        reason = self.evidence_text(letter.reason)
        if self.count == before:
            return letter
        return replace(letter, raw=raw, reason=reason)

    def _raw(self, raw: str) -> str:
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return self.evidence_text(raw)
        if not isinstance(obj, dict):
            return self.evidence_text(raw)
        before = self.count
        clean = {k: (self.value(v, k, entropy=True) if k in ("args", "error") else
                     v if k == "id" else self.value(v, k)) for k, v in obj.items()}
        # An unchanged input keeps its exact bytes (the dead letter can be replayed).
        return raw if self.count == before else orjson.dumps(clean).decode()

    def document(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.code(value)
        if isinstance(value, dict):
            return {k: self.document(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.document(v) for v in value]
        return value


# Texts up to this length find their needles' gates by one set intersection of their
# characters (cheaper than an `in` a gate up to about this length).
_SHORT_TEXT_CHARS: Final = 48

# Short texts redacted lately, remembered in this process only (never written anywhere).
_REMEMBERED_TEXT_CHARS: Final = 512


@lru_cache(maxsize=2048)
def _evidence_text(value: str) -> tuple[str, int]:
    """`Redactor.evidence_text` of a short text, and how many spans it replaced."""
    redactor = Redactor()
    clean = redactor._entropy(redactor._apply(value, code=False))
    return clean, redactor.count


@lru_cache(maxsize=2048)
def _text(value: str) -> tuple[str, int]:
    """`Redactor.text` of a short text, and how many spans it replaced."""
    redactor = Redactor()
    return redactor._apply(value, code=False), redactor.count


# Values `Redactor.value` returns as they are (under no secret key).
_SCALARS: Final = frozenset({int, float, bool, type(None)})

# Short texts and keys proven innocent lately (no mask; not a secret key), so that the
# walk of a value skips them with a set lookup. Bounded: emptied when full (hostile
# input cannot grow them), and membership only ever skips work whose result is known.
_PROVEN_MAX: Final = 4096
_CLEAN_TEXTS: Final[set[str]] = set()  # `Redactor.text` leaves them, with no mask
_CLEAN_EVIDENCE: Final[set[str]] = set()  # `Redactor.evidence_text` leaves them
_INNOCENT_KEYS: Final[set[str]] = set()  # `is_secret_key` is False


def _remember(text: str, *proven: set[str]) -> None:
    if type(text) is str:  # never a subclass, whose equality may differ
        for found in proven:
            if len(found) >= _PROVEN_MAX:
                found.clear()
            found.add(text)


def _is_secret(key: object) -> bool:
    """`is_secret_key(str(key))`, remembering an innocent key."""
    name = key if type(key) is str else str(key)
    if is_secret_key(name):
        return True
    if name is key:
        _remember(name, _INNOCENT_KEYS)
    return False


def redact(value: Any) -> Any:
    """A copy of `value` (any JSON value) with secrets replaced by `[REDACTED]`."""
    return Redactor().value(value)


def redact_text(text: str) -> str:
    return Redactor().text(text)


def redact_event(event: Event) -> Event:
    return Redactor().event(event)


def redact_record(rec: ToolInvocation) -> ToolInvocation:
    return Redactor().record(rec)


def redact_dead_letter(letter: DeadLetter) -> DeadLetter:
    return Redactor().dead_letter(letter)


class RedactingFilter(logging.Filter):
    """Redacts a log record's message (and its traceback text) before any handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info:
            # Always from exc_info: another handler may have cached the raw text already.
            record.exc_text = redact_text(logging.Formatter().formatException(record.exc_info))
        return True
