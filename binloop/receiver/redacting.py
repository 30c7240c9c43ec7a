"""Secrets out of the receiver's records before they leave the process (file or NATS).

The same redaction as evidence and the Hanzo bridge get (binloop.core.redact, its one
rule set): a record's `args` get the key-name, text and entropy rules, its `error` text
the text and entropy rules; ids, tool, session and agent are never changed.

The redactor costs several µs a record, as much as the mapping. Fleets repeat
themselves (the same arguments, the same messages), so the verdict on a short text is
remembered: an unchanged text is looked up, not redacted again. Arguments are
remembered by the span's own `gen_ai.tool.call.arguments` text (the mapping reads the
args from it with `args_from_text`, which the cache applies to its key too), so a hit
costs no JSON encoding. The caches are bounded (entries and text length), keyed on the
whole text (equal texts only: a dictionary compares keys, not just hashes), and a
remembered verdict is exactly what the redactor gives for that text, so the output
does not depend on what came before. A record never shares an object with a cache.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Final

import orjson

from binloop.core.redact import Redactor
from binloop.replay.otlp import args_from_text

_CACHED_TEXT_MAX: Final = 1024  # longer texts are redacted every time
_CACHE_ENTRIES: Final = 16384


@lru_cache(maxsize=_CACHE_ENTRIES)
def _error(text: str) -> tuple[str, int]:
    redactor = Redactor()
    return redactor.evidence_text(text), redactor.count


@lru_cache(maxsize=_CACHE_ENTRIES)
def _args_json(encoded: bytes) -> tuple[bytes | None, int]:
    """The redacted args of this JSON text (None: unchanged), and the masks."""
    redactor = Redactor()
    clean = redactor.value(orjson.loads(encoded), None, entropy=True)
    return (orjson.dumps(clean) if redactor.count else None), redactor.count


@lru_cache(maxsize=_CACHE_ENTRIES)
def _args_text(text: str) -> tuple[bytes | None, int]:
    """The redacted args that `args_from_text(text)` gives (None: unchanged), and the
    masks."""
    redactor = Redactor()
    clean = redactor.value(args_from_text(text)[0], None, entropy=True)
    return (orjson.dumps(clean) if redactor.count else None), redactor.count


def redact_error(text: str) -> tuple[str, int]:
    if len(text) <= _CACHED_TEXT_MAX:
        return _error(text)
    redactor = Redactor()
    return redactor.evidence_text(text), redactor.count


def redact_args(args: dict[str, Any]) -> tuple[dict[str, Any], int]:
    if not args:
        return args, 0
    encoded = orjson.dumps(args)
    if len(encoded) > _CACHED_TEXT_MAX:
        redactor = Redactor()
        return redactor.value(args, None, entropy=True), redactor.count
    clean, masks = _args_json(encoded)
    # A fresh copy of a changed value: records are never shared with the cache.
    return (args if clean is None else orjson.loads(clean)), masks


def redact_record(rec: dict[str, Any], args_text: str | None = None) -> int:
    """Redact a mapped record in place (before it is validated: a mask may lengthen
    it); the number of masks. `args_text`: the text its args were read from with
    `args_from_text` (the cache's key), None when they were not."""
    if args_text is not None and len(args_text) <= _CACHED_TEXT_MAX:
        clean, masks = _args_text(args_text)
        if clean is not None:  # a fresh copy: records are never shared with the cache
            rec["args"] = orjson.loads(clean)
    else:
        args, masks = redact_args(rec["args"])
        if masks:
            rec["args"] = args
    error = rec.get("error")
    if error is not None:
        rec["error"], error_masks = redact_error(error)
        masks += error_masks
    return masks
