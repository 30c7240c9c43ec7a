"""`binloop build` exit codes and `binloop tools` on a real library, through the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from binloop.core.events import dumps_event
from tests.test_offline_designer import scenario_event
from tests.test_runner import payment_event

REPO = Path(__file__).resolve().parents[1]


def binloop(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("BINLOOP_LIBRARY", None)
    return subprocess.run([sys.executable, "-m", "binloop.cli", *args], capture_output=True,
                          text=True, env=env, timeout=300, check=False)


def test_build_exit_codes_and_tools_commands(tmp_path: Path) -> None:
    lib = str(tmp_path / "lib")
    events = tmp_path / "events.jsonl"
    events.write_bytes(dumps_event(payment_event()) + b"\n"
                       + dumps_event(scenario_event("NETWORK")) + b"\n")
    ambiguous = binloop("build", "--event", str(events), "--library", lib)
    assert ambiguous.returncode == 65 and "--event-id" in ambiguous.stderr
    payment_id = payment_event()["event_id"]
    gated = binloop("build", "--event", str(events), "--event-id", payment_id[:10],
                    "--library", lib, "--json")
    assert gated.returncode == 0, gated.stderr
    summary = orjson.loads(gated.stdout)
    name = summary["tool"]["name"]
    assert summary["outcome"] == "gated" and len(summary["stages"]) == 8

    one = tmp_path / "network.json"
    one.write_bytes(dumps_event(scenario_event("NETWORK")))
    rolled = binloop("build", "--event", str(one), "--library", lib,
                     "--designer", "tests.designers:no_design")
    assert rolled.returncode == 2 and "never designs" in rolled.stderr
    broken = tmp_path / "broken.json"
    broken.write_text('{"event_id": "x", "tool": "t"}')
    assert binloop("build", "--event", str(broken), "--library", lib).returncode == 65
    assert binloop("build", "--event", str(one), "--library", lib,
                   "--designer", "nowhere:nothing").returncode == 64

    listed = orjson.loads(binloop("tools", "list", "--library", lib, "--json").stdout)
    assert [(t["name"], t["status"]) for t in listed["tools"]] == [(name, "probationary")]
    shown = binloop("tools", "show", name, "--library", lib, "--json")
    assert shown.returncode == 0 and orjson.loads(shown.stdout)["modified_files"] == []

    uses = tmp_path / "uses.jsonl"
    uses.write_text("".join(
        orjson.dumps({"ts": 1_700_000_000_000 + i, "tool": name, "outcome": "success",
                      "session_id": 3, "args": {}}).decode() + "\n" for i in range(2))
                    + "not json\n")
    applied = orjson.loads(binloop("tools", "apply", "--telemetry", str(uses), "--library", lib,
                                   "--json").stdout)
    assert applied["invalid"] == 1
    assert applied["changes"] == [{"name": name, "version": 1, "from": "probationary",
                                   "to": "stable"}]
    assert binloop("tools", "quarantine", name, "--library", lib, "--reason", "bad").returncode == 0
    assert "quarantined" in binloop("tools", "list", "--library", lib).stdout
    assert binloop("tools", "promote", name, "--library", lib).returncode == 0
    assert binloop("tools", "rollback", name, "--library", lib).returncode == 64  # no v0
    assert binloop("tools", "show", "nope", "--library", lib).returncode == 66

    tool_file = tmp_path / "lib" / summary["tool"]["path"] / "tool.py"
    tool_file.write_text(tool_file.read_text() + "# tampered\n")
    tampered = binloop("tools", "show", name, "--library", lib)
    assert tampered.returncode == 1 and "tool.py" in tampered.stdout


@pytest.mark.slow
def test_a_name_with_nul_and_newline_builds_and_is_listed_escaped(tmp_path: Path) -> None:
    """A tool name from telemetry is data: the generated identifiers and paths come from
    the slug, the source holds the name as an escaped literal, a listing escapes it."""
    from tests.buildkit import event_of, failing_calls
    from tests.test_runner import PAYMENT_ERROR

    forged = "book_reservation\x00x\nfake_tool v9 stable python ok 99"
    calls = [({"user_id": "mia_li_3668", "payment_methods": [
        {"payment_id": f"certificate_{750 + i}", "amount": a} for i, a in enumerate(amounts)]},
        PAYMENT_ERROR.format(total=total, paid=sum(amounts)))
        for total, amounts in ((305, [250, 5]), (410, [300, 60]))]
    event = tmp_path / "event.json"
    event.write_bytes(dumps_event(event_of(failing_calls(
        forged, "ARGS.payment_total_mismatch", calls))))
    lib = tmp_path / "lib"
    built = binloop("build", "--event", str(event), "--library", str(lib), "--json")
    assert built.returncode == 0, built.stderr
    tool = orjson.loads(built.stdout)["tool"]
    assert "\x00" not in tool["name"] and "\n" not in tool["name"]
    source = next((lib / "tools" / tool["name"]).glob("v*/tool.py"))
    compile(source.read_text(), str(source), "exec")  # no SyntaxError from the name
    assert repr(forged) in source.read_text()
    listed = binloop("tools", "list", "--library", str(lib))
    assert listed.returncode == 0, listed.stderr
    assert len(listed.stdout.splitlines()) == 2  # the header and one tool: nothing forged
    assert '"book_reservation\\u0000x\\nfake_tool v9 stable python ok 99"' in listed.stdout
    as_json = orjson.loads(binloop("tools", "list", "--library", str(lib), "--json").stdout)
    assert as_json["tools"][0]["tool"] == forged
