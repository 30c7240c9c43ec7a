"""The tau2-bench trajectory converter (benchmarks/tau2_trajectories.py) on a simulation
in the file format of tau2-bench's leaderboard submissions."""

from __future__ import annotations

from benchmarks.tau2_trajectories import label, records_of
from binloop.core.schema import validate_record

SIMULATION = {"simulations": [{"id": "s1", "messages": [
    {"role": "assistant", "content": "", "turn_idx": 4, "tool_calls": [
        {"id": "c1", "name": "find_user_id_by_name_zip",
         "arguments": {"first_name": "Raj", "last_name": "Santos", "zip": "98157"}}]},
    {"id": "c1", "role": "tool", "content": "Error: User not found", "requestor": "assistant",
     "turn_idx": 5},
    {"role": "assistant", "content": "", "turn_idx": 6, "tool_calls": [
        {"id": "c2", "name": "get_order_details", "arguments": {"order_id": "#W1"}}]},
    {"id": "c2", "role": "tool", "content": "{\"order_id\": \"#W1\"}", "turn_idx": 7},
]}]}


def test_tool_messages_become_records() -> None:
    recs = [validate_record(r) for r in records_of("sub", SIMULATION, 0)]
    assert [(r["tool"], r["outcome"], r["failure_mode"]) for r in recs] == [
        ("find_user_id_by_name_zip", "failure", "NOTFOUND.user"),
        ("get_order_details", "success", None)]
    assert recs[0]["error"] == "Error: User not found" and recs[0]["args"]["zip"] == "98157"
    assert recs[0]["session_id"] == "sub:0" and recs[1]["ts"] - recs[0]["ts"] == 4000
    assert len({r["id"] for r in recs}) == 2


def test_labels() -> None:
    assert label("Error: Patient PT-84201 not found") == "NOTFOUND.patient"
    assert label("Error: Too many reservations") == "CONFLICT.reservation_limit"
    assert label("Error: something new") is None
