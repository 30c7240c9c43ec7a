"""`binloop.ops.listening`: the kernel's list of listening TCP ports, from netlink
`sock_diag`, and from `/proc/net/tcp*` where netlink is refused (checked under a real
seccomp filter that refuses it), as root and as `nobody`."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from binloop.ops import listening
from tests.nonroot import NonRootUnavailable, as_user, is_root, nonroot_venv, shared_dir

READERS = {"netlink": listening._from_netlink, "proc": listening._from_proc}
SECCOMP_EXEC = Path(__file__).with_name("seccomp_exec.py")
AF_NETLINK = 16


@contextmanager
def sockets(family: socket.AddressFamily, host: str) -> Iterator[tuple[int, int]]:
    """A listening socket's port and a bound-only socket's port."""
    with socket.socket(family) as server, socket.socket(family) as bound:
        server.bind((host, 0))
        server.listen()
        bound.bind((host, 0))
        yield server.getsockname()[1], bound.getsockname()[1]


@pytest.mark.parametrize("reader", READERS.values(), ids=READERS.keys())
@pytest.mark.parametrize(("family", "host"), [(socket.AF_INET, "127.0.0.1"),
                                               (socket.AF_INET6, "::1")], ids=["ipv4", "ipv6"])
def test_lists_listening_ports_and_not_bound_ones(reader: Callable[[], set[int]],
                                                 family: socket.AddressFamily,
                                                 host: str) -> None:
    with sockets(family, host) as (listening_port, bound_port):
        ports = reader()
    assert listening_port in ports
    assert bound_port not in ports


def test_netlink_and_proc_agree_on_many_listeners() -> None:
    """More listeners than fit one netlink datagram's answer, all reported by both."""
    servers = [socket.socket() for _ in range(300)]
    try:
        for server in servers:
            server.bind(("127.0.0.1", 0))
            server.listen()
        ours = {server.getsockname()[1] for server in servers}
        assert ours <= listening._from_netlink()
        assert ours <= listening._from_proc()
    finally:
        for server in servers:
            server.close()


PROBE = """
import socket, sys
from binloop.ops import listening
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen()
port = server.getsockname()[1]
try:
    listening._from_netlink()
    netlink = "allowed"
except OSError as exc:
    netlink = type(exc).__name__
print(netlink, port in listening.listening_ports())
"""


# As root, also as `nobody` (slow: it may build the non-root venv); a non-root user is
# already the unprivileged case.
USERS = [pytest.param(False, id="current")] + (
    [pytest.param(True, id="nobody", marks=pytest.mark.slow)] if is_root() else [])


@pytest.mark.parametrize("unprivileged", USERS)
def test_where_netlink_is_refused_the_proc_tables_answer(unprivileged: bool) -> None:
    """Under a seccomp filter that refuses netlink sockets (as a container's profile
    may), listening_ports still sees the listener; without the filter netlink answers."""
    try:
        python = str(nonroot_venv()) if unprivileged else sys.executable
    except NonRootUnavailable as exc:
        pytest.fail(f"cannot run the non-root half: {exc}")
    shared = shared_dir("binloop-listening-")
    profile = shared / "no-netlink.json"
    profile.write_text(json.dumps({
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["socket"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1,
                      "args": [{"index": 0, "value": AF_NETLINK, "op": "SCMP_CMP_EQ"}]}]}))
    profile.chmod(0o644)
    try:
        plain = subprocess.run(as_user([python, "-c", PROBE], unprivileged), capture_output=True,
                               text=True, timeout=60, check=True)
        assert plain.stdout.split() == ["allowed", "True"], plain.stderr
        filtered = subprocess.run(
            as_user([python, str(SECCOMP_EXEC), str(profile), "--", python, "-c", PROBE],
                    unprivileged),
            capture_output=True, text=True, timeout=60, check=True)
        assert filtered.stdout.split() == ["PermissionError", "True"], filtered.stderr
    finally:
        shutil.rmtree(shared, ignore_errors=True)
