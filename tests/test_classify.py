"""The failure-mode classifier (binloop.core.classify) and its place in the parse step."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from binloop.core.classify import (
    CLASSIFIER_VERSION,
    FAILURE_MODE_SETTINGS,
    LEVEL1_RULES,
    classify,
    message_template,
)
from binloop.core.config import Config, load_config
from binloop.core.schema import TAXONOMY, RecordLimits, parse_record, validate_record
from pipeline_runner.event_input import check_event
from tests.engine_runs import (
    engine_config,
    run_bytewax_on,
    run_polars_on,
    run_reference_on,
    same_as_reference,
)

TOKEN = re.compile(r"[a-z0-9_]{1,40}")

# Messages as real tools and runtimes write them (not the tau-bench texts the evaluation
# compares against), with the code a reader would give them.
CORPUS: list[tuple[str, str]] = [
    ("FileNotFoundError: [Errno 2] No such file or directory: 'src/app/models.py'", "NOTFOUND"),
    ("ENOENT: no such file or directory, open '/srv/data/report.csv'", "NOTFOUND"),
    ("ModuleNotFoundError: No module named 'pandas'", "NOTFOUND"),
    ("error: pathspec 'feature/login' did not match any file(s) known to git", "NOTFOUND"),
    ("HTTP Error 404: Not Found", "NOTFOUND"),
    ("PermissionError: [Errno 13] Permission denied: '/etc/shadow'", "PERM"),
    ("EACCES: permission denied, mkdir '/usr/lib/node_modules/x'", "PERM"),
    ("403 Forbidden: the token lacks the repo scope", "PERM"),
    ("OSError: [Errno 30] Read-only file system: '/app/cache'", "PERM"),
    ("401 Unauthorized: invalid api key", "PERM"),
    ("TimeoutError: timed out after 30s waiting for the page", "TIMEOUT"),
    ("subprocess.TimeoutExpired: Command 'pytest' timed out after 600 seconds", "TIMEOUT"),
    ("context deadline exceeded", "TIMEOUT"),
    ("json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)", "SYNTAX"),
    ("SyntaxError: invalid syntax (main.py, line 12)", "SYNTAX"),
    ("yaml.scanner.ScannerError: mapping values are not allowed here", "SYNTAX"),
    ("SyntaxError: Unexpected token } in JSON at position 42", "SYNTAX"),
    ("bash: jq: command not found", "TOOL_GAP"),
    ("NotImplementedError: PDF input is not supported yet", "TOOL_GAP"),
    ("unknown tool: resize_image", "TOOL_GAP"),
    ("ValueError: invalid literal for int() with base 10: 'abc'", "ARGS"),
    ("TypeError: missing required argument: 'path'", "ARGS"),
    ("422 Unprocessable Entity: field 'email' must be a valid address", "ARGS"),
    ("error: unrecognized arguments: --frobnicate", "ARGS"),
    ("CONFLICT (content): Merge conflict in src/app.py", "CONFLICT"),
    ("! [rejected] main -> main (fetch first)", "CONFLICT"),
    ("duplicate key value violates unique constraint \"users_email_key\"", "CONFLICT"),
    ("409 Conflict: resource was modified by another request", "CONFLICT"),
    ("insufficient funds in account 4411", "CONFLICT"),
    ("requests.exceptions.ConnectionError: Connection refused", "NETWORK"),
    ("getaddrinfo ENOTFOUND api.example.com", "NETWORK"),
    ("429 Too Many Requests: rate limit exceeded, retry after 20s", "NETWORK"),
    ("ssl.SSLCertVerificationError: certificate verify failed", "NETWORK"),
    ("503 Service Unavailable", "NETWORK"),
    ("KeyError: 'total'", "RUNTIME"),
    ("Segmentation fault (core dumped)", "RUNTIME"),
    ("Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n"
     "ZeroDivisionError: division by zero", "RUNTIME"),
]


@pytest.mark.parametrize(("text", "code"), CORPUS)
def test_level1_rules_on_real_messages(text: str, code: str) -> None:
    assert classify(text).code == code


def test_a_timeout_is_a_timeout_whatever_the_text() -> None:
    assert classify("Permission denied", "timeout").code == "TIMEOUT"
    assert classify("tool ran out of patience", "timeout").code == "TIMEOUT"
    assert classify("tool ran out of patience", "failure").code == "RUNTIME"


def test_rules_only_give_taxonomy_codes() -> None:
    assert {code for code, _ in LEVEL1_RULES} <= TAXONOMY
    assert "RUNTIME" in TAXONOMY  # the default


@pytest.mark.parametrize(("one", "other"), [
    ("total price is 570, but paid 520", "total price is 340, but paid 310"),
    ("No such file or directory: 'src/a.py'", "No such file or directory: 'lib/b/c.py'"),
    ("user 3f2b8c1e-1d2a-4c5b-9e8f-0a1b2c3d4e5f not found",
     "user 9a2b8c1e-1d2a-4c5b-9e8f-0a1b2c3d4e5f not found"),
    ("lock held since 2024-05-13T10:22:01Z by pid 4411",
     "lock held since 2025-01-02 08:00 by pid 7"),
    ("flight HAT030 has no seats", "flight UA2 has no seats"),
    ("Patient PT-84201 not found", "Patient PC-2016-0314-ECW not found"),
    ("object 0x7f3a9c00 freed twice", "object 0x55aa0010 freed twice"),
    ("GET https://api.example.com/v1/items/77 failed", "GET http://db.internal:8080/x failed"),
    ("connect to 10.0.0.1:5432 refused", "connect to 192.168.1.20:6379 refused"),
    ("commit deadbeef12 is not an ancestor", "commit 0a1b2c3d4e is not an ancestor"),
])
def test_variable_parts_are_masked(one: str, other: str) -> None:
    assert message_template(one) == message_template(other)
    assert classify(one) == classify(other)


def test_different_messages_get_different_tokens() -> None:
    a, b = classify("payment method not found"), classify("payment method not valid")
    assert a.token != b.token
    # same words, different template: the hash keeps them apart
    assert classify("not found: <x>").token != classify("not found: x").token


def test_token_shape_and_template_of_a_tau_message() -> None:
    got = classify("Error: payment amount does not add up, total price is 305, but paid 255")
    assert got.template == ("Error: payment amount does not add up, total price is <NUM>, "
                            "but paid <NUM>")
    assert got.token.startswith("payment_amount_does_not_add_up_")
    assert TOKEN.fullmatch(got.token)


def test_the_message_of_a_traceback_is_its_last_line() -> None:
    tb = ("Traceback (most recent call last):\n  File \"/srv/app/a.py\", line 9, in run\n"
          "    x = d['k']\nKeyError: 'k'")
    other = tb.replace("/srv/app/a.py", "/opt/b.py").replace("line 9", "line 120")
    assert classify(tb).template == "KeyError: <STR>" == classify(other).template


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=300), outcome=st.sampled_from(["failure", "timeout"]))
def test_any_text_gives_a_valid_mode(text: str, outcome: str) -> None:
    got = classify(text, outcome)
    assert TOKEN.fullmatch(got.token)
    assert got.code in TAXONOMY
    rec = validate_record({"session_id": 1, "ts": 1, "tool": "t", "outcome": outcome,
                           "failure_mode": got.failure_mode})
    assert rec["failure_mode"] == got.failure_mode
    assert classify(text, outcome) == got  # pure: same input, same answer


def test_same_answer_in_another_process() -> None:
    """No learned state and no per-process salt (str hash): a fresh interpreter agrees."""
    texts = [t for t, _ in CORPUS]
    here = [classify(t).failure_mode for t in texts]
    code = ("import json,sys; from binloop.core.classify import classify; "
            "print(json.dumps([classify(t).failure_mode for t in json.load(sys.stdin)]))")
    there = subprocess.run([sys.executable, "-c", code], input=json.dumps(texts), text=True,
                           capture_output=True, check=True, env={"PYTHONHASHSEED": "12345"})
    assert json.loads(there.stdout) == here


# --- the parse step --------------------------------------------------------------------

def _line(**fields: Any) -> bytes:
    base = {"session_id": 7, "ts": 1_700_000_000_000, "tool": "read_file", "args": {},
            "outcome": "failure"}
    return json.dumps({**base, **fields}).encode()


def _limits(setting: str) -> RecordLimits:
    return Config(failure_modes=setting).record_limits()


def test_default_setting_is_given_else_infer() -> None:
    assert Config().failure_modes == "given-else-infer"
    assert set(FAILURE_MODE_SETTINGS) == {"given", "infer", "given-else-infer"}
    assert load_config({"failure_modes": "infer"}).failure_modes == "infer"
    with pytest.raises(ValueError, match="failure_modes"):
        load_config({"failure_modes": "guess"})
    assert CLASSIFIER_VERSION  # part of the detection-config digest


def test_the_classifier_version_is_in_the_event_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another classifier version is another detection configuration (so other event
    ids) whenever modes are inferred; with `given` it plays no part."""
    import binloop.core.classify as classify_module

    before = {mode: Config(failure_modes=mode).config_digest()
              for mode in FAILURE_MODE_SETTINGS}
    monkeypatch.setattr(classify_module, "CLASSIFIER_VERSION", CLASSIFIER_VERSION + "-next")
    after = {mode: Config(failure_modes=mode).config_digest()
             for mode in FAILURE_MODE_SETTINGS}
    assert after["given"] == before["given"]
    assert all(after[mode] != before[mode] for mode in ("infer", "given-else-infer"))
    assert len(set(before.values())) == 3


