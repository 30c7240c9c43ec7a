"""`binloop demo --agent hanzo`: the whole loop with the agent inside a Hanzo bot's
plugin runtime (its loader, hook runner and tool resolution) and binloop's bridge plugin
publishing to a real nats-server, instead of the Python reference agent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from binloop.demo.hanzo_bot import HanzoBot

pytestmark = pytest.mark.slow


def test_the_loop_closes_with_the_bridge_in_the_bot(bot: HanzoBot, tmp_path: Path) -> None:
    """`bot`: the runtime is installed (or the test skips with the reason) before the demo."""
    workdir = tmp_path / "demo"
    run = subprocess.run([sys.executable, "-m", "binloop.cli", "demo", "--agent", "hanzo",
                          "--workdir", str(workdir), "--timeout", "1500"],
                         capture_output=True, text=True, timeout=1800)
    log = (workdir / "logs" / "agent.log").read_text() if (workdir / "logs").exists() else ""
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:] + log[-3000:]
    summary = json.loads((workdir / "summary.json").read_text())
    assert summary["status"] == "stable" and summary["uses"]["ok"] >= 2
    report = json.loads((workdir / "agent-report.json").read_text())
    assert report["ok"] is True and len(report["done"]) == 7
    tool = summary["tool"]
    assert any(use["tool"] == tool for use in report["used"])
    assert tool in report["tools_seen"]
    # The bridge's own records (its JSONL copy): every call, none of the held ones.
    records = [json.loads(x) for x in (workdir / "telemetry.jsonl").read_text().splitlines()]
    assert len(records) == report["calls"] - report["blocked"]
    assert not any("binloop: paused" in (r.get("error") or "") for r in records)
    failures = [r for r in records if r["tool"] == "book_reservation" and r["outcome"] == "failure"]
    assert len(failures) >= 3 and all(r["failure_mode"] == "ARGS.payment_total_mismatch"
                                      for r in failures)
    assert any(r["tool"] == tool and r["outcome"] == "success" for r in records)
    assert "plugin binloop-bridge: loaded" in log
