"""binloop's redaction rules as data, for the Hanzo bridge (which redacts in the bot).

`rules()` reads the rule tables of binloop's one redactor (`binloop.core.redact`)
and writes them in JavaScript's regex dialect: a leading `(?i)` becomes the `i` flag,
`\\1` in a replacement becomes `$1`. `bridge/redact-rules.json` is its output, committed
so that the bridge package is self-contained; tests/test_hanzo_bridge.py fails when the
two differ (regenerate: `python -m pipeline_runner.hanzo.redact_rules`) and runs one
corpus through both redactors. Issue 11 owns the rules; this only carries them over.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Final

import orjson

from binloop.core import redact

RULES_FILE: Final = Path(__file__).resolve().parent / "bridge" / "redact-rules.json"


def _js(pattern: re.Pattern[str], replacement: str | None = None) -> dict[str, str]:
    source, flags = pattern.pattern, "g"
    if source.startswith("(?i)"):
        source, flags = source[4:], "gi"
    if "(?" in source.replace("(?:", "").replace("(?!", "").replace("(?=", ""):
        raise ValueError(f"pattern has Python-only syntax: {pattern.pattern}")
    rule = {"pattern": source, "flags": flags}
    if replacement is not None:
        rule["replacement"] = re.sub(r"\\(\d)", r"$\1", replacement)
    return rule


def rules() -> dict[str, Any]:
    secret_key = _js(redact._SECRET_KEY)
    secret_key["flags"] = secret_key["flags"].replace("g", "")
    return {"source": "binloop/core/redact.py", "mask": redact.MASK,
            "secret_key": secret_key,
            "text": [_js(p, r) for p, r in (*redact._SHAPES, *redact._ASSIGNMENTS)]}


def rules_json() -> bytes:
    return orjson.dumps(rules(), option=orjson.OPT_INDENT_2) + b"\n"


if __name__ == "__main__":
    RULES_FILE.write_bytes(rules_json())
    print(f"wrote {RULES_FILE}", file=sys.stderr)
