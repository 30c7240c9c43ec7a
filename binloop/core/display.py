"""Names from telemetry (a tool, a failure mode, a session) as they may be shown.

Telemetry is written by outside systems: a tool name may hold a newline, a NUL, an ANSI
escape or a Unicode direction override, and printed raw it could forge lines of a
listing or rewrite a terminal. Every human-readable listing shows such names through
:func:`shown`; JSON output carries the original (JSON escapes it).
"""

from __future__ import annotations

import json


def shown(value: object) -> str:
    """`value` as text that is one line of printable characters: unchanged when it is
    printable, without quotes, backslashes or surrounding spaces, else a JSON string
    literal (quoted, with escapes)."""
    text = str(value)
    if text and text.isprintable() and '"' not in text and "\\" not in text \
            and text == text.strip():
        return text
    return json.dumps(text, ensure_ascii=True)
