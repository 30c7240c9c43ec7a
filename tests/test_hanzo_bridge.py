"""The bridge plugin's parts that need no bot: binloop's redaction rules, subjects and
records, run under node exactly as the bridge runs them (the bridge's own modules)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from binloop.core.redact import Redactor
from binloop.core.schema import validate_record
from binloop.nats.subjects import subject_token
from pipeline_runner.hanzo.redact_rules import RULES_FILE, rules_json
from pipeline_runner.toolchain import ToolchainUnavailable, node_binary
from tests.test_redact import SECRETS

BRIDGE = Path(__file__).resolve().parents[1] / "pipeline_runner/hanzo/bridge"
PROXY = Path(__file__).resolve().parents[1] / "binloop/library/hanzo_proxy"


def run_node(tmp_path: Path, body: str, data: Any) -> Any:
    """`body` (an ES module that may use `DATA` and must print one JSON line) under node."""
    try:
        node = node_binary()
    except ToolchainUnavailable as exc:
        pytest.skip(str(exc))
    script = tmp_path / "probe.mts"
    script.write_text(f"const DATA = {json.dumps(data)};\n{body}\n")
    run = subprocess.run([str(node), "--disable-warning=ExperimentalWarning", str(script)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_rules_file_is_binloops_rule_set() -> None:
    assert RULES_FILE.read_bytes() == rules_json(), \
        "regenerate: python -m pipeline_runner.hanzo.redact_rules"


CORPUS: list[Any] = [
    *(f"request failed with key {secret} (retry later)" for secret in SECRETS),
    "401 Unauthorized: Authorization: Bearer abc.def.ghi-123456 sent to "
    "https://admin:hunter2@db.example.com/x with password=s3cr3t&user=bob",
    "key: -----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY----- end",
    {"user": "bob", "api_key": "plain-looking", "nested": {"password": 1234, "pin": "0000"},
     "headers": [{"Authorization": "Basic Ym9iOnB3"}], "max_tokens": 300, "flight": "HAT136"},
    {"user_id": "mia_li_3668", "payment_methods": [{"payment_id": "certificate_7504069",
                                                    "amount": 250}], "token": "t-123"},
    "total price is 570, but paid 520", "/var/data/run-2.log", "ok",
]


def test_the_bridge_redacts_exactly_as_binloop(tmp_path: Path) -> None:
    body = f'''import {{ redactValue }} from "{(BRIDGE / "src/redact.ts").as_uri()}";
console.log(JSON.stringify(DATA.map((value) => redactValue(value))));'''
    ours = run_node(tmp_path, body, CORPUS)
    assert ours == [Redactor().value(value) for value in CORPUS]
    for secret in SECRETS:
        assert secret not in json.dumps(ours)


TOKENS = ["abc", 42, "has.dot", "sp ace", "é*>", "", "x" * 300, "tool_name-1"]


def test_subjects_are_escaped_as_binloop_escapes_them(tmp_path: Path) -> None:
    body = f'''import {{ subjectToken }} from "{(BRIDGE / "src/subjects.ts").as_uri()}";
console.log(JSON.stringify(DATA.map((v) => subjectToken(v))));'''
    assert run_node(tmp_path, body, TOKENS) == [subject_token(v) for v in TOKENS]


def test_a_tool_call_becomes_a_valid_record(tmp_path: Path) -> None:
    body = f'''import {{ toRecord }} from "{(BRIDGE / "src/record.ts").as_uri()}";
const out = DATA.map(([event, ctx, prefix]) =>
  toRecord(event, ctx, {{ agentId: "bot-1", failureModePrefix: prefix, now: 1764590000000 }}));
console.log(JSON.stringify(out));'''
    calls = [
        [{"toolName": "book_reservation", "params": {"user_id": "u1", "password": "pw1"},
          "toolCallId": "c1", "runId": "r1",
          "error": "Error: payment amount does not add up, total price is 305, but paid 255 "
                   "(token=abcdef123456)", "durationMs": 12.4},
         {"sessionId": "s-1", "agentId": "main", "toolName": "book_reservation"}, False],
        [{"toolName": "get_quote", "params": {"flight": "HAT136"}, "toolCallId": "c2",
          "result": {"content": [], "details": {"ok": True}}},
         {"sessionKey": "agent:main:telegram", "toolName": "get_quote"}, False],
        [{"toolName": "get_quote", "params": {}, "toolCallId": "c3",
          "error": "NETWORK.upstream_reset: connection reset"},
         {"sessionId": "s-1", "toolName": "get_quote"}, True],
        [{"toolName": "get_quote", "params": {}, "toolCallId": "c4",
          "result": {"details": {"status": "error", "tool": "get_quote", "error": "boom"}}},
         {"sessionId": "s-1", "toolName": "get_quote"}, False],
    ]
    failed, ok, prefixed, adapted = run_node(tmp_path, body, calls)
    assert failed["args"] == {"user_id": "u1", "password": "[REDACTED]"}
    assert "abcdef123456" not in failed["error"] and failed["failure_mode"] is None
    assert (failed["outcome"], failed["session_id"], failed["agent_id"], failed["duration_ms"]) \
        == ("failure", "s-1", "main", 12)
    assert (ok["outcome"], ok["session_id"], ok["agent_id"]) == \
        ("success", "agent:main:telegram", "bot-1")
    assert prefixed["failure_mode"] == "NETWORK.upstream_reset"
    assert (adapted["outcome"], adapted["error"]) == ("failure", "boom")
    for record in (failed, ok, prefixed, adapted):
        assert validate_record(dict(record))["id"] == record["id"]
    assert len({r["id"] for r in (failed, ok, prefixed, adapted)}) == 4


def test_the_proxy_and_host_client_copies_are_one() -> None:
    assert (BRIDGE / "src/host_client.ts").read_bytes() == (PROXY / "host_client.ts").read_bytes()


@pytest.mark.slow
def test_bridge_and_proxy_type_check_against_the_real_sdk(typescript_target: Any,
                                                          tmp_path: Path) -> None:
    from pipeline_runner.toolchain import ensure_nats_client

    toolchain, _ = typescript_target.toolchain()
    sdk = typescript_target.sdk()
    nats = ensure_nats_client(typescript_target.cache_dir) / "nats" / "lib/src/mod.d.ts"
    config = {"compilerOptions": {
        "strict": True, "noEmit": True, "target": "es2022", "lib": ["es2022", "dom"],
        "module": "nodenext", "moduleResolution": "nodenext", "allowImportingTsExtensions": True,
        "verbatimModuleSyntax": True, "erasableSyntaxOnly": True, "skipLibCheck": True,
        "types": ["node"], "typeRoots": [str(toolchain.types_root)],
        "paths": {"openclaw/plugin-sdk/core": [str(sdk.core_types)], "nats": [str(nats)]}},
        "files": [str(BRIDGE / "index.ts"), str(PROXY / "index.ts")]}
    (tmp_path / "tsconfig.json").write_text(json.dumps(config))
    run = subprocess.run([str(toolchain.node), str(toolchain.tsc_js), "-p",
                          str(tmp_path / "tsconfig.json")], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
