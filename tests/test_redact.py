"""Secret redaction of evidence, designs and generated code."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from binloop.core.redact import MASK, Redactor, redact, redact_text

SECRETS = [
    "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "xoxb-1234567890-abcdefghij",
    "AKIAABCDEFGHIJKLMNOP",
    "AIzaSyA1234567890abcdefghijklmnopqrstuv",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXBhcnQ",
    "sk_live_abcdefghij1234567890",
]


def test_known_secret_shapes_are_masked_in_any_text() -> None:
    for secret in SECRETS:
        text = f"request failed with key {secret} (retry later)"
        cleaned = redact_text(text)
        assert secret not in cleaned and MASK in cleaned, secret
        assert cleaned.startswith("request failed with key ")


def test_headers_passwords_private_keys_and_url_credentials() -> None:
    error = ("401 Unauthorized: Authorization: Bearer abc.def.ghi-123456 sent to "
             "https://admin:hunter2@db.example.com/x with password=s3cr3t&user=bob")
    cleaned = redact_text(error)
    for secret in ("abc.def.ghi-123456", "hunter2", "s3cr3t"):
        assert secret not in cleaned
    assert "user=bob" in cleaned and "db.example.com" in cleaned
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----"
    assert redact_text(f"key: {pem} end") == f"key: {MASK} end"


def test_values_under_secret_keys_are_masked() -> None:
    args = {"user": "bob", "api_key": "plain-looking", "nested": {"password": 1234, "pin": "0000"},
            "headers": [{"Authorization": "Basic Ym9iOnB3"}], "max_tokens": 300,
            "token_count": 5, "flag": True, "session_token": "abc"}
    redactor = Redactor()
    cleaned = redactor.value(args)
    assert cleaned["user"] == "bob" and cleaned["max_tokens"] == 300
    assert cleaned["token_count"] == 5 and cleaned["flag"] is True
    assert cleaned["api_key"] == MASK and cleaned["session_token"] == MASK
    assert cleaned["nested"] == {"password": MASK, "pin": MASK}
    assert cleaned["headers"] == [{"Authorization": MASK}]
    assert redactor.count == 5
    assert args["api_key"] == "plain-looking"  # the input is not changed


def test_code_keeps_identifiers_that_look_like_keys() -> None:
    source = 'function f(token: string, password = "x"): string { return token; }'
    assert Redactor().code(source) == source
    assert Redactor().document({"properties": {"token": {"type": "string"}}}) == {
        "properties": {"token": {"type": "string"}}}
    assert SECRETS[0] not in Redactor().code(f'const KEY = "{SECRETS[0]}";')


def test_redact_walks_json() -> None:
    assert redact([{"error": f"bad key {SECRETS[2]}"}, 3, None]) == [
        {"error": f"bad key {MASK}"}, 3, None]


# --- the key-name prefilter (a cheaper path, the same masks) ---------------------------------

_FRAGMENTS = ("api", "Key", "_", "-", ".", "=", ":", " ", "\t", "'", '"', "pass", "word",
              "PASS", "Token", "session", "token", "auth", "Authorization", "Bearer ",
              "secret", "--", "-u ", "abc123XYZ", "aB3xY9aB3xY9aB3xY9aB3xY9", "is ", "key",
              "Set-Cookie", "id", "count", "\n", "private", "ApiKEY", "clientSecret", "é",
              "\u212a", "pwd", "DSN", "pin", "x")


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS), min_size=1, max_size=14))
def test_skipping_key_rules_where_no_secret_word_is_changes_no_mask(parts: list[str]) -> None:
    """Where the text's letters and digits hold no secret word or phrase, the key-name
    rules are skipped; with them always run, every text gives the same output and count."""
    import binloop.core.redact as redact_module

    text = "".join(parts)
    quick = Redactor()
    outputs = (quick.evidence_text(text), quick.text(text), quick.code(text))
    original = redact_module.may_name_a_secret
    redact_module.may_name_a_secret = lambda _text: True
    try:
        full = Redactor()
        assert (full.evidence_text(text), full.text(text), full.code(text)) == outputs
        assert full.count == quick.count
    finally:
        redact_module.may_name_a_secret = original


def test_the_prefilter_sees_secret_words_across_separators_and_case() -> None:
    from binloop.core.redact import may_name_a_secret

    assert may_name_a_secret("x-Api-KEY=1") and may_name_a_secret("CLIENT_secret: y")
    assert may_name_a_secret("--pass w") and not may_name_a_secret("TimeoutError: read 5 s")
    assert Redactor().text("x-Api-KEY=abc123") == f"x-Api-KEY={MASK}"


def _every_rule(text: str, code: bool) -> tuple[str, int]:
    """The text rules without the needle index: every rule in order, each skipped only
    when none of its needles is in the original text (what the index must agree with)."""
    from binloop.core.redact import may_name_a_secret, rules

    ruleset, redactor = rules(), Redactor()
    present = {n for n in ruleset.needles if n in text}
    folded = {n for n in ruleset.folded_needles if n in text.lower()}
    for rule in ruleset.text:
        if code and not rule.in_code:
            continue
        if rule.needles and rule.needles.isdisjoint(folded if rule.folded else present):
            continue
        if rule.key_group is not None and not may_name_a_secret(text):
            continue
        text = redactor._apply_rule(rule, text)
    return text, redactor.count


_NEEDLE_FRAGMENTS = (*_FRAGMENTS, "sk-", "sk-ant-", "ghp_", "xoxb-", "AKIA", "eyJ", "AIza",
                     "://", "user:pw@", "-----BEGIN PRIVATE KEY-----", "hf_", "glpat-",
                     "cookie", "password is ", "AccountKey=", "shp", "0123456789abcdefABCDEF",
                     "npm_", "SG.", "key-", ":AA")


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_NEEDLE_FRAGMENTS), min_size=1, max_size=16),
       st.booleans())
def test_the_needle_index_visits_the_rules_every_rule_would(parts: list[str],
                                                            code: bool) -> None:
    text = "".join(parts)
    redactor = Redactor()
    assert (redactor._apply(text, code), redactor.count) == _every_rule(text, code)


def test_the_needle_index_agrees_on_the_redaction_corpus() -> None:
    from tests.redaction_corpus import corpus, strings_in

    texts = strings_in(corpus())
    assert len(texts) > 100
    masked = 0
    for text in texts + [a + " " + b for a, b in zip(texts, reversed(texts), strict=True)]:
        for code in (False, True):
            redactor = Redactor()
            assert (redactor._apply(text, code), redactor.count) == _every_rule(text, code)
            masked += redactor.count
    assert masked > 0  # the corpus's secrets were found, so the comparison was not vacuous


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(("pass", "wd", "word", "p", "a", "uth", "key", "se", "cret",
                                 "s", "x", "0", "token", "cookie", "cred", "api", "ssion",
                                 "in", "otp", "ot", "bearer", "dsn", "jw")), max_size=10))
def test_the_secret_word_trie_finds_what_the_alternation_finds(parts: list[str]) -> None:
    import re

    from binloop.core.redact import _trie_pattern

    words = {"pass", "passwd", "password", "pin", "secret", "secretkey", "secrets", "auth",
             "authkey", "authorization", "token", "cookie", "cookies", "otp", "jwt", "dsn"}
    text = "".join(parts)
    plain = re.compile("|".join(map(re.escape, sorted(words))))
    trie = re.compile(_trie_pattern(words))
    assert (plain.search(text) is None) == (trie.search(text) is None)
    assert all(trie.fullmatch(word) for word in words)
    assert not trie.fullmatch(text) or text in words
