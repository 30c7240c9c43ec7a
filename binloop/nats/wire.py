"""A lean NATS client on the wire protocol, for reading JetStream fast.

nats-py spends about 10 µs of Python per delivered message (asyncio, a general parser,
a `Msg` and a headers dict per message). This connection reads whatever the socket
holds in one go, cuts it into frames with bytes operations, and hands each
subscription its messages as `(reply, headers, payload)` tuples of bytes: a few times
less work per message.

It is synchronous and never blocks for long: `pump` reads and writes what the socket
allows without waiting; only `request` (a JetStream API call, bounded by its timeout)
and the handshake of a (re)connection once TCP is up wait on the server. Made for one
thread (a Bytewax worker): not thread-safe.

Supported: plain TCP, several servers (tried in turn), user/password and token from the
URL, headers, PING/PONG both ways, reconnects (subscriptions are renewed and
`reconnects` counts them, so that their owners know that requests in flight were
lost). Not supported (`Unsupported`: use nats-py): TLS, NKey/JWT credentials,
websockets.
"""

from __future__ import annotations

import logging
import secrets
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import orjson
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import DEFAULT_PREFIX, StatusCode
from nats.js.errors import APIError

from binloop.nats.jetstream import CONNECT_TIMEOUT_S

log = logging.getLogger("binloop.nats")

# A delivered message: (reply subject, header block or b"", payload).
WireMsg = tuple[bytes, bytes, bytes]

READ_BYTES: Final = 1 << 20
# At most this much is read per pump before the frames are handed out.
READ_MAX: Final = 8 << 20
_CRLF: Final = b"\r\n"
_STATUS_LINE: Final = b"NATS/1.0 "
_NO_RESPONDERS: Final = _STATUS_LINE + StatusCode.SERVICE_UNAVAILABLE.value.encode()


class Unsupported(ConnectionError):
    """The server or URL needs something this client does not do (TLS, NKeys...)."""


@dataclass(frozen=True)
class ServerAddress:
    host: str
    port: int
    user: str | None = None
    password: str | None = None
    token: str | None = None


def parse_servers(url: str) -> list[ServerAddress]:
    """The servers of a comma-separated URL list, as nats-py reads them (`nats://` is
    the default scheme; `user:pass@` or `token@` give credentials)."""
    servers = []
    for part in (p.strip() for p in url.split(",")):
        if not part:
            continue
        split = urlsplit(part if "://" in part else f"nats://{part}")
        if split.scheme != "nats":
            raise Unsupported(f"{split.scheme}:// URLs need nats-py")
        user, password, token = split.username, split.password, None
        if user is not None and password is None:
            user, token = None, user
        servers.append(ServerAddress(split.hostname or "127.0.0.1", split.port or 4222,
                                     user, password, token))
    if not servers:
        raise ValueError("no NATS server URL")
    return servers


class Subscription:
    """Messages delivered on one subject, waiting to be taken."""

    __slots__ = ("pending", "sid", "subject")

    def __init__(self, sid: int, subject: str) -> None:
        self.sid = sid
        self.subject = subject
        self.pending: list[WireMsg] = []

    def take(self) -> list[WireMsg]:
        msgs, self.pending = self.pending, []
        return msgs


