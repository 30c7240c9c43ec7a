"""The names `--input-format` accepts (the mappers behind them: binloop.replay.formats).

Here so that the configuration can check a name without importing the I/O layer.
"""

from __future__ import annotations

from typing import Final

AUTO: Final = "auto"
BINLOOP: Final = "binloop"
HANZO: Final = "hanzo"
OTLP_JSON: Final = "otlp-json"
INPUT_FORMATS: Final = (AUTO, BINLOOP, HANZO, OTLP_JSON)


def parse_format(text: str) -> str:
    if text not in INPUT_FORMATS:
        raise ValueError(f"unknown input format {text!r} (one of {', '.join(INPUT_FORMATS)})")
    return text