@pytest.mark.parametrize("setting", FAILURE_MODE_SETTINGS)
def test_the_setting_decides_which_records_get_an_inferred_mode(setting: str) -> None:
    limits = _limits(setting)
    text = "FileNotFoundError: [Errno 2] No such file or directory: 'a/b.py'"
    bare = parse_record(_line(error=text), limits)
    given = parse_record(_line(error=text, failure_mode="ARGS.bad_path"), limits)
    if setting == "given":
        assert bare["failure_mode"] is None and "error_template" not in bare
        assert given["failure_mode"] == "ARGS.bad_path"
    else:
        assert bare["failure_mode"] == classify(text).failure_mode
        assert bare["failure_mode"].startswith("NOTFOUND.filenotfounderror_errno_no_such_")
        assert bare["error_template"] == "FileNotFoundError: [Errno <NUM>] No such file or " \
                                         "directory: <STR>"
        expected = "ARGS.bad_path" if setting == "given-else-infer" else bare["failure_mode"]
        assert given["failure_mode"] == expected


def test_inference_keeps_the_record_id_and_touches_only_what_counts() -> None:
    limits = _limits("infer")
    plain = parse_record(_line(error="Permission denied"), RecordLimits())
    inferred = parse_record(_line(error="Permission denied"), limits)
    assert inferred["id"] == plain["id"]  # the call's identity, not the verdict's
    assert inferred["failure_mode"].startswith("PERM.")
    success = parse_record(_line(outcome="success", error="Permission denied"), limits)
    assert success["failure_mode"] is None
    cancelled = parse_record(_line(outcome="cancelled", error="Permission denied"), limits)
    assert cancelled["failure_mode"] is None  # not a counted outcome
    only_failures = Config(failure_modes="infer", count_outcomes=frozenset({"failure"}))
    timeout = parse_record(_line(outcome="timeout", error="x"), only_failures.record_limits())
    assert timeout["failure_mode"] is None
    silent = parse_record(_line(), limits)
    assert silent["failure_mode"] is None  # no text: nothing to infer from


