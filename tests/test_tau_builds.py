"""Builds from the real tau-bench telemetry (θ = 2): every event gets a working tool."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

from binloop.core.detection import DetectionParams, detect
from binloop.core.events import BINEvent
from binloop.core.schema import ToolInvocation, parse_record
from binloop.library.store import ToolLibrary
from tests.buildkit import runner_for

EXPECTED = {
    ("update_reservation_flights", "CONFLICT.insufficient_balance"),
    ("update_reservation_flights", "CONFLICT.flight_unavailable"),
    ("book_reservation", "ARGS.payment_total_mismatch"),
    ("update_reservation_flights", "CONFLICT.no_seats"),
    ("book_reservation", "NOTFOUND.payment_method"),
}


def tau_records(path: Path) -> list[ToolInvocation]:
    return [parse_record(line) for line in path.read_bytes().splitlines() if line.strip()]


def tau_events(path: Path) -> list[BINEvent]:
    records = tau_records(path)
    params = DetectionParams(theta=2)
    return detect(params, (r for r in records if params.counts(r)))


def build_all(library_dir: Path, events: list[BINEvent], target: Any = None) -> dict[Any, Any]:
    runner = runner_for(library_dir, target=target)
    results = {(e["tool"], e["failure_mode"]): runner.build(e) for e in events}
    return results


@pytest.mark.slow
def test_every_tau_event_gets_a_python_tool(tmp_path: Path, tau_telemetry: Path) -> None:
    events = tau_events(tau_telemetry)
    assert {(e["tool"], e["failure_mode"]) for e in events} == EXPECTED
    results = build_all(tmp_path / "lib", events)
    failed = {key: r.reason for key, r in results.items() if r.outcome != "gated"}
    assert failed == {}
    manifest = ToolLibrary(tmp_path / "lib").read()
    assert {(e["answers"]["tool"], e["answers"]["failure_mode"])
            for e in manifest["tools"].values()} == EXPECTED
    assert manifest["version"] == len(EXPECTED)


def load_gated(library_dir: Path, path: str) -> Any:
    """Import a tool that passed the gate (only gated code runs outside the sandbox)."""
    spec = importlib.util.spec_from_file_location("gated_tool", library_dir / path / "tool.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_payment_tool_fixes_every_mismatch_in_the_data(tmp_path: Path,
                                                           tau_telemetry: Path) -> None:
    event = next(e for e in tau_events(tau_telemetry)
                 if e["failure_mode"] == "ARGS.payment_total_mismatch")
    result = runner_for(tmp_path / "lib").build(event)
    assert result.outcome == "gated", result.reason
    tool = load_gated(tmp_path / "lib", result.tool["path"])
    mismatches = [r for r in tau_records(tau_telemetry)
                  if r["failure_mode"] == "ARGS.payment_total_mismatch"]
    assert len(mismatches) == 24
    for rec in mismatches:
        total = float(re.search(r"total price is (\d+(?:\.\d+)?)", rec["error"]).group(1))
        out = tool.run({"args": rec["args"], "expected_total": total})
        assert out["ok"] is False and out["repaired"] is True, rec["error"]
        assert sum(p["amount"] for p in out["args"]["payment_methods"]) == pytest.approx(total)
        assert tool.run({"args": out["args"], "expected_total": total})["ok"] is True


@pytest.mark.slow
def test_every_tau_event_gets_a_typescript_plugin(tmp_path: Path, tau_telemetry: Path,
                                                  typescript_target: Any) -> None:
    results = build_all(tmp_path / "lib", tau_events(tau_telemetry), typescript_target)
    failed = {key: r.reason for key, r in results.items() if r.outcome != "gated"}
    assert failed == {}
    for result in results.values():
        assert (tmp_path / "lib" / result.tool["path"] / "bot.plugin.json").is_file()
