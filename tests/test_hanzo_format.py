"""`--input-format hanzo`: the Hanzo bot's own telemetry files, as its code writes them.

The lines below are byte for byte what `JSON.stringify` makes of the objects that
hanzoai/bot's `extensions/self-improvement/src/friction-detector.ts` (`onToolCall`:
`session_id: "current"`, `failure_mode` omitted when undefined) and `telemetry.ts`
(the `model.usage` records: tokens and cost, the session's own id) build, in their key
order, in a file named as `persistInvocation` names it (`session-<ms>.jsonl`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from binloop.cli.commands.detect import detect
from binloop.core.config import Config
from binloop.core.schema import InvalidRecord
from binloop.replay import hanzo

SESSION_MS = 1764590000000


def bot_line(tool: str, ts: int, success: bool, mode: str | None = None,
             session: str = "current", duration: int = 12) -> str:
    inv: dict[str, object] = {"tool_id": tool, "session_id": session, "agent_id": "default",
                              "timestamp_ms": ts, "duration_ms": duration, "success": success}
    if mode is not None:
        inv["failure_mode"] = mode
    inv.update(retries=0, user_corrected=False, context={"channel": "agent"})
    return json.dumps(inv, separators=(",", ":"))


def usage_line(ts: int) -> str:
    return json.dumps({"tool_id": "llm:claude", "session_id": f"session-{SESSION_MS}",
                       "agent_id": "default", "timestamp_ms": ts, "duration_ms": 900,
                       "success": True, "input_tokens": 1200, "output_tokens": 80,
                       "cost_usd": 0.01, "retries": 0, "user_corrected": False,
                       "context": {"channel": "telegram"}}, separators=(",", ":"))


def write_session(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / f"session-{SESSION_MS}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(("word", "mode"), [
    ("timeout", "TIMEOUT.timeout"), ("not_found", "NOTFOUND.not_found"),
    ("permission", "PERM.permission"), ("auth", "PERM.auth"),
    ("parse_error", "SYNTAX.parse_error"), ("validation", "ARGS.validation"),
    ("network", "NETWORK.network"), ("rate_limit", "NETWORK.rate_limit"),
    ("model_error", "RUNTIME.model_error"), ("unknown", "RUNTIME.unknown"),
])
def test_both_vocabularies_map_onto_the_taxonomy(word: str, mode: str) -> None:
    line = bot_line("web_fetch", SESSION_MS + 5, False, word).encode()
    rec = hanzo.map_line(line, f"/x/session-{SESSION_MS}.jsonl", 1)
    assert rec["failure_mode"] == mode
    assert rec["outcome"] == ("timeout" if word == "timeout" else "failure")


def test_records_map_field_by_field() -> None:
    source = f"/home/u/.hanzo/bot/telemetry/session-{SESSION_MS}.jsonl"
    rec = hanzo.map_line(bot_line("exec", SESSION_MS + 7, True, duration=31).encode(), source, 4)
    assert rec == {"id": rec["id"], "session_id": f"session-{SESSION_MS}", "ts": SESSION_MS + 7,
                   "tool": "exec", "args": {}, "outcome": "success", "failure_mode": None,
                   "duration_ms": 31, "agent_id": "default"}
    # A record that names its own session keeps it.
    own = hanzo.map_line(usage_line(SESSION_MS + 9).encode(), "/tmp/other.jsonl", 1)
    assert own["session_id"] == f"session-{SESSION_MS}"
    # "current" outside a session file stays as written.
    assert hanzo.map_line(bot_line("exec", 1, True).encode(), "-", 1)["session_id"] == "current"


def test_ids_are_stable_and_tell_same_millisecond_records_apart() -> None:
    line = bot_line("exec", SESSION_MS, False, "timeout").encode()
    source = f"session-{SESSION_MS}.jsonl"
    first = hanzo.map_line(line, source, 1)["id"]
    assert hanzo.map_line(line, source, 1)["id"] == first  # a re-read: the same id
    assert hanzo.map_line(line, source, 2)["id"] != first  # same content, next line
    assert hanzo.map_line(line, "session-1.jsonl", 1)["id"] != first


@pytest.mark.parametrize(("line", "reason"), [
    (b"{not json", "not JSON"),
    (b"[1]", "not a JSON object"),
    (b'{"session_id":"current","timestamp_ms":1,"success":false}', "missing field tool_id"),
    (b'{"tool_id":"x","session_id":"current","success":false}', "missing field timestamp_ms"),
    (b'{"tool_id":"x","timestamp_ms":1,"success":"no"}', "success must be true or false"),
])
def test_bad_lines_are_rejected_with_the_reason(line: bytes, reason: str) -> None:
    with pytest.raises(InvalidRecord, match=reason):
        hanzo.map_line(line, "session-1.jsonl", 1)


@pytest.mark.parametrize("engine", ["reference", "polars", "bytewax"])
def test_detect_reads_the_bots_files(tmp_path: Path, engine: str) -> None:
    base = SESSION_MS + 1000
    lines = [usage_line(base)]
    # Three auth failures of web_fetch in the same millisecond: three records, one event.
    lines += [bot_line("web_fetch", base + 10, False, "auth") for _ in range(3)]
    lines += [bot_line("exec", base + 20 + i, False, "not_found") for i in range(2)]
    lines += [bot_line("exec", base + 30, True), "not json at all",
              bot_line("exec", base + 40, False)]  # a failure the bot gave no mode
    path = write_session(tmp_path, lines)
    out, dead = tmp_path / "events.jsonl", tmp_path / "dead.jsonl"
    config = Config(input=str(path), input_format="hanzo", engine=engine, out=str(out),
                    dead_letter=str(dead), theta=3)
    summary = detect(config)
    events = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(e["tool"], e["failure_mode"], e["count"], e["session_id"]) for e in events] == \
        [("web_fetch", "PERM.auth", 3, f"session-{SESSION_MS}")]
    assert len({r["id"] for r in events[0]["evidence"]}) == 3
    rejects = [json.loads(x) for x in dead.read_text().splitlines()]
    assert [(r["reason"].split(":")[0], r["position"]) for r in rejects] == [("not JSON", "8")]
    assert summary.valid == 8 and summary.invalid == 1


def test_the_binloop_format_still_rejects_bot_lines(tmp_path: Path) -> None:
    path = write_session(tmp_path, [bot_line("exec", SESSION_MS, False, "auth")])
    dead = tmp_path / "dead.jsonl"
    detect(Config(input=str(path), engine="reference", out=str(tmp_path / "e.jsonl"),
                  dead_letter=str(dead), input_format="binloop"))
    assert "missing field ts" in dead.read_text()
    # the default, auto, knows the bot's lines by their fields
    auto = tmp_path / "auto-dead.jsonl"
    summary = detect(Config(input=str(path), engine="reference", out=str(tmp_path / "a.jsonl"),
                            dead_letter=str(auto)))
    assert summary.valid == 1
    assert not auto.exists() or auto.read_text() == ""


def test_unknown_format_is_a_clear_error() -> None:
    from binloop.replay.formats import parse_format

    with pytest.raises(ValueError, match="unknown input format 'otlp'"):
        parse_format("otlp")
