"""The anthropic and openai designers through their official SDKs, against loopback
servers that speak each provider's wire protocol."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from binloop.core.config import load_config
from binloop.core.events import BINEvent
from binloop.library.manifest import empty_manifest
from binloop.library.store import ToolLibrary
from pipeline_runner.design import Design
from pipeline_runner.designers import load_designer
from pipeline_runner.designers.anthropic_designer import AnthropicClient
from pipeline_runner.designers.llm import Limits, LLMDesigner
from pipeline_runner.designers.offline import OfflineDesigner
from pipeline_runner.designers.openai_designer import OpenAIClient
from tests.buildkit import RecordingControl, event_of, failing_calls, runner_for
from tests.llm_servers import LLMServer, Reply, ScriptedLLM

SECRET = "sk-live-SECRETSECRETSECRETSECRET1234"
TYPE_ERROR = "def run(params: dict, invoke=None) -> dict:\n    x: int = 'a'\n    return {}\n"


def secret_event() -> BINEvent:
    calls = [({"payment_methods": [{"payment_id": "gift_card_1", "amount": a}],
               "api_key": SECRET},
              f"Error: payment amount does not add up, total price is 90, but paid {a} "
              f"(Authorization: Bearer {SECRET})") for a in (10, 20)]
    return event_of(failing_calls("book", "ARGS.payment_total_mismatch", calls))


def wire_design(design: Design) -> str:
    """A design in the LLM structured-output format (what a good model answers)."""
    return orjson.dumps({
        "name": design.name, "description": design.description,
        "input_schema_json": orjson.dumps(design.input_schema).decode(),
        "output_schema_json": orjson.dumps(design.output_schema).decode(),
        "sketch": design.sketch,
        "acceptance": [{"name": c.name,
                        "steps_json": orjson.dumps([s.__dict__ for s in c.steps]).decode(),
                        "invoke_json": orjson.dumps(c.invoke).decode(),
                        "reproduces": c.reproduces} for c in design.acceptance]}).decode()


def good_answers(event: BINEvent, target: str = "python") -> tuple[str, str]:
    from binloop.core.redact import Redactor
    from pipeline_runner.event_input import for_design

    offline = OfflineDesigner()
    design = offline.design(for_design(event, Redactor()), empty_manifest())
    source = next(iter(offline.implement(design, target).values()))
    return wire_design(design), orjson.dumps({"source": source}).decode()


def anthropic_designer(base_url: str, retries: int = 2, timeout_s: float = 30) -> LLMDesigner:
    client = AnthropicClient("claude-test", base_url, timeout_s, retries=0, max_tokens=4096)
    return LLMDesigner("anthropic", client, Limits(retries=retries))


def openai_designer(base_url: str, retries: int = 2, timeout_s: float = 30,
                    sdk_retries: int = 0) -> LLMDesigner:
    client = OpenAIClient("gpt-test", base_url, timeout_s, retries=sdk_retries, max_tokens=4096)
    return LLMDesigner("openai", client, Limits(retries=retries))


@pytest.fixture(autouse=True)
def api_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key-for-the-loopback-server-0000")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # local server: placeholder key


def assert_no_secret_left(script: ScriptedLLM, library: Path) -> None:
    for seen in script.seen:
        assert SECRET.encode() not in seen.raw
    for path in library.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_anthropic_messages_api_builds_a_tool(tmp_path: Path) -> None:
    event = secret_event()
    design, source = good_answers(event)
    script = ScriptedLLM("anthropic", [Reply(design), Reply(source)])
    with LLMServer(script) as url:
        result = runner_for(tmp_path / "lib", anthropic_designer(url)).build(event)
    assert result.outcome == "gated", result.reason
    first = script.seen[0]
    assert first.body["output_config"]["format"]["type"] == "json_schema"
    assert first.body["model"] == "claude-test" and first.body["system"]
    credential = first.headers.get("x-api-key") or first.headers.get("authorization", "")
    assert "sk-ant-test" in credential
    assert "book" in first.body["messages"][0]["content"]
    assert len(script.seen) == 2  # design, then implementation
    assert_no_secret_left(script, tmp_path / "lib")
    entry = ToolLibrary(tmp_path / "lib").entry(result.tool["name"])
    assert entry["designer"] == "anthropic"


def test_openai_chat_completions_with_base_url_builds_a_tool(tmp_path: Path) -> None:
    event = secret_event()
    design, source = good_answers(event)
    script = ScriptedLLM("openai", [Reply(design), Reply(source)])
    with LLMServer(script) as url:
        config = load_config({"llm_base_url": url, "llm_model": "gpt-test", "llm_retries": "0"},
                             env={})
        designer = load_designer("openai", config)
        result = runner_for(tmp_path / "lib", designer).build(event)
    assert result.outcome == "gated", result.reason
    body = script.seen[0].body
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["strict"] is True
    assert body["messages"][0]["role"] == "system" and body["max_tokens"] > 0
    assert script.seen[0].headers["authorization"] == "Bearer unused-local"
    assert_no_secret_left(script, tmp_path / "lib")


def test_malformed_answers_are_retried_then_rolled_back(tmp_path: Path) -> None:
    control = RecordingControl()
    script = ScriptedLLM("anthropic", [Reply("this is not JSON"), Reply('{"name": 3}'),
                                       Reply("{truncated", stop="max_tokens")])
    with LLMServer(script) as url:
        result = runner_for(tmp_path / "lib", anthropic_designer(url, retries=2),
                            control=control).build(secret_event())
    assert result.outcome == "rolled_back"
    assert "no valid answer after 3 attempts" in result.reason
    assert len(script.seen) == 3
    retry = script.seen[1].body["messages"]
    assert retry[-1]["role"] == "user" and "invalid" in retry[-1]["content"]
    assert not (tmp_path / "lib" / "manifest.json").exists()
    assert control.kinds() == ["pause", "resume"]


def test_an_invalid_design_is_sent_back_and_corrected(tmp_path: Path) -> None:
    event = secret_event()
    design, source = good_answers(event)
    unsafe = orjson.loads(design)
    unsafe["name"] = "../../escape"
    script = ScriptedLLM("openai", [Reply(orjson.dumps(unsafe).decode()), Reply(design),
                                    Reply(source)])
    with LLMServer(script) as url:
        result = runner_for(tmp_path / "lib", openai_designer(url)).build(event)
    assert result.outcome == "gated", result.reason
    feedback = script.seen[1].body["messages"][-1]["content"]
    assert "tool name" in feedback


def test_a_provider_that_times_out_rolls_back(tmp_path: Path) -> None:
    script = ScriptedLLM("openai", [Reply("{}", delay_s=4)])
    with LLMServer(script) as url:
        result = runner_for(tmp_path / "lib", openai_designer(url, timeout_s=0.5)).build(
            secret_event())
    assert result.outcome == "rolled_back"
    assert [(s.stage, s.outcome) for s in result.stages if s.outcome != "ok"] == [
        ("design", "timeout")]


def test_provider_errors_are_retried_by_the_sdk_then_roll_back(tmp_path: Path) -> None:
    script = ScriptedLLM("openai", [Reply("overloaded", status=529),
                                    Reply("bad request", status=400)])
    with LLMServer(script) as url:
        result = runner_for(tmp_path / "lib", openai_designer(url, sdk_retries=1)).build(
            secret_event())
    assert result.outcome == "rolled_back" and "BadRequestError" in result.reason
    assert len(script.seen) == 2  # the 529 was retried by the SDK, the 400 was not


def test_a_generated_type_error_rolls_back(tmp_path: Path) -> None:
    event = secret_event()
    design, _ = good_answers(event)
    broken = orjson.dumps({"source": TYPE_ERROR}).decode()
    script = ScriptedLLM("anthropic", [Reply(design), Reply(broken)])
    with LLMServer(script) as url:
        result = runner_for(tmp_path / "lib", anthropic_designer(url)).build(event)
    assert result.outcome == "rolled_back"
    assert [s.stage for s in result.stages if s.outcome != "ok"] == ["check"]


def test_oversized_answers_are_refused(tmp_path: Path) -> None:
    event = secret_event()
    design, _ = good_answers(event)
    huge = orjson.dumps({"source": "# " + "x" * 300_000 + "\ndef run(p): return {}\n"}).decode()
    script = ScriptedLLM("anthropic", [Reply(design), Reply(huge)])
    with LLMServer(script) as url:
        result = runner_for(tmp_path / "lib", anthropic_designer(url, retries=0)).build(event)
    assert result.outcome == "rolled_back" and "bytes" in result.reason
    assert [s.stage for s in result.stages if s.outcome != "ok"] == ["build"]


@pytest.mark.slow
def test_anthropic_typescript_plugin(tmp_path: Path, typescript_target: Any) -> None:
    event = secret_event()
    design, source = good_answers(event, "typescript")
    script = ScriptedLLM("anthropic", [Reply(design), Reply(source)])
    with LLMServer(script) as url:
        result = runner_for(tmp_path / "lib", anthropic_designer(url),
                            typescript_target).build(event)
    assert result.outcome == "gated", result.reason
    assert "hanzo-bot.d.ts" in script.seen[1].body["messages"][0]["content"] or \
        "registerTool" in script.seen[1].body["messages"][0]["content"]