def test_an_inferred_record_is_valid_evidence() -> None:
    rec = parse_record(_line(error="Error: not enough seats on flight HAT290"), _limits("infer"))
    event = check_event({"event_id": "e" * 64, "tool": rec["tool"],
                         "failure_mode": rec["failure_mode"],
                         "evidence": [json.loads(json.dumps(rec))]})
    assert event["evidence"][0]["error_template"] == "Error: not enough seats on flight <ID>"
    assert event["evidence"][0]["failure_mode"] == rec["failure_mode"]


# --- every engine infers the same modes ------------------------------------------------

def _mixed_file(path: Path) -> Path:
    texts = [t for t, _ in CORPUS[:12]]
    lines = []
    for i in range(240):
        fields: dict[str, Any] = {"session_id": i % 5, "ts": 1_700_000_000_000 + i * 1000,
                                  "tool": f"tool_{i % 3}", "args": {"i": i},
                                  "outcome": ("failure", "timeout", "success", "cancelled")[i % 4]}
        if fields["outcome"] != "success":
            fields["error"] = texts[i % len(texts)].replace("12", str(i))
        if i % 7 == 0:
            fields["failure_mode"] = "ARGS.given"
        lines.append(json.dumps(fields, sort_keys=True))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("setting", FAILURE_MODE_SETTINGS)
