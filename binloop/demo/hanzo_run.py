"""`binloop demo --agent hanzo`: the demo's agent inside a Hanzo bot plugin runtime.

The agent process is node running `hanzo_agent.mjs` over the bot's own source
(`binloop.demo.hanzo_bot`): the bot's loader loads binloop's bridge plugin and the demo
airline plugin from their directories (bundled plugins off), and every tool call goes
through the bot's hook runner, so the bridge records it, publishes it to the demo's
NATS server, holds the session's calls while binloop pauses it, and offers the gated
tool through the sandboxed tool host at the agent's next run.
"""

from __future__ import annotations

import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from binloop.agent.airline import USERS
from binloop.agent.task import BOOKINGS
from binloop.demo.children import Child


def bridge_dir() -> Path:
    return Path(str(resources.files("pipeline_runner.hanzo").joinpath("bridge")))


def demo_file(name: str) -> Path:
    return Path(str(resources.files("binloop.demo").joinpath(name)))


def bookings() -> list[dict[str, Any]]:
    out = []
    for b in BOOKINGS:
        user = USERS[b.user_id]
        out.append({"user_id": b.user_id, "origin": b.origin, "destination": b.destination,
                    "date": b.date, "cabin": b.cabin,
                    "passengers": [list(p) for p in b.passengers],
                    "nonfree_baggages": b.nonfree_baggages, "insurance": b.insurance,
                    "certificate": user.certificate,
                    "certificate_balance": user.certificate_balance, "card": user.card})
    return out


def agent_settings(workdir: Path, library: Path, nats_url: str, session: str, bot: Any,
                   nats_module: Path, wait_s: float, latency_s: float) -> dict[str, Any]:
    bridge = {"natsUrl": nats_url, "library": str(library), "python": sys.executable,
              "jsonlPath": str(workdir / "telemetry.jsonl"),
              "bufferPath": str(workdir / "bridge-buffer.jsonl"),
              "natsModule": str(nats_module / "nats"), "failureModePrefix": True,
              "agentId": "hanzo-demo", "flushMs": 100}
    return {"botRoot": str(bot.root), "bundledDir": str(bot.bundled_dir),
            "loadPaths": [str(bridge_dir()), str(demo_file("hanzo_airline"))],
            "allow": ["binloop-bridge", "binloop-demo-airline"],
            "entries": {"binloop-bridge": bridge,
                        "binloop-demo-airline": {"latencyMs": int(latency_s * 1000)}},
            "session": session, "bookings": bookings(),
            "report": str(workdir / "agent-report.json"),
            "stateDir": str(workdir / "bot-state"), "waitForToolsMs": int(wait_s * 1000)}


class HanzoAgentUnavailable(Exception):
    """No bot runtime or no NATS client for the Hanzo agent (the message says why)."""


def start_hanzo_agent(demo: Any, nats_url: str, session: str) -> Child:
    from binloop.demo.hanzo_bot import BotUnavailable, ensure_bot
    from pipeline_runner.toolchain import ToolchainUnavailable, ensure_nats_client, toolchain_dir

    cache = toolchain_dir(demo.env.get("BINLOOP_TOOLCHAIN_DIR"))
    try:
        bot = ensure_bot(cache)
        nats_module = ensure_nats_client(cache)
    except (BotUnavailable, ToolchainUnavailable) as exc:
        raise HanzoAgentUnavailable(f"--agent hanzo needs a Hanzo bot runtime: {exc}"
                                    ) from None
    demo.timeline.add("demo", f"Hanzo bot runtime: hanzoai/bot {bot.commit[:12]} from source "
                              f"({bot.root}), node {bot.node}")
    left = max(30.0, demo.deadline - time.monotonic())
    settings = agent_settings(demo.workdir, demo.library, nats_url, session, bot,
                              nats_module, left, demo.options.latency_s)
    path = demo.workdir / "hanzo-agent.json"
    path.write_bytes(orjson.dumps(settings, option=orjson.OPT_INDENT_2))
    env = {**demo.env, "HOME": str(demo.workdir / "bot-home"),
           "OPENCLAW_STATE_DIR": str(demo.workdir / "bot-state")}
    (demo.workdir / "bot-home").mkdir(exist_ok=True)
    argv = [str(bot.node), "--disable-warning=ExperimentalWarning",
            str(demo_file("hanzo_agent.mjs")), str(path)]
    child = Child("agent", "", [], demo.workdir / "logs" / "agent.log", env, argv=argv)
    demo.timeline.add("agent", f"Hanzo bot agent started (pid {child.pid}), session {session}: "
                               "books 7 flights with the demo airline plugin; binloop's bridge "
                               "plugin records every call")
    return child
