"""The receiver's redaction caches: a remembered verdict is the redactor's for that very
text, texts never share one, and records never share the cache's objects."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from binloop.core.redact import MASK, Redactor
from binloop.receiver import redacting
from binloop.receiver.redacting import redact_record
from binloop.replay.otlp import args_from_text
from tests.redaction_corpus import corpus, ordinary_args


def _reference(text: str) -> tuple[dict[str, Any], int]:
    """What the redactor itself gives for the args read from `text` (no receiver cache)."""
    redactor = Redactor()
    clean = redactor.value(args_from_text(text)[0], None, entropy=True)
    return clean, redactor.count


def _texts() -> list[str]:
    """Argument texts: each secret form of the corpus, the ordinary values, and the same
    objects written differently (spacing, key order), plus texts that are not objects."""
    texts = []
    for form in corpus()["secrets"]:
        args = dict(form.get("args", {}))
        if "arg_text" in form:
            args["note"] = form["arg_text"]
        if args:
            texts.append(orjson.dumps(args).decode())
            texts.append(orjson.dumps(dict(reversed(args.items())), option=orjson.OPT_INDENT_2)
                         .decode())
    texts.append(orjson.dumps(ordinary_args()).decode())
    texts += ['{"path": "src/m1.py", "n": 1}', '{"path":"src/m1.py","n":1}', "[1, 2]",
              "password=hunter2", '"Bearer aB3xY9aB3xY9aB3xY9aB3xY9"', "{not json"]
    return texts


@pytest.fixture(autouse=True)
def _cold_caches() -> None:
    redacting._args_text.cache_clear()
    redacting._args_json.cache_clear()
    redacting._error.cache_clear()


def test_a_remembered_verdict_is_the_redactors_for_that_very_text() -> None:
    texts = _texts()
    masked = 0
    for _attempt in range(2):  # cold, then every verdict from the cache
        for text in texts:
            rec: dict[str, Any] = {"args": args_from_text(text)[0]}
            masks = redact_record(rec, text)
            assert (rec["args"], masks) == _reference(text), text
            masked += masks
    remembered = {text for text in texts if len(text) <= redacting._CACHED_TEXT_MAX}
    assert redacting._args_text.cache_info().hits >= len(remembered) > 40
    assert masked > 0  # the corpus's secrets were there to mask


class _SameHash(str):
    """A text whose hash every other one shares (the worst case for a cache)."""

    def __hash__(self) -> int:
        return 0


def test_texts_that_hash_alike_never_share_a_verdict() -> None:
    secret = _SameHash('{"password": "hunter2"}')
    ordinary = _SameHash('{"passwort": "hunter2"}')
    assert hash(secret) == hash(ordinary) and secret != ordinary
    for text in (secret, ordinary, secret, ordinary):
        rec: dict[str, Any] = {"args": args_from_text(text)[0]}
        masks = redact_record(rec, text)
        assert (rec["args"], masks) == _reference(text)
        assert ("hunter2" in str(rec["args"])) is (text == ordinary)
    assert redacting._args_text.cache_info().currsize == 2


def test_records_never_share_the_caches_objects() -> None:
    text = '{"api_key": "sk-live-abcdef", "items": [{"token": "t0k3nAbC9xYz"}]}'
    first: dict[str, Any] = {"args": args_from_text(text)[0]}
    second: dict[str, Any] = {"args": args_from_text(text)[0]}
    redact_record(first, text)
    redact_record(second, text)
    assert first["args"] == second["args"] and first["args"] is not second["args"]
    first["args"]["items"][0]["token"] = "changed"
    first["args"]["api_key"] = "changed"
    third: dict[str, Any] = {"args": args_from_text(text)[0]}
    redact_record(third, text)
    assert third["args"] == second["args"] == _reference(text)[0]
    assert third["args"]["api_key"] == MASK


def test_long_texts_and_maps_are_redacted_every_time() -> None:
    long_text = orjson.dumps({"password": "hunter2", "pad": "x" * 2000}).decode()
    rec: dict[str, Any] = {"args": args_from_text(long_text)[0]}
    assert redact_record(rec, long_text) == 1 and rec["args"]["password"] == MASK
    from_a_map: dict[str, Any] = {"args": {"password": "hunter2"}}
    assert redact_record(from_a_map) == 1 and from_a_map["args"] == {"password": MASK}
    assert redacting._args_text.cache_info().currsize == 0
