"""The bridge plugin's copy of binloop's redaction rules.

The Hanzo bridge redacts in the bot with the rule file of binloop's one redactor,
`binloop/core/redaction_rules.json`; the bridge package ships a byte-identical copy
(`bridge/redaction_rules.json`) so that it is self-contained wherever a bot loads it
from. The binloop file is the source; tests/test_hanzo_bridge.py fails when the copy
differs. Refresh it: `python -m pipeline_runner.hanzo.bridge_rules`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

from binloop.core.redact import RULES_PATH

BRIDGE_RULES_PATH: Final = Path(__file__).resolve().parent / "bridge" / RULES_PATH.name


def is_current() -> bool:
    source = RULES_PATH.read_bytes()
    return BRIDGE_RULES_PATH.is_file() and BRIDGE_RULES_PATH.read_bytes() == source


def sync() -> bool:
    """Copy binloop's rule file into the bridge; whether the copy changed."""
    if is_current():
        return False
    BRIDGE_RULES_PATH.write_bytes(RULES_PATH.read_bytes())
    return True


if __name__ == "__main__":
    changed = sync()
    print(f"{BRIDGE_RULES_PATH}: {'copied' if changed else 'already current'}", file=sys.stderr)
