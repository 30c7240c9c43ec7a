"""The reference agent's registry: it loads only gated tools the manifest lists (hash
checked, not quarantined), never anything else from the library directory; and the
agent uses the loaded tool on its failing calls (telemetry under the tool's own name)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from binloop.agent.airline import AirlineService, ToolError
from binloop.agent.registry import ToolRegistry
from binloop.core.fsutil import atomic_write_json
from binloop.library.store import ToolLibrary
from tests.agentkit import (
    MODE,
    agent_failure_event,
    build_library,
    copy_library,
    make_agent,
    read_log,
)
from tests.buildkit import event_of, failing_calls

pytestmark = pytest.mark.slow  # builds a real tool (sandboxed ruff, mypy, pytest) once


@pytest.fixture
def library(gated: tuple[Path, str], tmp_path: Path) -> Path:
    return copy_library(gated[0], tmp_path / "library")


def planted_code(marker: Path) -> str:
    """Python that leaves `marker` behind when it is ever executed."""
    return (f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n"
            "NAME = 'planted'\n\ndef run(params, invoke=None):\n    return {'ok': True}\n")


def edit_manifest(library: Path, change: Any) -> None:
    manifest = orjson.loads((library / "manifest.json").read_bytes())
    change(manifest)
    atomic_write_json(library / "manifest.json", manifest)


def test_a_gated_tool_is_loaded_and_repairs_the_call(library: Path,
                                                      gated: tuple[Path, str]) -> None:
    registry = ToolRegistry(library)
    change = registry.reload()
    assert change.loaded == [gated[1]] and not change.refused
    tool = registry.answers("book_reservation", MODE)
    assert tool is not None and tool.checks_args
    payments = [{"payment_id": "certificate_1", "amount": 300},
                {"payment_id": "credit_card_2", "amount": 220}]
    out = tool.run({"args": {"payment_methods": payments}, "expected_total": 570})
    assert out["repaired"] and out["args"]["payment_methods"][1]["amount"] == 270
    registry.close()


def test_the_agent_uses_the_tool_and_records_its_uses(library: Path, tmp_path: Path,
                                                      gated: tuple[Path, str]) -> None:
    agent, telemetry, registry = make_agent(library, tmp_path / "t.jsonl")
    try:
        report = agent.run()
    finally:
        telemetry.close()
        registry.close()
    assert report.ok, report.reason
    records = read_log(tmp_path / "t.jsonl")
    assert [r for r in records if r["outcome"] != "success"] == []
    uses = [r for r in records if r["tool"] == gated[1]]
    # every booking is checked by the tool first; four of them needed a repair
    assert len(uses) == 7 and report.tool_uses[gated[1]]["success"] == 7
    assert all(u["args"]["expected_total"] > 0 and "args" in u["args"] for u in uses)
    assert len(agent.state.done) == 7 and not agent.state.pending


def test_a_tool_not_in_the_manifest_is_never_imported(library: Path, tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    rogue = library / "tools" / "rogue_tool" / "v1"
    rogue.mkdir(parents=True)
    (rogue / "tool.py").write_text(planted_code(marker))
    (rogue / "tool.json").write_text('{"name": "rogue_tool"}')
    registry = ToolRegistry(library)
    change = registry.reload()
    assert "rogue_tool" not in registry.tools and "rogue_tool" not in change.refused
    assert not marker.exists()
    registry.close()


def test_a_quarantined_tool_is_skipped_and_withdrawn(library: Path,
                                                     gated: tuple[Path, str]) -> None:
    registry = ToolRegistry(library)
    registry.reload()
    assert gated[1] in registry.tools
    ToolLibrary(library).set_status(gated[1], "quarantined", "test")
    assert registry.withdraw() == [gated[1]] and registry.tools == {}
    fresh = ToolRegistry(library)
    assert fresh.reload().loaded == [] and fresh.tools == {}
    registry.close()
    fresh.close()


def test_an_altered_file_refuses_the_tool(library: Path, tmp_path: Path,
                                          gated: tuple[Path, str]) -> None:
    marker = tmp_path / "imported"
    entry = ToolLibrary(library).entry(gated[1])
    (library / entry["path"] / "tool.py").write_text(planted_code(marker))
    registry = ToolRegistry(library)
    change = registry.reload()
    assert registry.tools == {} and "sha256" in change.refused[gated[1]]
    assert not marker.exists()


@pytest.mark.parametrize("field,value", [
    ("path", "tools/rogue_tool/v1"), ("path", "../outside/v1"), ("entry", "other.py")])
def test_a_manifest_entry_pointing_elsewhere_is_refused(library: Path, tmp_path: Path,
                                                        gated: tuple[Path, str], field: str,
                                                        value: str) -> None:
    marker = tmp_path / "imported"
    for where in (library / "tools" / "rogue_tool" / "v1", library.parent / "outside" / "v1"):
        where.mkdir(parents=True, exist_ok=True)
        (where / "tool.py").write_text(planted_code(marker))
    (library / ToolLibrary(library).entry(gated[1])["path"] / "other.py").write_text(
        planted_code(marker))
    edit_manifest(library, lambda m: m["tools"][gated[1]].update({field: value}))
    registry = ToolRegistry(library)
    change = registry.reload()
    assert registry.tools == {} and gated[1] in change.refused
    assert not marker.exists()


def test_a_listed_file_outside_the_version_is_refused(library: Path, tmp_path: Path,
                                                      gated: tuple[Path, str]) -> None:
    def add_file(manifest: Any) -> None:
        manifest["tools"][gated[1]]["files"]["../../../x.py"] = "0" * 64

    edit_manifest(library, add_file)
    change = ToolRegistry(library).reload()
    assert "unsafe" in change.refused[gated[1]]


def test_tools_of_another_target_are_not_loaded(library: Path, tmp_path: Path) -> None:
    registry = ToolRegistry(library, "typescript", tmp_path / "plugins")
    assert registry.reload().loaded == [] and registry.tools == {}
    registry.close()


def test_a_typescript_plugin_runs_through_the_node_harness(tmp_path: Path,
                                                           typescript_target: Any) -> None:
    event = agent_failure_event(tmp_path)
    tool = build_library(tmp_path / "library", event, target=typescript_target)
    registry = ToolRegistry(tmp_path / "library", "typescript", tmp_path / "plugins")
    try:
        assert registry.reload().loaded == [tool["name"]]
        loaded = registry.tools[tool["name"]]
        payments = [{"payment_id": "c", "amount": 150}, {"payment_id": "d", "amount": 65}]
        out = loaded.run({"args": {"payment_methods": payments}, "expected_total": 315})
        assert out["repaired"] and out["args"]["payment_methods"][1]["amount"] == 165
        # the agent's whole job with the plugin: every booking goes through it
        agent, telemetry, _ = make_agent(tmp_path / "library", tmp_path / "t.jsonl",
                                         target="typescript", work_dir=tmp_path / "p2")
        try:
            report = agent.run()
        finally:
            telemetry.close()
            agent.registry.close()
        assert report.ok and report.tool_uses[tool["name"]]["success"] == 7
    finally:
        registry.close()


class FlakyAirline(AirlineService):
    """The airline plus a rate service whose connection drops twice, then answers."""

    def __init__(self) -> None:
        super().__init__()
        self.drops = 2

    def call(self, tool: str, args: dict[str, Any]) -> Any:
        if tool != "get_fx_rate":
            return super().call(tool, args)
        if self.drops:
            self.drops -= 1
            raise ToolError("NETWORK.connection_reset", "Error: connection reset by peer")
        return {"rate": 1.08, "currency": args["currency"]}


def test_a_wrapper_tool_makes_the_call_through_invoke(tmp_path: Path) -> None:
    event = event_of(failing_calls("get_fx_rate", "NETWORK.connection_reset", [
        ({"currency": "EUR"}, "Error: connection reset by peer"),
        ({"currency": "GBP"}, "Error: connection reset by peer")]))
    tool = build_library(tmp_path / "library", event)
    agent, telemetry, registry = make_agent(tmp_path / "library", tmp_path / "t.jsonl")
    agent.service = FlakyAirline()
    try:
        registry.reload()
        assert not registry.tools[tool["name"]].checks_args
        call = agent.call_guarded("get_fx_rate", {"currency": "USD"}, {"base_delay_ms": 1})
    finally:
        telemetry.close()
        registry.close()
    assert call.ok and call.result == {"rate": 1.08, "currency": "USD"}
    calls = [(r["tool"], r["outcome"]) for r in read_log(tmp_path / "t.jsonl")]
    assert calls == [("get_fx_rate", "failure"), ("get_fx_rate", "failure"),
                     ("get_fx_rate", "success"), (tool["name"], "success")]


class SurchargingAirline(AirlineService):
    """Adds a fee the quote does not show: no repair to the quoted total can succeed."""

    def book_reservation(self, args: dict[str, Any]) -> dict[str, Any]:
        total = self._total(args) + 7
        paid = sum(p["amount"] for p in args["payment_methods"])
        raise ToolError(MODE, f"Error: payment amount does not add up, total price is {total}, "
                              f"but paid {paid}")


def test_a_tool_that_does_not_help_is_tried_once_per_booking_and_reported(
        library: Path, tmp_path: Path, gated: tuple[Path, str]) -> None:
    agent, telemetry, registry = make_agent(library, tmp_path / "t.jsonl")
    agent.service = SurchargingAirline()
    try:
        report = agent.run()
    finally:
        telemetry.close()
        registry.close()
    assert not report.ok and "no tool for the failing calls" in report.reason
    records = read_log(tmp_path / "t.jsonl")
    bookings = [r for r in records if r["tool"] == "book_reservation"]
    assert len(bookings) == 7 and all(r["outcome"] == "failure" for r in bookings)
    uses = [r for r in records if r["tool"] == gated[1]]
    assert [u["outcome"] for u in uses] == ["failure"] * 7  # what quarantines it
    assert all(p["tried"] == [f"{gated[1]}@v1"] for p in agent.state.pending)
