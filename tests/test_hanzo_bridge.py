"""The bridge plugin's parts that need no bot: binloop's redaction rules, subjects and
records, run under node exactly as the bridge runs them (the bridge's own modules)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from binloop.core.redact import RULES_PATH, Redactor, is_secret_key
from binloop.core.schema import validate_record
from binloop.nats.subjects import subject_token
from pipeline_runner.hanzo.bridge_rules import BRIDGE_RULES_PATH, is_current, stale
from pipeline_runner.toolchain import ToolchainUnavailable, node_binary
from tests import redaction_corpus as rc
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


def test_the_bridge_ships_binloops_rule_file() -> None:
    assert BRIDGE_RULES_PATH.read_bytes() == RULES_PATH.read_bytes(), \
        "refresh the copy: python -m pipeline_runner.hanzo.bridge_rules"
    assert is_current()


# Values of every kind, outside the corpus's record shape.
VALUES: list[Any] = [
    *(f"request failed with key {secret} (retry later)" for secret in SECRETS),
    "401 Unauthorized: Authorization: Bearer abc.def.ghi-123456 sent to "
    "https://admin:hunter2@db.example.com/x with password=s3cr3t&user=bob",
    "key: -----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY----- end",
    {"user": "bob", "api_key": "plain-looking", "nested": {"password": 1234, "pin": "0000"},
     "headers": [{"Authorization": "Basic Ym9iOnB3"}], "max_tokens": 300, "flight": "HAT136",
     "auth": {"user": "u", "ok": True, "none": None, "empty": "", "n": 1.5, "list": [1, "a"]}},
    {"user_id": "mia_li_3668", "payment_methods": [{"payment_id": "certificate_7504069",
                                                    "amount": 250}], "token": "t-123"},
    "total price is 570, but paid 520", "/var/data/run-2.log", "ok", 7, None, True,
]

BRIDGE_REDACT = f"""import {{ Redactor, isSecretKey }} from "{(BRIDGE / "src/redact.ts").as_uri()}";
const run = (f) => {{ const r = new Redactor(); const out = f(r); return [out, r.count]; }};
console.log(JSON.stringify({{
  records: DATA.records.map((rec) => run((r) => r.record(rec))),
  values: DATA.values.map((v) => run((r) => r.value(v))),
  texts: DATA.texts.map((t) => [run((r) => r.text(t)), run((r) => r.evidenceText(t)),
                                run((r) => r.code(t))]),
  keys: DATA.keys.map((k) => isSecretKey(k)),
}}));"""


def _alone(form: dict[str, Any]) -> dict[str, Any]:
    args = dict(form.get("args", {}))
    if "arg_text" in form:
        args["q"] = form["arg_text"]
    return {"args": args, "error": form.get("error", "")}


def _python(records: list[Any], values: list[Any], texts: list[str],
            keys: list[str]) -> dict[str, Any]:
    def run(apply: Any) -> list[Any]:
        redactor = Redactor()
        out = apply(redactor)
        return [out, redactor.count]

    return {"records": [run(lambda r, rec=rec: r.record(rec)) for rec in records],
            "values": [run(lambda r, v=v: r.value(v)) for v in values],
            "texts": [[run(lambda r, t=t: r.text(t)), run(lambda r, t=t: r.evidence_text(t)),
                       run(lambda r, t=t: r.code(t))] for t in texts],
            "keys": [is_secret_key(k) for k in keys]}


def test_the_bridge_redacts_the_corpus_exactly_as_binloop(tmp_path: Path) -> None:
    """Every secret form and every ordinary value of tests/data/redaction_corpus.json, the
    corpus's combined failures, free text in each case, and key names: the bridge's output
    (and its mask count) is Python's, every secret is gone, every ordinary value kept."""
    forms, ordinary = rc.secrets(), rc.corpus()["ordinary"]
    records = [_alone(f) for f in forms]
    records += [{"args": {f.get("key", "value"): f["value"]}, "error": str(f["value"])}
                for f in ordinary]
    records += rc.failing_records()
    texts = [t for f in forms for t in (f.get("error"), f.get("arg_text")) if t]
    texts += [orjson.dumps(f["args"]).decode() for f in forms if "args" in f]
    texts += [t.upper() for t in texts] + [t.lower() for t in texts]
    keys = sorted({k for rec in records for k in rec["args"]} | set(KEY_NAMES))
    ours = run_node(tmp_path, BRIDGE_REDACT,
                    {"records": records, "values": VALUES, "texts": texts, "keys": keys})
    assert ours == _python(records, VALUES, texts, keys)
    for (clean, count), form in zip(ours["records"], forms, strict=False):
        blob = orjson.dumps(clean)
        assert rc.leaks(blob) == [] and count >= 1, (form["id"], blob)
    for (clean, count), form in zip(ours["records"][len(forms):], ordinary, strict=False):
        assert clean["args"] == {form.get("key", "value"): form["value"]} and count == 0
    combined = orjson.dumps([clean for clean, _ in ours["records"][-3:]])
    assert rc.leaks(combined) == [] and rc.kept_ordinary(combined) == []
    for secret in SECRETS:
        assert secret not in json.dumps(ours["values"])


