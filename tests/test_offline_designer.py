"""The offline designer: a working tool for each failure class of the taxonomy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from binloop.core.events import BINEvent
from binloop.library.manifest import empty_manifest
from binloop.library.store import ToolLibrary
from pipeline_runner.design import NoDesign
from pipeline_runner.designers import load_designer
from pipeline_runner.designers.offline import OfflineDesigner
from pipeline_runner.designers.offline.templates import (
    args_check,
    repair,
    resolve,
    retry,
)
from tests.buildkit import event_of, failing_calls, runner_for

SCENARIOS: dict[str, tuple[str, str, list[tuple[dict[str, Any], str]], dict[str, Any]]] = {
    "NETWORK": ("fetch_url", "NETWORK.connection_reset", [
        ({"url": "https://api.example.com/v1/items"},
         "ConnectionResetError: [Errno 104] Connection reset by peer"),
        ({"url": "https://api.example.com/v1/items?page=2"}, "ECONNRESET while reading")], {}),
    "TIMEOUT": ("run_tests", "TIMEOUT", [
        ({"command": "pytest -q tests/"}, "command timed out after 120 s"),
        ({"command": "pytest -q tests/slow"}, "command timed out after 120 s")],
        {"outcome": "timeout", "duration_ms": 120_000}),
    "ARGS": ("create_invoice", "ARGS.bad_type", [
        ({"customer": "c_12", "quantity": "3"}, "Error: 'quantity' must be an integer"),
        ({"customer": "c_13", "quantity": "two"}, "Error: 'quantity' must be an integer")], {}),
    "NOTFOUND": ("update_reservation_flights", "NOTFOUND.payment_method", [
        ({"reservation_id": "M20IZO", "payment_id": "credit_card_7334"},
         "Error: payment method not found"),
        ({"reservation_id": "1N99U6", "payment_id": "credit_card_5634230"},
         "Error: payment method not found")], {}),
    "SYNTAX": ("query_db", "SYNTAX.json", [
        ({"table": "orders", "filter": "{'status': 'open',}"},
         "JSONDecodeError: Expecting property name enclosed in double quotes"),
        ({"table": "orders", "filter": "{status: 'open'"},
         "JSONDecodeError: Expecting property name enclosed in double quotes")], {}),
    "CONFLICT": ("update_reservation_flights", "CONFLICT.no_seats", [
        ({"reservation_id": "GV1N64", "flights": [
            {"flight_number": "HAT003", "date": "2024-05-19"},
            {"flight_number": "HAT290", "date": "2024-05-20"}]},
         "Error: not enough seats on flight HAT290"),
        ({"reservation_id": "OBUT9V", "flights": [
            {"flight_number": "HAT229", "date": "2024-05-27"}]},
         "Error: not enough seats on flight HAT229")], {}),
    "PERM": ("write_file", "PERM.denied", [
        ({"path": "/etc/app/config.yaml", "content": "x"},
         "PermissionError: [Errno 13] Permission denied: '/etc/app/config.yaml'"),
        ({"path": "/etc/app/secrets.yaml", "content": "y"},
         "PermissionError: [Errno 13] Permission denied: '/etc/app/secrets.yaml'")], {}),
    "RUNTIME": ("parse_report", "RUNTIME.crash", [
        ({"report_id": "r_1", "format": "xlsx"},
         "TypeError: 'NoneType' object is not subscriptable"),
        ({"report_id": "r_9", "format": "xlsx"},
         "TypeError: 'NoneType' object is not subscriptable")], {}),
    "TOOL_GAP": ("search_flights", "TOOL_GAP.unknown_tool", [
        ({"origin": "JFK", "destination": "SEA"},
         "Unknown tool 'search_flights'. Available tools: search_direct_flight, "
         "search_onestop_flight, book_reservation"),
        ({"origin": "EWR", "destination": "ORD"},
         "Unknown tool 'search_flights'. Available tools: search_direct_flight, "
         "search_onestop_flight, book_reservation")], {}),
}
TEMPLATE_OF = {"NETWORK": "retry", "TIMEOUT": "background", "ARGS": "args_check",
               "NOTFOUND": "resolve", "SYNTAX": "repair", "CONFLICT": "precheck",
               "PERM": "permission", "RUNTIME": "guard", "TOOL_GAP": "alias"}


def scenario_event(code: str) -> BINEvent:
    tool, mode, calls, extra = SCENARIOS[code]
    return event_of(failing_calls(tool, mode, calls, **extra))


@pytest.mark.parametrize("code", sorted(SCENARIOS))
def test_designs_are_valid_and_reproduce_the_failure(code: str) -> None:
    event = scenario_event(code)
    design = OfflineDesigner().design(event, empty_manifest())
    assert design.behaviour == TEMPLATE_OF[code]
    assert design.answers == {"tool": event["tool"], "failure_mode": event["failure_mode"]}
    ids = {rec["id"] for rec in event["evidence"]}
    assert any(case.reproduces in ids for case in design.acceptance)
    assert OfflineDesigner().design(event, empty_manifest()) == design  # deterministic


@pytest.mark.parametrize("code", sorted(SCENARIOS))
def test_builds_a_working_python_tool(tmp_path: Path, code: str) -> None:
    result = runner_for(tmp_path / "lib").build(scenario_event(code))
    assert result.outcome == "gated", result.reason
    assert ToolLibrary(tmp_path / "lib").entry(result.tool["name"])["status"] == "probationary"


def test_tool_gap_is_named_after_the_missing_tool() -> None:
    design = OfflineDesigner().design(scenario_event("TOOL_GAP"), empty_manifest())
    assert design.name == "search_flights"
    assert design.config["alias"] == "search_direct_flight"


def test_declines_what_it_cannot_learn() -> None:
    unhinted = event_of(failing_calls("convert_currency", "TOOL_GAP", [
        ({"amount": 3}, "no such tool"), ({"amount": 4}, "no such tool")]))
    with pytest.raises(NoDesign, match="TOOL_GAP"):
        OfflineDesigner().design(unhinted, empty_manifest())
    vague = event_of(failing_calls("book", "ARGS", [({"a": 1}, "Error: bad request"),
                                                    ({"a": 2}, "Error: bad request")]))
    with pytest.raises(NoDesign, match="argument rule"):
        OfflineDesigner().design(vague, empty_manifest())


def test_name_clash_with_another_key_gets_a_suffix(tmp_path: Path) -> None:
    event = scenario_event("ARGS")
    manifest = empty_manifest()
    name = OfflineDesigner().design(event, manifest).name
    manifest["tools"][name] = {"name": name, "answers": {"tool": "x", "failure_mode": "ARGS"},
                               "status": "stable"}  # type: ignore[typeddict-item]
    assert OfflineDesigner().design(event, manifest).name == f"{name}_2"


def test_load_designer_by_name_and_import_path() -> None:
    assert load_designer("offline").name == "offline"
    assert load_designer("tests.designers:no_design").name == "no-design"
    with pytest.raises(ValueError):
        load_designer("no_such_thing")


# -- the templates' semantics (the reference implementations the tools are tested against)
PAYMENTS = {"payment_methods": [{"payment_id": "certificate_1", "amount": 250},
                                {"payment_id": "credit_card_2", "amount": 5}]}
SUM_RULE = {"kind": "sum_equals", "list": "payment_methods", "field": "amount",
            "param": "expected_total", "message": "does not add up"}


def test_args_check_repairs_a_payment_split() -> None:
    out = args_check.evaluate({"rules": [SUM_RULE]}, {"args": PAYMENTS, "expected_total": 305})
    assert (out["ok"], out["repaired"]) == (False, True)
    assert out["args"]["payment_methods"][1]["amount"] == 55
    assert out["changes"] == [{"path": "payment_methods[1].amount", "from": 5, "to": 55}]
    fine = args_check.evaluate({"rules": [SUM_RULE]}, {"args": out["args"], "expected_total": 305})
    assert fine["ok"] and fine["issues"] == []
    too_much = args_check.evaluate({"rules": [SUM_RULE]}, {"args": PAYMENTS, "expected_total": 10})
    assert not too_much["repaired"]  # the last amount would go negative


def test_args_check_coerces_types() -> None:
    rule = {"kind": "type", "path": "quantity", "type": "integer"}
    assert args_check.evaluate({"rules": [rule]}, {"args": {"quantity": "3"}})["args"] == {
        "quantity": 3}
    assert not args_check.evaluate({"rules": [rule]}, {"args": {"quantity": "two"}})["repaired"]


def test_resolve_prefers_the_only_identifier_of_the_same_kind() -> None:
    config = {"paths": ["payment_id"], "noun": "payment_id"}
    out = resolve.evaluate(config, {"args": {"payment_id": "credit_card_7334"},
                                    "known": ["gift_card_1", "credit_card_4421486"]})
    assert out["args"] == {"payment_id": "credit_card_4421486"} and out["repaired"]
    nothing = resolve.evaluate(config, {"args": {"payment_id": "credit_card_7334"},
                                        "known": ["gift_card_1"]})
    assert not nothing["repaired"] and nothing["unresolved"][0]["suggestions"] == ["gift_card_1"]


def test_repair_fixes_python_flavoured_json() -> None:
    assert repair.repair_json("{'a': True, b: [1, 2,],}") == '{"a": true, "b": [1, 2]}'
    assert repair.repair_json('```json\n{"a": {"b": 1}\n```') == '{"a": {"b": 1}}'
    assert repair.repair_expression("(2 + 3 \u00d7 4 +") == "(2 + 3 * 4)"


def test_retry_backs_off_only_on_transient_errors() -> None:
    config = {"tool": "fetch", "transient": ["connection reset"], "max_attempts": 3,
              "base_delay_ms": 0, "max_delay_ms": 0}
    calls: list[str] = []

    def flaky(tool: str, args: dict[str, Any]) -> Any:
        calls.append(tool)
        if len(calls) < 3:
            raise ConnectionError("Connection reset by peer")
        return {"rows": 1}

    assert retry.evaluate(config, {"args": {}}, flaky) == {
        "ok": True, "attempts": 3, "result": {"rows": 1}}

    def broken(tool: str, args: dict[str, Any]) -> Any:
        raise ValueError("invalid argument")

    assert retry.evaluate(config, {"args": {}}, broken)["attempts"] == 1
