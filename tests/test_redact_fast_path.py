"""The redactor's fast path gives exactly what the plain rules give.

`Reference` below applies the one rule set (`binloop.core.redact.rules()`, compiled from
`redaction_rules.json`) the plain way: every text rule on every text, in order, no
needles, no gates, no key-word prefilter, no length shortcut, no caches. The redactor
must agree with it — output and mask count — on generated texts, JSON values, records,
events and dead letters built from every form of the redaction corpus, the rules' own
needles, secret key words in every case and separator style, and unicode look-alikes.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from binloop.core.redact import (
    MASK,
    Redactor,
    TextRule,
    _min_width,
    is_high_entropy,
    is_secret_key,
    rules,
    squashed,
)
from binloop.core.schema import DeadLetter
from tests.redaction_corpus import corpus, strings_in


def _reference_is_secret_key(key: str) -> bool:
    ruleset = rules()
    words = [w.lower() for w in ruleset.word.findall(key)]
    if not words or words[-1] in ruleset.not_secret_last:
        return False
    if "".join(words) in ruleset.secret_words or any(w in ruleset.secret_words for w in words):
        return True
    return any(pair in ruleset.secret_phrases for pair in itertools.pairwise(words))


class Reference:
    """The redaction rules, applied the plain way (the semantics of docs/redaction.md)."""

    def __init__(self) -> None:
        self.count = 0

    def apply(self, text: str, code: bool) -> str:
        for rule in rules().text:
            if not code or rule.in_code:
                text = self.apply_rule(rule, text)
        return text

    def apply_rule(self, rule: TextRule, text: str) -> str:
        spans = []
        for match in rule.pattern.finditer(text):
            if rule.key_group is not None and not _reference_is_secret_key(
                    match.group(rule.key_group)):
                continue
            start, end = match.span(rule.secret_group)
            if start < end:
                spans.append((start, end))
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

    def entropy(self, text: str) -> str:
        def mask(match: re.Match[str]) -> str:
            if is_high_entropy(match.group(0)):
                self.count += 1
                return MASK
            return match.group(0)
        return rules().entropy_token.sub(mask, text)

    def text(self, text: str) -> str:
        return self.apply(text, code=False)

    def evidence_text(self, text: str) -> str:
        return self.entropy(self.apply(text, code=False))

    def value(self, value: Any, key: str | None = None, entropy: bool = False) -> Any:
        if key is not None and _reference_is_secret_key(key):
            return self.mask_all(value)
        if isinstance(value, str):
            return self.evidence_text(value) if entropy else self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v, str(k), entropy) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v, None, entropy) for v in value]
        return value

    def mask_all(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: self.mask_all(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.mask_all(v) for v in value]
        if value in (None, "", MASK) or isinstance(value, bool):
            return value
        if isinstance(value, str | int | float):
            self.count += 1
            return MASK
        return value

    def record(self, rec: dict[str, Any]) -> dict[str, Any]:
        clean = dict(rec)
        if isinstance(clean.get("args"), dict):
            clean["args"] = self.value(clean["args"], None, entropy=True)
        for key, value in rec.items():
            if key.startswith("error") and isinstance(value, str):
                clean[key] = self.evidence_text(value)
        return clean

    def event(self, event: dict[str, Any]) -> dict[str, Any]:
        return {**event, "evidence": [self.record(r) if isinstance(r, dict) else r
                                      for r in event.get("evidence", ())]}

    def dead_letter(self, letter: DeadLetter) -> DeadLetter:
        before = self.count
        try:
            obj = orjson.loads(letter.raw)
        except orjson.JSONDecodeError:
            obj = None
        if isinstance(obj, dict):
            clean = {k: (self.value(v, k, entropy=True) if k in ("args", "error") else
                         v if k == "id" else self.value(v, k)) for k, v in obj.items()}
            raw = letter.raw if self.count == before else orjson.dumps(clean).decode()
        else:
            raw = self.evidence_text(letter.raw)
        reason = self.evidence_text(letter.reason)
        if self.count == before:
            return letter
        return DeadLetter(raw, reason, letter.source, letter.position)


# --- what the generated inputs are made of ----------------------------------------------


def _corpus_texts() -> list[str]:
    texts = strings_in(corpus()["secrets"]) + strings_in(corpus()["ordinary"])
    texts += [orjson.dumps(form["args"]).decode() for form in corpus()["secrets"]
              if "args" in form]
    return sorted(set(texts))


def _key_forms() -> list[str]:
    """Secret key words and phrases in every case and separator style, and their
    harmless neighbours."""
    ruleset = rules()
    words = sorted(ruleset.secret_words) + ["_".join(p) for p in sorted(ruleset.secret_phrases)]
    forms = []
    for word in words:
        parts = word.split("_")
        forms += [word, word.upper(), word.title(), "-".join(parts), ".".join(parts),
                  parts[0] + "".join(p.title() for p in parts[1:]),
                  "X-" + "-".join(p.title() for p in parts), "x_" + word, word + "_" + "count"]
    return [*forms, "Api-Key", "x_api_key", "X-API-KEY", "APIKey", "apiKEY", "max_tokens",
                    "token_type", "passengers", "author", "session_id", "id", "args", "error",
                    "error_template", "DB_PASSWORD", "awsSecretAccessKey", "\u212aey",
            "ke\u0443"]


_TRICKY = ["\u212a", "\u0130", "\u0131", "\u017f", "\ufb00", "\uff50\uff41\uff53\uff53",
           "\u200b", "\u00e9", "\ud800", "\x00", "\u2028", "\U0001f511", "\\n", "\\\"",
           "\\u0070", "\n", "\r\n", "\t", " ", "", "=", ":", "-", "--", "_", ".", "/",
           "@", "://", '"', "'", "&", ",", ";", MASK, "Bearer ", "bearer\t",
           "Authorization: ", "Cookie: ", "-u ", "--password ", "--api-key=", " is ",
           " was ", "aB3xY9aB3xY9aB3xY9aB3xY9", "aB3xY9aB3xY9aB3xY9aB3x",
           "Zq7Wm2Xr9Lk4Pv8Tn3Hs6Jd1Fb5", "0123456789abcdef" * 3, "mia_li_3668", "HAT136"]


def _fragments() -> list[str]:
    ruleset = rules()
    needles = sorted(set(ruleset.needles) | set(ruleset.folded_needles))
    return (_corpus_texts() + needles + [n.upper() for n in needles] + _key_forms()
            + _TRICKY)


FRAGMENTS = _fragments()
# Texts each rule's pattern matches (hypothesis writes them from the pattern itself).
RULE_MATCHES = st.sampled_from(rules().text).flatmap(lambda rule: st.from_regex(rule.pattern))
TEXTS = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=6) | RULE_MATCHES,
                 max_size=12).map("".join)
KEYS = st.sampled_from(_key_forms()) | st.text(max_size=8)
SCALARS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
           | st.sampled_from(["", MASK]) | TEXTS)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.tuples(inner, inner) | st.dictionaries(KEYS, inner, max_size=5),
                      max_leaves=16)
RECORDS = st.fixed_dictionaries(
    {"id": TEXTS, "tool": TEXTS, "args": st.dictionaries(KEYS, VALUES, max_size=6) | VALUES},
    optional={"error": TEXTS, "error_template": TEXTS, "session_id": st.integers() | TEXTS,
              "outcome": TEXTS, "ts": st.integers() | TEXTS, "agent_id": TEXTS})
EVENTS = st.fixed_dictionaries({"event_id": TEXTS, "tool": TEXTS,
                                "evidence": st.lists(RECORDS | SCALARS, max_size=4)})


def _json_line(rec: dict[str, Any]) -> str:
    try:
        return orjson.dumps(rec).decode()
    except TypeError:  # a lone surrogate, an integer beyond 64 bits
        return repr(rec)


DEAD_LETTERS = st.builds(DeadLetter, RECORDS.map(_json_line) | TEXTS
                         | RECORDS.map(lambda r: _json_line(r)[:-3]), TEXTS)


# --- the comparisons --------------------------------------------------------------------


def _same(method: str, value: Any, *args: Any) -> None:
    fast, plain = Redactor(), Reference()
    got, expected = getattr(fast, method)(value, *args), getattr(plain, method)(value, *args)
    # repr too: equal is not identical (True == 1, 0.0 == -0.0, a list and a tuple).
    assert got == expected and repr(got) == repr(expected)
    assert fast.count == plain.count


@settings(max_examples=400)
@given(TEXTS)
def test_texts_are_redacted_as_the_plain_rules_do(text: str) -> None:
    for method in ("text", "evidence_text"):
        _same(method, text)
    fast, plain = Redactor(), Reference()
    assert (fast.code(text), fast.count) == (plain.apply(text, code=True), plain.count)


@pytest.mark.parametrize("position", range(len(rules().text)),
                         ids=[rule.id for rule in rules().text])
@settings(max_examples=40)
@given(data=st.data())
def test_short_texts_with_a_match_of_each_rule_are_redacted_as_the_plain_rules_do(
        position: int, data: st.DataObject) -> None:
    match = data.draw(st.from_regex(rules().text[position].pattern))
    before, after = data.draw(st.sampled_from(_TRICKY)), data.draw(st.sampled_from(_TRICKY))
    for text in (match, before + match + after):
        for method in ("text", "evidence_text"):
            _same(method, text)


def test_every_corpus_text_and_pair_is_redacted_as_the_plain_rules_do() -> None:
    texts = _corpus_texts()
    pairs = [a + " " + b for a, b in zip(texts, reversed(texts), strict=True)]
    masked = 0
    for text in texts + pairs + [t.upper() for t in texts] + [t.lower() for t in texts]:
        for method in ("text", "evidence_text"):
            _same(method, text)
        plain = Reference()
        plain.evidence_text(text)
        masked += plain.count
    assert masked > len(texts)  # the corpus's secrets were found: not a vacuous comparison


@settings(max_examples=400)
@given(VALUES, st.booleans())
def test_json_values_are_redacted_as_the_plain_rules_do(value: Any, entropy: bool) -> None:
    _same("value", value, None, entropy)


def test_every_key_form_is_judged_as_the_plain_rules_do() -> None:
    values: list[Any] = ["v4lue-1", 7, 0.5, True, None, "", MASK, ["a", 1], {"inner": "x"}]
    args = {f"{key}": values[n % len(values)] for n, key in enumerate(_key_forms())}
    nested = {"outer": [args, (args,)], "args": {"deeper": args}}
    for entropy in (False, True):
        _same("value", nested, None, entropy)
    _same("record", {"id": "r", "args": args, "error": "; ".join(f"{k}={v}" for k, v in
                                                                 args.items())})
    plain = Reference()
    plain.value(args)
    assert plain.count > 50  # most forms are secret keys


@settings(max_examples=200)
@given(EVENTS)
def test_records_and_events_are_redacted_as_the_plain_rules_do(event: dict[str, Any]) -> None:
    _same("event", event)
    for rec in event["evidence"]:
        if isinstance(rec, dict):
            _same("record", rec)


@settings(max_examples=200)
@given(DEAD_LETTERS)
def test_dead_letters_are_redacted_as_the_plain_rules_do(letter: DeadLetter) -> None:
    _same("dead_letter", letter)


def test_the_corpus_records_and_dead_letters_are_redacted_as_the_plain_rules_do() -> None:
    from tests.redaction_corpus import failing_records, invalid_lines

    records = failing_records()
    _same("event", {"event_id": "e", "evidence": records})
    for line in invalid_lines() + [orjson.dumps(r) for r in records]:
        _same("dead_letter", DeadLetter(line.decode(errors="replace"), "bad ts"))
    plain = Reference()
    plain.event({"evidence": records})
    assert plain.count >= len(corpus()["secrets"]) // 2


# --- the shortcuts' own premises --------------------------------------------------------


def test_every_needle_sits_behind_a_gate_it_contains() -> None:
    ruleset = rules()
    for gated, needles in ((ruleset.gated_needles, ruleset.needles),
                           (ruleset.gated_folded_needles, ruleset.folded_needles)):
        behind = [needle for gate, group in gated for needle, _ in group
                  if gate in needle]
        assert sorted(behind) == sorted(needles)


def test_the_entropy_length_shortcut_is_the_token_patterns_shortest_match() -> None:
    ruleset = rules()
    assert _min_width(ruleset.entropy_token) == ruleset.entropy_min_chars == 24
    assert _min_width(re.compile("a|[a-z]{24}")) == 1


@settings(max_examples=300)
@given(st.text() | TEXTS)
def test_squashed_is_the_letters_and_digits_lower_cased(text: str) -> None:
    assert squashed(text) == re.sub("[^A-Za-z0-9]+", "", text).lower().encode()


def test_the_key_verdict_cache_is_bounded() -> None:
    assert is_secret_key.cache_info().maxsize is not None