class WireConnection:
    """One connection to a NATS server (see the module docstring)."""

    def __init__(self, url: str, name: str = "binloop",
                 connect_timeout_s: float = CONNECT_TIMEOUT_S,
                 ping_interval_s: float = 5.0, max_pings_out: int = 2,
                 reconnect_wait_s: float = 0.25) -> None:
        self.servers = parse_servers(url)
        self.name = name
        self.ping_interval_s = ping_interval_s
        self.max_pings_out = max_pings_out
        self.reconnect_wait_s = reconnect_wait_s
        self.reconnects = 0
        self.server_info: dict[str, Any] = {}
        self._sock: socket.socket | None = None
        self._buf = b""
        self._out: list[bytes] = []
        self._subs: dict[int, Subscription] = {}
        self._next_sid = 1
        self._inbox_prefix = f"_INBOX.{secrets.token_hex(11)}"
        self._inboxes = 0
        self._pings_out = 0
        self._last_read = time.monotonic()
        self._next_attempt = 0.0
        self._server_index = 0
        self.closed = False
        self._connect_first(connect_timeout_s)

    # -- connection ---------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def _connect_first(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            error = self._try_connect(min(2.0, max(0.1, deadline - time.monotonic())))
            if error is None:
                return
            if isinstance(error, Unsupported) or time.monotonic() >= deadline:
                raise error
            time.sleep(self.reconnect_wait_s)

    def _try_connect(self, timeout_s: float) -> ConnectionError | None:
        """Connect to the next server in turn; the error, or None when connected."""
        server = self.servers[self._server_index % len(self.servers)]
        self._server_index += 1
        try:
            sock = socket.create_connection((server.host, server.port), timeout=timeout_s)
        except OSError as exc:
            return ConnectionError(f"{server.host}:{server.port}: {exc}")
        try:
            self._buf = self._handshake(sock, server, max(timeout_s, 2.0))
        except (OSError, ValueError) as exc:
            sock.close()
            return exc if isinstance(exc, ConnectionError) else ConnectionError(str(exc))
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self._out = [f"SUB {s.subject} {s.sid}\r\n".encode() for s in self._subs.values()]
        self._pings_out = 0
        self._last_read = time.monotonic()
        return None

    def _handshake(self, sock: socket.socket, server: ServerAddress, timeout_s: float) -> bytes:
        """INFO, CONNECT, PING -> PONG; returns what the server sent after its PONG."""
        sock.settimeout(timeout_s)
        lines = _LineReader(sock)
        info_line = lines.next()
        if not info_line.startswith(b"INFO "):
            raise ConnectionError(f"not a NATS server: {info_line[:40]!r}")
        self.server_info = orjson.loads(info_line[5:])
        if self.server_info.get("tls_required"):
            raise Unsupported("the server requires TLS")
        options: dict[str, Any] = {
            "verbose": False, "pedantic": False, "headers": True, "no_responders": True,
            "protocol": 1, "lang": "python/binloop-wire", "version": "1", "name": self.name,
            "tls_required": False}
        if server.user is not None:
            options.update(user=server.user, **{"pass": server.password})
        elif server.token is not None:
            options["auth_token"] = server.token
        sock.sendall(b"CONNECT " + orjson.dumps(options) + b"\r\nPING\r\n")
        while True:
            line = lines.next()
            if line == b"PONG":
                return lines.rest()
            if line.startswith(b"-ERR"):
                raise ConnectionError(f"NATS refused the connection: {line[5:].decode()!s:.200}")

    def _lost(self, reason: object) -> None:
        if self._sock is None:
            return
        log.info("NATS connection lost (%s); reconnecting", reason)
        try:
            self._sock.close()
        finally:
            self._sock = None
            self._buf = b""
            self._out = []
            self._next_attempt = time.monotonic() + self.reconnect_wait_s

    def _reconnect_if_due(self) -> None:
        if self.closed or time.monotonic() < self._next_attempt:
            return
        error = self._try_connect(1.0)
        if error is None:
            self.reconnects += 1
            log.info("NATS connection back (reconnect %d)", self.reconnects)
        else:
            log.debug("reconnect: %s", error)
            self._next_attempt = time.monotonic() + self.reconnect_wait_s

    def close(self) -> None:
        self.closed = True
        if self._sock is not None:
            try:
                self._sock.setblocking(True)
                self._sock.settimeout(1.0)
                if self._out:
                    self._sock.sendall(b"".join(self._out))
            except OSError:
                pass
            finally:
                self._sock.close()
                self._sock = None

    # -- subscriptions and publishing --------------------------------------------------------

    def new_inbox(self) -> str:
        self._inboxes += 1
        return f"{self._inbox_prefix}.{self._inboxes}"

    def subscribe(self, subject: str) -> Subscription:
        sub = Subscription(self._next_sid, subject)
        self._next_sid += 1
        self._subs[sub.sid] = sub
        self._out.append(f"SUB {subject} {sub.sid}\r\n".encode())
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        if self._subs.pop(sub.sid, None) is not None and self._sock is not None:
            self._out.append(f"UNSUB {sub.sid}\r\n".encode())

    def publish(self, subject: str, payload: bytes, reply: str = "") -> None:
        """Queue a message (sent by the next `flush` or `pump`; lost if the connection
        drops first)."""
        head = f"PUB {subject} {reply} {len(payload)}\r\n" if reply else \
            f"PUB {subject} {len(payload)}\r\n"
        self._out.append(head.encode() + payload + _CRLF)

    # -- I/O ------------------------------------------------------------------------------

    def pump(self) -> None:
        """Read what the socket holds and hand it to the subscriptions, send what is
        queued, keep the connection alive; reconnect (at most every
        `reconnect_wait_s`) when it is down."""
        if self._sock is None:
            self._reconnect_if_due()
            if self._sock is None:
                return
        try:
            self._read()
            self.flush()
        except (OSError, ValueError, IndexError) as exc:  # closed, reset, or out of step
            self._lost(exc)
            return
        self._keep_alive()

    def flush(self) -> None:
        """Send what is queued, as far as the socket takes it now."""
        if not self._out or self._sock is None:
            return
        data = b"".join(self._out) if len(self._out) > 1 else self._out[0]
        try:
            sent = self._sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            self._lost(exc)
            return
        self._out = [data[sent:]] if sent < len(data) else []

    def _read(self) -> None:
        assert self._sock is not None
        parts: list[bytes] = []
        total = 0
        while total < READ_MAX:
            try:
                data = self._sock.recv(READ_BYTES)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            if not data:
                raise ConnectionResetError("closed by the server")
            parts.append(data)
            total += len(data)
            if len(data) < READ_BYTES:
                break
        if parts:
            self._last_read = time.monotonic()
            self._pings_out = 0
            self._buf = b"".join([self._buf, *parts]) if self._buf else b"".join(parts)
            self._dispatch()

    def _keep_alive(self) -> None:
        quiet = time.monotonic() - self._last_read
        if quiet < self.ping_interval_s * (self._pings_out + 1):
            return
        if self._pings_out >= self.max_pings_out:
            self._lost(f"no answer to {self._pings_out} pings")
            return
        self._pings_out += 1
        self._out.append(b"PING\r\n")
        self.flush()

    def _dispatch(self) -> None:
        """Cut the buffer into frames; an incomplete last frame stays in the buffer."""
        used = cut_frames(self._buf, self._subs, self._control)
        self._buf = self._buf[used:] if used else self._buf

    def _control(self, line: bytes) -> None:
        if line == b"PING":
            self._out.append(b"PONG\r\n")
        elif line.startswith(b"-ERR"):
            # The server closes the connection after most errors; the read sees it.
            log.warning("NATS server error: %s", line[5:].decode(errors="replace")[:200])
        elif line.startswith(b"INFO "):
            self.server_info = orjson.loads(line[5:])
        elif line not in (b"PONG", b"+OK"):
            raise ConnectionError(f"unexpected from the server: {line[:40]!r}")

    # -- request / reply -------------------------------------------------------------------

    def request(self, subject: str, payload: bytes, timeout_s: float) -> WireMsg:
        """Publish and wait for the first reply; raises nats-py's errors (`TimeoutError`,
        `NoRespondersError`), or ConnectionError when not connected."""
        if self._sock is None:
            self.pump()
            if self._sock is None:
                raise ConnectionError("not connected to NATS")
        sub = self.subscribe(self.new_inbox())
        try:
            self.publish(subject, payload, sub.subject)
            deadline = time.monotonic() + timeout_s
            while not sub.pending:
                self.pump()
                if sub.pending:
                    break
                if self._sock is None:
                    raise ConnectionError("NATS connection lost during a request")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise NatsTimeoutError
                select.select([self._sock], [], [], min(remaining, 0.05))
        finally:
            self.unsubscribe(sub)
        reply = sub.pending[0]
        if not reply[2] and reply[1].startswith(_NO_RESPONDERS):
            raise NoRespondersError
        return reply


