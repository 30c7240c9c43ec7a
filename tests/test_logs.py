"""One logging setup for every command: text or JSON lines."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from binloop.core.errors import EX_USAGE
from binloop.core.logs import clear_context, set_context, setup_logging


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    binloop_level = logging.getLogger("binloop").level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("binloop").setLevel(binloop_level)


def test_json_lines_carry_level_logger_extras_and_tracebacks(restore_logging: None) -> None:
    out = io.StringIO()
    setup_logging("json", "info", stream=out)
    log = logging.getLogger("binloop.test")
    log.debug("not shown at info")
    log.info("read %d records", 5, extra={"partition": "TELEMETRY/3"})
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("failed")
    logging.getLogger("nats.aio.client").info("libraries log at warning or above")
    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [(x["level"], x["logger"], x["msg"]) for x in lines] == [
        ("info", "binloop.test", "read 5 records"), ("error", "binloop.test", "failed")]
    assert lines[0]["partition"] == "TELEMETRY/3" and lines[0]["ts"].endswith("Z")
    assert "RuntimeError: boom" in lines[1]["exc"]


def test_setup_replaces_its_handler_and_text_keeps_the_old_format(
        restore_logging: None) -> None:
    first, second = io.StringIO(), io.StringIO()
    setup_logging("json", "debug", stream=first)
    setup_logging("text", "warning", stream=second)
    log = logging.getLogger("binloop.test")
    log.info("quiet at warning")
    log.warning("careful")
    set_context(process_id=1)
    try:
        log.error("down")
    finally:
        clear_context()
    assert first.getvalue() == ""
    assert second.getvalue().splitlines() == ["binloop: warning: careful",
                                              "binloop[1]: error: down"]


def test_every_command_takes_log_flags_and_env(tmp_path: Path) -> None:
    """A command's error is a JSON log line with --log-format json (or the env var)."""
    bad = [sys.executable, "-m", "binloop.cli", "run", "--nats", "nats://127.0.0.1:1",
           "--no-build", "--addresses", "a:1;b:1"]
    flagged = subprocess.run([*bad, "--log-format", "json"], capture_output=True, text=True,
                             check=False)
    assert flagged.returncode == EX_USAGE
    line = orjson.loads(flagged.stderr.strip())
    assert line["level"] == "error" and "needs --process-id" in line["msg"]
    env_json = subprocess.run(bad, capture_output=True, text=True, check=False,
                              env={**os.environ, "BINLOOP_LOG_FORMAT": "json"})
    assert orjson.loads(env_json.stderr.strip())["command"] == "run"
    text = subprocess.run([sys.executable, "-m", "binloop.cli", "simulate", "--out",
                           str(tmp_path / "s.jsonl"), "--sessions", "3", "--log-level",
                           "error"], capture_output=True, text=True, check=False)
    assert text.returncode == 0
