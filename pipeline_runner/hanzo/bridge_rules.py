"""The bridge plugin's copies of files whose source is elsewhere in binloop.

The bridge package must be self-contained wherever a bot loads it from, so it ships
byte-identical copies of

* binloop's redaction rules, `binloop/core/redaction_rules.json` (the rule file of
  binloop's one redactor) -> `bridge/redaction_rules.json`;
* the bot side of the tool host, `binloop/library/hanzo_proxy/host_client.ts` (which
  every proxy plugin of a load path gets too) -> `bridge/src/host_client.ts`.

The binloop files are the sources; tests/test_hanzo_bridge.py fails when a copy
differs. Refresh them: `python -m pipeline_runner.hanzo.bridge_rules`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

from binloop.core.redact import RULES_PATH
from binloop.library.hanzo_load_path import TEMPLATES

BRIDGE: Final = Path(__file__).resolve().parent / "bridge"
BRIDGE_RULES_PATH: Final = BRIDGE / RULES_PATH.name
HOST_CLIENT_PATH: Final = TEMPLATES / "host_client.ts"
BRIDGE_HOST_CLIENT_PATH: Final = BRIDGE / "src" / "host_client.ts"
COPIES: Final = ((RULES_PATH, BRIDGE_RULES_PATH), (HOST_CLIENT_PATH, BRIDGE_HOST_CLIENT_PATH))


def stale() -> list[Path]:
    """The copies that differ from their source."""
    return [copy for source, copy in COPIES
            if not copy.is_file() or copy.read_bytes() != source.read_bytes()]


def is_current() -> bool:
    return not stale()


def sync() -> list[Path]:
    """Copy each source over its stale copy; the copies written."""
    written = stale()
    for source, copy in COPIES:
        if copy in written:
            copy.write_bytes(source.read_bytes())
    return written


if __name__ == "__main__":
    written = sync()
    for _, copy in COPIES:
        print(f"{copy}: {'copied' if copy in written else 'already current'}", file=sys.stderr)
