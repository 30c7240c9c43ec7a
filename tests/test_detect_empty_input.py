"""An input with no lines at all (or only blank ones) is a run with zero counters."""

from __future__ import annotations

from pathlib import Path

import pytest

from binloop.cli.commands.detect import detect
from binloop.core.config import Config


@pytest.mark.parametrize("engine", ["bytewax", "reference", "polars"])
@pytest.mark.parametrize("content", [b"", b"\n\n"])
def test_empty_input_runs_and_counts_nothing(tmp_path: Path, engine: str,
                                             content: bytes) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(content)
    summary = detect(Config(input=str(path), engine=engine, out=str(tmp_path / "ev.jsonl"),
                            progress=False))
    assert (summary.records_read, summary.valid, summary.events_fired) == (0, 0, 0)