KEY_NAMES = ["dbPassword", "DB_PASSWORD", "db-password", "db.password", "DbPassword",
             "apiToken", "API-TOKEN", "awsSecretAccessKey", "x-api-key", "APIKey", "PWD",
             "set-cookie", "X-Amz-Signature", "clientSecret", "max_tokens", "token_count",
             "passengers", "author", "session_id", "token_type", "key", "bypass",
             "password_hint", "auth_method", "tokenizer", "signature_version", "secret_name",
             "", "123", "ÉTOKEN"]


def test_non_ascii_text_as_docs_hanzo_md_says(tmp_path: Path) -> None:
    """Case-insensitive rules fold ASCII letters only, in node as in Python (a long s or a
    Kelvin sign is not an s or a k); an emoji counts twice in JavaScript, so the one
    length-bounded free-text rule masks a short emoji value in the bot only."""
    same = ["pa\u017fsword is hunter2x", "PASSWORD is hunter2x", "\u017fecret=abc",
            "\u212aey-0123456789abcdef0123456789abcdef",
            "token \U0001F600\U0001F600\U0001F600\U0001F600\U0001F600\U0001F6001"]
    safer = "token \U0001F600\U0001F600\U0001F6001 here"
    body = f"""import {{ Redactor }} from "{(BRIDGE / "src/redact.ts").as_uri()}";
console.log(JSON.stringify(DATA.map((t) => new Redactor().evidenceText(t))));"""
    ours = run_node(tmp_path, body, [*same, safer])
    assert ours[:-1] == [Redactor().evidence_text(t) for t in same]
    assert Redactor().evidence_text(safer) == safer and ours[-1] == "token [REDACTED] here"


def test_real_telemetry_leaves_the_bridge_as_it_came(tmp_path: Path) -> None:
    """The 1,164 calls of tau-bench's airline agent hold no secret: the bridge changes
    none of them, as binloop changes none."""
    path = Path("/work/shared/data/tau_airline_telemetry.jsonl")
    if not path.exists():
        pytest.skip(f"{path} is not on this machine")
    records = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    body = f"""import {{ Redactor }} from "{(BRIDGE / "src/redact.ts").as_uri()}";
const r = new Redactor();
const out = DATA.map((rec) => r.record(rec));
const same = JSON.stringify(out) === JSON.stringify(DATA);
console.log(JSON.stringify({{ same, count: r.count }}));"""
    assert len(records) >= 1000
    assert run_node(tmp_path, body, records) == {"same": True, "count": 0}


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
    copy, source = BRIDGE / "src/host_client.ts", PROXY / "host_client.ts"
    assert copy.read_bytes() == source.read_bytes(), \
        "refresh the copy: python -m pipeline_runner.hanzo.bridge_rules"
    assert stale() == []


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


FAKE_HOST = """
import json, sys
request = json.loads(sys.stdin.readline())
answers = []
for number, tool in enumerate(("secret_tool", "fetch_url"), 1):
    print(json.dumps({"id": request["id"], "op": "invoke", "invoke_id": number, "tool": tool,
                      "params": {"n": number}}), flush=True)
    answers.append(json.loads(sys.stdin.readline()))
print(json.dumps({"id": request["id"], "ok": True, "result": {
    "content": [{"type": "text", "text": "{}"}], "details": {"request": request,
                                                          "answers": answers}}}), flush=True)
"""


def test_the_proxy_answers_an_invoke_only_for_the_tool_it_grants(tmp_path: Path) -> None:
    """The bot side refuses too (the host already does): a host that asks for another
    tool than the granted one gets a refusal, and the bot's tool is not called."""
    (tmp_path / "fake_host.py").write_text(FAKE_HOST)
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec python3 {tmp_path / 'fake_host.py'}\n")
    python.chmod(0o755)
    body = f"""
import {{ ToolHostClient, gatewayInvoker }} from {json.dumps(str(PROXY / "host_client.ts"))};
const invoked = [];
const run = async (tool, params) => {{ invoked.push(tool); return {{ tool, params }}; }};
const client = new ToolHostClient(DATA.python, DATA.library, 20000);
const grant = {{ tools: ["fetch_url"], run }};
const result = await client.call("retry_tool", {{ args: {{}} }}, undefined, grant);
client.close();
let unreachable = "";
try {{
  await gatewayInvoker({{ url: "http://127.0.0.1:9/tools/invoke" }})("fetch_url", {{}});
}} catch (error) {{ unreachable = error.message; }}
console.log(JSON.stringify({{ details: result.details, invoked, unreachable }}));
"""
    out = run_node(tmp_path, body, {"python": str(python), "library": str(tmp_path)})
    request, answers = out["details"]["request"], out["details"]["answers"]
    assert request["invoke"] is True and request["tool"] == "retry_tool"
    assert answers[0] == {"id": request["id"], "op": "invoke_result", "invoke_id": 1,
                          "ok": False, "error": 'binloop proxy: this tool may not invoke '
                          '"secret_tool"; it may call fetch_url only'}
    assert answers[1] == {"id": request["id"], "op": "invoke_result", "invoke_id": 2,
                          "ok": True, "result": {"tool": "fetch_url", "params": {"n": 2}}}
    assert out["invoked"] == ["fetch_url"]
    assert out["unreachable"].startswith(
        "no Hanzo bot gateway answers at http://127.0.0.1:9/tools/invoke to call fetch_url")
