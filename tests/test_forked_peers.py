"""Processes of a local cluster forked from the caller (`binloop.ops.cluster`)."""

from __future__ import annotations

import signal
import socket
import sys
import time

import pytest

from binloop.ops.cluster import fork_peer, stop_peers, wait_for_listeners, watch_peers


def test_a_forked_peer_exits_with_its_outcome(capfd: pytest.CaptureFixture[str]) -> None:
    def fails() -> None:
        raise ValueError("the input is gone")

    def exits_3() -> None:
        raise SystemExit(3)

    assert fork_peer(lambda: None).wait(30) == 0
    assert fork_peer(exits_3).wait(30) == 3
    assert fork_peer(fails).wait(30) == 1
    err = capfd.readouterr().err
    assert "binloop: error: the input is gone" in err and "Traceback" not in err


def test_a_forked_peer_is_watched_and_stopped() -> None:
    import threading

    def fails_later() -> None:
        time.sleep(0.2)
        sys.exit(4)

    seen: list[int] = []
    called = threading.Event()

    def failed(code: int) -> None:
        seen.append(code)
        called.set()

    failing = fork_peer(fails_later)
    watch_peers([failing], failed)
    assert called.wait(30) and seen == [4]

    sleeper = fork_peer(lambda: time.sleep(60))
    started = time.monotonic()
    stop_peers([sleeper])
    assert sleeper.poll() == -signal.SIGTERM and time.monotonic() - started < 10


def test_wait_for_listeners_sees_a_listening_port_without_connecting() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        assert not wait_for_listeners([f"127.0.0.1:{port}"], timeout_s=0.05)  # bound only
        server.listen()
        server.setblocking(False)
        assert wait_for_listeners([f"127.0.0.1:{port}"], timeout_s=5)
        with pytest.raises(BlockingIOError):  # nobody knocked
            server.accept()
