"""Redaction that deserves the word (issue 11, point 5).

Every secret form of tests/data/redaction_corpus.json is asserted absent from every
output of the real command paths (`binloop detect --out/--dead-letter` on each engine,
the live job's events file and its `BIN_EVENTS` stream on a real nats-server, a
build's audit record, library and designer input, log lines); the corpus's ordinary
values are asserted kept in the events, so evidence stays useful.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from binloop.core.redact import (
    MASK,
    RULES_PATH,
    Redactor,
    is_secret_key,
    redact_event,
    rules,
)
from binloop.nats.server import NatsServer
from tests import redaction_corpus as rc
from tests.nonroot import as_user, binloop_cli, is_root, shared_dir

REPO = Path(__file__).resolve().parents[1]
SECRET_IDS = [form["id"] for form in rc.secrets()]
ORDINARY_IDS = [form["id"] for form in rc.corpus()["ordinary"]]
USERS = ["current", "nobody"] if is_root() else ["current"]


def _alone(form: dict[str, Any]) -> dict[str, Any]:
    args = dict(form.get("args", {}))
    if "arg_text" in form:
        args["q"] = form["arg_text"]
    return {"args": args, "error": form.get("error", "")}


def test_the_corpus_has_at_least_40_secret_forms() -> None:
    assert len(rc.secrets()) >= 40 and len(set(SECRET_IDS)) == len(SECRET_IDS)
    assert len(rc.corpus()["ordinary"]) >= 20


@pytest.mark.parametrize("form_id", SECRET_IDS)
def test_each_secret_form_is_redacted(form_id: str) -> None:
    form = next(f for f in rc.secrets() if f["id"] == form_id)
    redactor = Redactor()
    clean = orjson.dumps(redactor.record(_alone(form)))  # type: ignore[arg-type]
    assert rc.leaks(clean) == [], clean
    assert MASK.encode() in clean and redactor.count >= 1
    # Idempotent: redacting the result again changes nothing.
    again = Redactor()
    assert again.record(orjson.loads(clean)) == orjson.loads(clean) and again.count == 0


@pytest.mark.parametrize("form_id", ORDINARY_IDS)
def test_each_ordinary_value_is_kept(form_id: str) -> None:
    form = next(f for f in rc.corpus()["ordinary"] if f["id"] == form_id)
    record = {"args": {form.get("key", "value"): form["value"]}, "error": str(form["value"])}
    assert Redactor().record(record) == record  # type: ignore[arg-type]


def test_real_telemetry_is_left_as_it_is() -> None:
    """The 1,164 calls of tau-bench's airline agent hold no secret: nothing changes."""
    path = REPO.parent.parent / "shared" / "data" / "tau_airline_telemetry.jsonl"
    if not path.exists():
        path = Path("/work/shared/data/tau_airline_telemetry.jsonl")
    records = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    assert len(records) >= 1000
    redactor = Redactor()
    assert [redactor.record(r) for r in records] == records and redactor.count == 0


def test_key_names_match_whatever_their_case_and_separators() -> None:
    for key in ("dbPassword", "DB_PASSWORD", "db-password", "db.password", "DbPassword",
                "apiToken", "api_token", "API-TOKEN", "awsSecretAccessKey", "x-api-key",
                "APIKey", "apikey", "pass", "PWD", "privateKey", "private_key", "Cookie",
                "set-cookie", "sessionToken", "X-Amz-Signature", "clientSecret", "credentials"):
        assert is_secret_key(key), key
    for key in ("max_tokens", "token_count", "passengers", "author", "session_id",
                "token_type", "passport_number", "key", "keys", "bypass", "password_hint",
                "auth_method", "tokenizer", "signature_version", "secret_name"):
        assert not is_secret_key(key), key


def test_identifiers_are_never_changed() -> None:
    """Entropy applies to args values and errors only: the ids dedup and `reproduces`
    need, the tool, the failure mode and the session/agent ids stay as they are."""
    high = "Zx8Kq2Lm9Pw4Rt7Yb3Nc6Vd1Qe5"
    record = {"id": "ab" * 32, "session_id": high, "agent_id": high, "tool": high,
              "failure_mode": "ARGS.x", "ts": 1, "outcome": "failure",
              "args": {"q": high}, "error": f"bad {high}"}
    event = {"event_id": "cd" * 32, "tool": high, "failure_mode": "ARGS.x",
             "evidence": [record], "config": {"digest": high}}
    clean = redact_event(event)  # type: ignore[arg-type]
    kept = clean["evidence"][0]
    assert {k: kept[k] for k in ("id", "session_id", "agent_id", "tool")} == {
        k: record[k] for k in ("id", "session_id", "agent_id", "tool")}
    assert clean["event_id"] == event["event_id"] and clean["tool"] == high
    assert clean["config"] == event["config"]
    assert kept["args"] == {"q": MASK} and kept["error"] == f"bad {MASK}"
    assert event["evidence"][0]["args"] == {"q": high}  # the input is not changed