def cut_frames(buf: bytes, subs: dict[int, Subscription],
               control: Callable[[bytes], None]) -> int:
    """Hand the complete frames at the start of `buf` to their subscriptions (MSG and
    HMSG; a message of an unknown sid is dropped) and every other protocol line to
    `control`; returns the bytes used. What follows them, an incomplete frame, is
    left for the next read to complete, wherever the socket happened to cut it."""
    end = len(buf)
    pos = 0
    while pos < end:
        eol = buf.find(_CRLF, pos)
        if eol < 0:
            break
        op = buf[pos]
        if op == 72:  # HMSG <subject> <sid> [reply] <header bytes> <total bytes>
            args = buf[pos + 5:eol].split()
            body = eol + 2
            stop = body + int(args[-1])
            if stop + 2 > end:
                break
            sub = subs.get(int(args[1]))
            if sub is not None:
                split = body + int(args[-2])
                sub.pending.append((args[2] if len(args) == 5 else b"", buf[body:split],
                                    buf[split:stop]))
            pos = stop + 2
        elif op == 77:  # MSG <subject> <sid> [reply] <bytes>
            args = buf[pos + 4:eol].split()
            body = eol + 2
            stop = body + int(args[-1])
            if stop + 2 > end:
                break
            sub = subs.get(int(args[1]))
            if sub is not None:
                sub.pending.append((args[2] if len(args) == 4 else b"", b"", buf[body:stop]))
            pos = stop + 2
        else:
            control(buf[pos:eol])
            pos = eol + 2
    return pos