def test_engines_agree_on_inferred_modes(tmp_path: Path, setting: str) -> None:
    path = _mixed_file(tmp_path / "in.jsonl")
    knobs = {"theta": 2, "window": Config().window.parse("global"), "failure_modes": setting}
    reference = run_reference_on(engine_config(path, tmp_path / "ref", **knobs))
    assert reference.events, "the file must fire events"
    inferred = [e for e in reference.events if e["failure_mode"] != "ARGS.given"]
    assert bool(inferred) == (setting != "given")
    assert run_polars_on(engine_config(path, tmp_path / "pol", **knobs)) == reference
    same_as_reference(run_bytewax_on(engine_config(path, tmp_path / "bw", batch_size=16,
                                                   **knobs), workers=2), reference)


def test_engines_agree_on_tau_without_modes(tmp_path: Path, tau_telemetry: Path) -> None:
    stripped = tmp_path / "tau.jsonl"
    rows = [json.loads(line) for line in tau_telemetry.read_text().splitlines() if line]
    stripped.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "failure_mode"})
                                + "\n" for r in rows))
    reference = run_reference_on(engine_config(stripped, tmp_path / "ref", theta=3))
    assert {(e["tool"], e["failure_mode"].split(".")[0]) for e in reference.events} == {
        ("book_reservation", "RUNTIME"), ("book_reservation", "NOTFOUND"),
        ("update_reservation_flights", "CONFLICT")}
    assert all(r["error_template"] for e in reference.events for r in e["evidence"])
    assert run_polars_on(engine_config(stripped, tmp_path / "pol", theta=3)) == reference
    same_as_reference(run_bytewax_on(engine_config(stripped, tmp_path / "bw", theta=3)),
                      reference)


def test_the_vectorised_variant_gives_the_parse_steps_modes(tau_telemetry: Path) -> None:
    import polars as pl

    from binloop.engines.polars.classify import infer_modes

    limits = _limits("infer")
    records = [parse_record(line, limits) for line in tau_telemetry.read_bytes().splitlines()
               if line.strip()]
    frame = pl.DataFrame({"error": [r.get("error") for r in records],
                          "outcome": [r["outcome"] for r in records]})
    got = infer_modes(frame)
    counted = [r["failure_mode"] if "error_template" in r else None for r in records]
    assert got["inferred_mode"].to_list() == counted
    assert got["error_template"].to_list() == [r.get("error_template") for r in records]