def test_the_rules_mean_the_same_in_javascript() -> None:
    """Every pattern of the shipped rule file compiles in node (flags + 'gd', as the
    Hanzo bridge plugin uses them) and finds the same secret spans as Python."""
    from pipeline_runner.toolchain import node_binary

    data = orjson.loads(RULES_PATH.read_bytes())
    texts = [t for f in rc.secrets() for t in (f.get("error"), f.get("arg_text")) if t]
    texts += [str(f["value"]) for f in rc.corpus()["ordinary"]]
    texts.append("x failed: DB_PASSWORD=abc password=token=xyz --api-key k9 -u a:b")
    expected = []
    for rule, compiled in zip(data["text_rules"], rules().text, strict=True):
        spans = []
        for text in texts:
            spans.append([[m.start(compiled.secret_group), m.end(compiled.secret_group)]
                          for m in compiled.pattern.finditer(text)])
        expected.append({"id": rule["id"], "spans": spans})
    program = """
const data = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const out = data.rules.map(rule => ({id: rule.id, spans: data.texts.map(text =>
  Array.from(text.matchAll(new RegExp(rule.pattern, rule.flags + 'gd')),
             m => m.indices[rule.secret_group] || [m.index, m.index]))}));
process.stdout.write(JSON.stringify(out));
"""
    run = subprocess.run([str(node_binary()), "-e", program], capture_output=True, timeout=60,
                         input=orjson.dumps({"rules": data["text_rules"], "texts": texts}),
                         check=True)
    got = orjson.loads(run.stdout)
    for mine, theirs in zip(expected, got, strict=True):
        assert mine == theirs, mine["id"]
    entropy = data["entropy"]
    assert subprocess.run([str(node_binary()), "-e", "for (const p of JSON.parse(process.argv[1]))"
                           " new RegExp(p, 'g')", orjson.dumps(
                               [entropy["token_pattern"], *entropy["exempt_patterns"],
                                *entropy["exempt_if_contains"], data["keys"]["word_pattern"]]
                           ).decode()], timeout=60, check=False).returncode == 0


def test_log_lines_are_redacted() -> None:
    """Messages and tracebacks: the text rules (the entropy rule is for evidence only:
    log lines carry build ids and event ids)."""
    from binloop.core.logs import setup_logging

    for log_format in ("text", "json"):
        stream = io.StringIO()
        setup_logging(log_format, "info", stream)
        log = logging.getLogger("binloop.test")
        texts = [f["error"] for f in rc.secrets()
                 if "error" in f and not f["id"].startswith("entropy_")]
        for text in texts:
            log.warning("bad event: %s", text)
        try:
            raise ValueError(" | ".join(texts))
        except ValueError:
            log.exception("build failed")
        logged = stream.getvalue().encode()
        assert logged.count(b"bad event") == len(texts)
        for form in rc.secrets():
            if form.get("error") in texts:
                assert str(form["secret"]).encode() not in logged, form["id"]
    setup_logging("text", "info")


# -- the real command paths ------------------------------------------------------------
def _write_telemetry(path: Path) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in rc.telemetry_lines()))
    return path


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "binloop.cli", *args], capture_output=True,
                          timeout=600, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def _assert_clean_outputs(*blobs: bytes) -> None:
    for blob in blobs:
        assert rc.leaks(blob) == [], blob[:2000]


@pytest.mark.parametrize("engine", ["bytewax", "reference", "polars"])
def test_detect_writes_no_secret_to_events_dead_letters_or_stderr(tmp_path: Path,
                                                                  engine: str) -> None:
    telemetry = _write_telemetry(tmp_path / "telemetry.jsonl")
    out, dead = tmp_path / "events.jsonl", tmp_path / "dead.jsonl"
    run = _cli("detect", "--engine", engine, "--input", str(telemetry), "--out", str(out),
               "--dead-letter", str(dead), "--theta", "3", "--max-future-skew", "off")
    assert run.returncode == 0, run.stderr
    events = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert len(events) == 1 and len(events[0]["evidence"]) == 3
    letters = dead.read_bytes().splitlines()
    assert len(letters) == len(rc.invalid_lines())
    _assert_clean_outputs(out.read_bytes(), dead.read_bytes(), run.stdout, run.stderr)
    assert rc.kept_ordinary(out.read_bytes()) == []
    assert [r["id"] for r in events[0]["evidence"]] == [
        orjson.loads(line)["id"] for line in _ids_of(telemetry)]
    # Dead letters on stderr (no --dead-letter), as text and as JSON log lines.
    for log_format in ("text", "json"):
        run = _cli("detect", "--engine", engine, "--input", str(telemetry), "--out",
                   str(tmp_path / f"events-{log_format}.jsonl"), "--log-format", log_format,
                   "--max-future-skew", "off")
        assert run.returncode == 0, run.stderr
        assert run.stderr.count(b"dead") >= len(rc.invalid_lines())
        _assert_clean_outputs(run.stdout, run.stderr)


def _ids_of(telemetry: Path) -> list[bytes]:
    from binloop.core.schema import dumps_record, validate_record

    return [dumps_record(validate_record(r, limits=_no_skew())) for r in rc.failing_records()]