class _LineReader:
    """Protocol lines from a blocking socket (handshake only)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = b""

    def next(self) -> bytes:
        while (eol := self._buf.find(_CRLF)) < 0:
            data = self._sock.recv(65536)
            if not data:
                raise ConnectionError("connection closed during the handshake")
            self._buf += data
        line, self._buf = self._buf[:eol], self._buf[eol + 2:]
        return line

    def rest(self) -> bytes:
        return self._buf


# -- headers ------------------------------------------------------------------------------

def parse_headers(block: bytes) -> tuple[str | None, str, dict[str, str]]:
    """(status, description, headers) of a header block, read as nats-py reads it:
    `NATS/1.0[ <status>[ <description>]]` then `Name: value` lines (names are
    case-sensitive, values stripped, the last of a name wins)."""
    first, _, rest = block.partition(_CRLF)
    status: str | None = None
    description = ""
    if first.startswith(_STATUS_LINE):
        code = first[9:12].strip().decode(errors="replace")
        status = code if code.isdigit() else None
        description = first[13:].decode(errors="replace")
    headers: dict[str, str] = {}
    for line in rest.split(_CRLF):
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        try:
            key = name.strip().decode("ascii")
        except UnicodeDecodeError:
            continue
        if any(ch.isspace() for ch in key):
            continue
        headers[key] = value.strip().decode("utf-8", "replace")
    return status, description, headers


# -- JetStream API ------------------------------------------------------------------------

def js_api(conn: WireConnection, subject: str, body: dict[str, Any] | None,
           timeout_s: float = 2.0) -> dict[str, Any]:
    """A JetStream API call (`$JS.API.<...>`); an error reply raises nats-py's error
    for it (`nats.js.errors.APIError` or its subclass, e.g. `NotFoundError`)."""
    _, _, data = conn.request(subject, orjson.dumps(body) if body is not None else b"",
                              timeout_s)
    answer: dict[str, Any] = orjson.loads(data)
    error = answer.get("error")
    if error:
        APIError.from_error(error)  # raises
    return answer


def stream_last_seq(conn: WireConnection, stream: str, api: str = DEFAULT_PREFIX) -> int:
    info = js_api(conn, f"{api}.STREAM.INFO.{stream}", None)
    return int(info["state"]["last_seq"])


# -- one connection per thread ------------------------------------------------------------

@dataclass
class WireLink:
    """A thread's connection to one URL, shared by everything of binloop on the thread."""

    url: str
    conn: WireConnection
    registry: dict[str, WireLink]
    users: int = 0


_local = threading.local()


def acquire_wire(url: str, name: str, connect_timeout_s: float = CONNECT_TIMEOUT_S) -> WireLink:
    """This thread's wire connection to `url` (connecting on first use); release it
    when done."""
    links: dict[str, WireLink] = getattr(_local, "links", None) or {}
    _local.links = links
    link = links.get(url)
    if link is None or link.conn.closed:
        link = links[url] = WireLink(url, WireConnection(url, name, connect_timeout_s), links)
    link.users += 1
    return link


def release_wire(link: WireLink) -> None:
    """Drop one use; the last one closes the connection (callable from any thread
    once the link's own thread no longer uses it)."""
    link.users -= 1
    if link.users > 0:
        return
    if link.registry.get(link.url) is link:
        del link.registry[link.url]
    link.conn.close()
