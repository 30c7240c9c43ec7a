"""The TCP ports this machine (this network namespace) listens on, asked of the kernel
through netlink `sock_diag` (what `ss -ltn` does), without connecting to any of them.

The kernel answers a query for listening sockets from its table of listeners alone. Reading
`/proc/net/tcp` instead walks the whole table of established connections (262,144 buckets
here): 10 ms of CPU per look, which a forked peer waiting for its cluster's listener paid
every 2 ms. pyroute2 has this query, but importing it takes ~0.2 s: more than the whole
start-up this saves.
"""

from __future__ import annotations

import socket
import struct
from typing import Final

NETLINK_SOCK_DIAG: Final = 4
SOCK_DIAG_BY_FAMILY: Final = 20
NLM_F_REQUEST: Final = 0x1
NLM_F_DUMP: Final = 0x300
NLMSG_ERROR: Final = 2
NLMSG_DONE: Final = 3
TCP_LISTEN: Final = 10

_HEADER: Final = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, seq, pid
# inet_diag_req_v2: family, protocol, extensions, pad, states, then a 48-byte socket id
_REQUEST: Final = struct.Struct("=BBBxI48x")
_SPORT_AT: Final = 4  # inet_diag_msg: family, state, timer, retrans, then sport (big-endian)


class ListeningUnknown(OSError):
    """The kernel would not say (no netlink `sock_diag` here, or an unexpected answer)."""


def listening_ports() -> set[int]:
    """The local ports of every listening TCP socket, IPv4 and IPv6: from netlink, or
    where that is refused (a sandbox's seccomp filter) from `/proc/net/tcp*`."""
    try:
        return _from_netlink()
    except OSError:
        return _from_proc()


def _from_netlink() -> set[int]:
    ports: set[int] = set()
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as diag:
        diag.settimeout(1.0)  # a kernel that never answers: the /proc tables then
        for seq, family in enumerate((socket.AF_INET, socket.AF_INET6), start=1):
            body = _REQUEST.pack(family, socket.IPPROTO_TCP, 0, 1 << TCP_LISTEN)
            diag.sendall(_HEADER.pack(_HEADER.size + len(body), SOCK_DIAG_BY_FAMILY,
                                      NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body)
            ports |= _answer(diag, seq)
    return ports


def _answer(diag: socket.socket, seq: int) -> set[int]:
    ports: set[int] = set()
    while True:
        data = diag.recv(65536)
        if not data:
            raise ListeningUnknown("netlink closed before the end of its answer")
        at = 0
        while at + _HEADER.size <= len(data):
            length, kind, _flags, got_seq, _pid = _HEADER.unpack_from(data, at)
            if length < _HEADER.size:
                raise ListeningUnknown("a netlink message shorter than its header")
            if got_seq == seq:
                if kind == NLMSG_DONE:
                    return ports
                if kind == NLMSG_ERROR:
                    raise ListeningUnknown("the kernel refused the sock_diag query")
                if kind == SOCK_DIAG_BY_FAMILY:
                    (port,) = struct.unpack_from("!H", data, at + _HEADER.size + _SPORT_AT)
                    ports.add(port)
            at += (length + 3) & ~3  # messages are 4-byte aligned


def _from_proc() -> set[int]:
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as rows:
            next(rows)
            for row in rows:
                fields = row.split(None, 4)
                if fields[3] == "0A":  # TCP_LISTEN
                    ports.add(int(fields[1].rpartition(":")[2], 16))
    return ports