def _no_skew() -> Any:
    from binloop.core.schema import RecordLimits

    return RecordLimits(max_future_skew_ms=None)


@pytest.mark.slow
def test_the_live_job_sends_no_secret_to_bin_events(tmp_path: Path) -> None:
    """`binloop run` against a real nats-server: BIN_EVENTS, the events file, the dead
    letters and the job's log hold none of the corpus's secrets."""
    from binloop.cli.commands.run import run_live
    from tests.nats_fixtures import live_config, publish, stream_messages

    server = NatsServer(store_dir=tmp_path / "nats")
    server.start()
    try:
        publish(server.url, rc.telemetry_lines())
        config = live_config(server.url, tmp_path, max_future_skew="off", theta="3")
        stream = io.StringIO()
        from binloop.core.logs import setup_logging

        setup_logging("json", "debug", stream)
        try:
            run_live(config)
        finally:
            setup_logging("text", "info")
        messages = stream_messages(server.url, "BIN_EVENTS")
    finally:
        server.close()
    assert len(messages) == 1
    payloads = b"\n".join(payload for _, _, payload in messages)
    _assert_clean_outputs(payloads, (tmp_path / "events.jsonl").read_bytes(),
                          (tmp_path / "dead.jsonl").read_bytes(), stream.getvalue().encode())
    assert rc.kept_ordinary(payloads) == []
    assert len((tmp_path / "dead.jsonl").read_bytes().splitlines()) >= len(rc.invalid_lines())


@pytest.mark.slow
@pytest.mark.parametrize("user", USERS)
def test_a_build_writes_no_secret_to_audit_library_or_designer_input(tmp_path: Path,
                                                                     user: str) -> None:
    """`binloop build` from the events file that `binloop detect` wrote, with a designer
    that records its input (what an LLM provider would receive); as root and `nobody`."""
    unprivileged = user == "nobody"
    telemetry = _write_telemetry(tmp_path / "telemetry.jsonl")
    events = tmp_path / "events.jsonl"
    run = _cli("detect", "--engine", "reference", "--input", str(telemetry), "--out",
               str(events), "--dead-letter", str(tmp_path / "dead.jsonl"),
               "--max-future-skew", "off")
    assert run.returncode == 0, run.stderr
    # The raw event too (as a producer outside binloop might send it): the runner
    # redacts what it is given, whatever redacted it before.
    raw_event = tmp_path / "raw_event.json"
    event = orjson.loads(events.read_bytes())
    event["evidence"] = [{**rec, "args": raw["args"], "error": raw["error"]}
                         for rec, raw in zip(event["evidence"], rc.failing_records(),
                                             strict=True)]
    raw_event.write_bytes(orjson.dumps(event))
    assert rc.leaks(raw_event.read_bytes()) != []
    work = shared_dir("binloop-c2-redaction-")
    try:
        spy = work / "designer_input.jsonl"
        library = work / "lib"
        event_file = work / "raw_event.json"
        shutil.copy(raw_event, event_file)
        if is_root():
            os.chown(event_file, 65534, 65534)
        run = subprocess.run(
            as_user([*binloop_cli(unprivileged), "build", "--event", str(event_file),
                     "--library", str(library), "--designer",
                     "tests.redaction_corpus:spy_factory", "--json"], unprivileged),
            capture_output=True, timeout=600, cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), rc.SPY_ENV: str(spy)})
        _check_build(run, spy, library)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _check_build(run: subprocess.CompletedProcess[bytes], spy: Path, library: Path) -> None:
    assert run.returncode == 0, (run.stdout, run.stderr)
    result = orjson.loads(run.stdout)
    assert result["outcome"] == "gated", result["reason"]
    files = rc.files_under(library)
    assert any(p.parent.name == "audit" for p in files)
    assert any("tools" in p.parts for p in files)
    _assert_clean_outputs(spy.read_bytes(), run.stdout, run.stderr,
                          *(p.read_bytes() for p in files))
    seen = orjson.loads(spy.read_bytes().splitlines()[0])["event"]
    assert rc.kept_ordinary(orjson.dumps(seen)) == []
    audit = orjson.loads(next(p for p in files if p.parent.name == "audit").read_bytes())
    # Fewer than the forms: a PEM block without its END line masks the rest of its text.
    assert audit["redactions"] >= len(rc.secrets()) // 2


def test_needles_are_sound_on_the_corpus() -> None:
    """A rule's needles only skip texts the rule cannot match: wherever its pattern
    matches a corpus text (or a mutation of it), one of its needles is in that text."""
    texts = [t for f in rc.secrets() for t in (f.get("error"), f.get("arg_text")) if t]
    texts += [orjson.dumps(f["args"]).decode() for f in rc.secrets() if "args" in f]
    texts += [t.upper() for t in texts] + [t.lower() for t in texts]
    for rule in rules().text:
        for text in texts:
            if rule.pattern.search(text):
                haystack = text.lower() if rule.folded else text
                assert any(n in haystack for n in rule.needles), (rule.id, text)
