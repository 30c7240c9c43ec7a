"""The bridge plugin in the Hanzo bot's real plugin runtime, against a real nats-server:
records while NATS is down go to the bounded local buffer (what the bound drops is
counted), are replayed on reconnect without duplicates (Nats-Msg-Id), NATS credentials
are used, and a pause blocks the session's calls through before_tool_call until resume."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import nats
import pytest

from binloop.core.schema import validate_record
from binloop.demo.hanzo_bot import HanzoBot
from binloop.demo.hanzo_run import bridge_dir, demo_file
from binloop.nats.server import NatsServer, free_port
from pipeline_runner.toolchain import ensure_nats_client, toolchain_dir

pytestmark = pytest.mark.slow
HARNESS = Path(__file__).resolve().parent / "hanzo_bridge_check.mjs"
SESSION = "trip-nats.1"
BAD = {"user_id": "mia_li_3668", "cabin": "economy", "passengers": [{"first_name": "M"}],
       "flights": [{"flight_number": "HAT136", "date": "2024-05-20"}],
       "payment_methods": [{"payment_id": "certificate_7504069", "amount": 100,
                            "password": "hunter2-secret"}]}


class Harness:
    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def read(self) -> dict[str, Any]:
        """The harness's next reply (the bot's own log lines on stdout are skipped)."""
        assert self.proc.stdout
        while True:
            line = self.proc.stdout.readline()
            assert line, f"the harness exited ({self.proc.wait()})"
            if line.startswith('{"op":'):
                return dict(json.loads(line))

    def counters(self, until: Any, timeout_s: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self.ask({"op": "counters"})
            if until(reply["counters"]) or time.monotonic() > deadline:
                return dict(reply["counters"])
            time.sleep(0.3)


async def stream_records(url: str, user: str, password: str) -> list[dict[str, Any]]:
    nc = await nats.connect(url, user=user, password=password)
    js = nc.jetstream()
    sub = await js.subscribe("telemetry.>", ordered_consumer=True)
    out: list[dict[str, Any]] = []
    while True:
        try:
            msg = await sub.next_msg(timeout=2)
        except nats.errors.TimeoutError:
            break
        out.extend(json.loads(line) for line in msg.data.decode().splitlines() if line)
    await nc.close()
    return out


async def setup_stream(url: str, user: str, password: str) -> None:
    nc = await nats.connect(url, user=user, password=password)
    await nc.jetstream().add_stream(name="TELEMETRY", subjects=["telemetry.>"])
    await nc.close()


async def request(url: str, user: str, password: str, subject: str, body: dict[str, Any],
                  reply: bool) -> dict[str, Any] | None:
    nc = await nats.connect(url, user=user, password=password)
    try:
        if reply:
            msg = await nc.request(subject, json.dumps(body).encode(), timeout=10)
            return dict(json.loads(msg.data))
        await nc.publish(subject, json.dumps(body).encode())
        await nc.flush()
        return None
    finally:
        await nc.close()


def test_buffer_replay_credentials_and_pause(bot: HanzoBot, tmp_path: Path) -> None:
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    buffer = tmp_path / "buffer.jsonl"
    nats_module = ensure_nats_client(toolchain_dir()) / "nats"
    settings = {
        "botRoot": str(bot.root), "bundledDir": str(bot.bundled_dir), "session": SESSION,
        "loadPaths": [str(bridge_dir()), str(demo_file("hanzo_airline"))],
        "entries": {"binloop-bridge": {
            "natsUrl": url, "natsUser": "bot", "natsPass": "pw-1", "bufferPath": str(buffer),
            "bufferMaxBytes": 4096, "flushMs": 50, "failureModePrefix": True,
            "natsModule": str(nats_module)},
            "binloop-demo-airline": {}}}
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home")}
    harness = Harness([str(bot.node), "--disable-warning=ExperimentalWarning", str(HARNESS),
                       str(tmp_path / "settings.json")], env)
    try:
        ready = harness.read()
        assert [p["status"] for p in ready["plugins"]] == ["loaded", "loaded"], ready
        # NATS is down: the calls go on, their records go to the bounded buffer.
        calls = harness.ask({"op": "calls", "tool": "book_reservation", "n": 12, "args": BAD})
        assert all(r["isError"] and "payment_total_mismatch" in r["error"]
                   for r in calls["results"])
        down = harness.counters(lambda c: c["buffered"] + c["dropped"] >= 12)
        assert down["published"] == 0 and down["buffered"] >= 1 and down["dropped"] >= 1
        assert down["buffered"] + down["dropped"] == 12  # the bound: counted, not lost silently
        buffered = [json.loads(x) for x in buffer.read_text().splitlines()]
        assert len(buffered) == down["buffered"] and buffer.stat().st_size <= 4096
        assert "hunter2-secret" not in buffer.read_text()

        server = NatsServer(port, tmp_path / "nats",
                            extra_config='authorization { user: bot, password: "pw-1" }')
        server.start()
        try:
            asyncio.run(setup_stream(url, "bot", "pw-1"))
            up = harness.counters(lambda c: c["replayed"] >= down["buffered"], 90)
            assert up["replayed"] >= down["buffered"]  # a retried replay is deduplicated
            harness.ask({"op": "calls", "tool": "get_quote", "n": 2, "args": BAD})
            live = harness.counters(lambda c: c["published"] >= 2)
            assert live["published"] == 2
            records = asyncio.run(stream_records(url, "bot", "pw-1"))
            ids = [r["id"] for r in records]
            assert len(ids) == len(set(ids)) == down["buffered"] + 2
            assert {r["id"] for r in buffered} <= set(ids)
            for record in records:
                validated = validate_record(dict(record))
                assert validated["session_id"] == SESSION
            failing = [r for r in records if r["tool"] == "book_reservation"]
            assert all(r["failure_mode"] == "ARGS.payment_total_mismatch" and
                       r["args"]["payment_methods"][0]["password"] == "[REDACTED]"
                       for r in failing)

            # Pause: answered, then the session's calls are held with the reason.
            token = "trip-nats%2E1"
            answer = asyncio.run(request(url, "bot", "pw-1", f"bin.control.{token}.pause",
                                         {"build_id": "b1"}, reply=True))
            assert answer and answer["paused"] is True and answer["recent_calls"]
            held = harness.ask({"op": "calls", "tool": "get_quote", "n": 1, "args": BAD})
            assert held["results"][0]["isError"]
            assert held["results"][0]["error"].startswith("binloop: paused")
            asyncio.run(request(url, "bot", "pw-1", f"bin.control.{token}.resume",
                                {"build_id": "b1"}, reply=False))
            time.sleep(1)
            again = harness.ask({"op": "calls", "tool": "get_quote", "n": 1, "args": BAD})
            assert not again["results"][0]["isError"]
            final = harness.counters(lambda c: c["published"] >= 3)
            # The held call is not telemetry: only the call after resume was added.
            assert final["published"] == 3
        finally:
            server.stop()
            if harness.proc.poll() is None and harness.proc.stdin:
                harness.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                harness.proc.stdin.flush()
    finally:
        if harness.proc.poll() is None:
            harness.proc.kill()
        harness.proc.wait()
