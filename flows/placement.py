"""Shard names that Bytewax hands to distinct workers: one shard per worker.

Bytewax 0.21 routes a stateful step's key to worker `hash(key) % workers`, where `hash`
is Rust's `DefaultHasher` (SipHash-1-3 with zero keys) over the key's UTF-8 bytes and a
0xFF terminator (`impl Hash for str`). Shards named "0".."n-1" fall where that hash puts
them: with 2 workers "0" and "1" both land on the same worker, which then runs all of the
detection while the other waits. A run that keeps no recovery store (so nothing fixes its
shard names) can instead name its shards so that shard `i` lands on worker `i`.
tests/test_placement.py checks the hash against where a real Bytewax cluster routes keys.
"""

from __future__ import annotations

from functools import cache
from itertools import count
from typing import Final

_MASK: Final = (1 << 64) - 1


def _rotl(x: int, bits: int) -> int:
    return ((x << bits) | (x >> (64 - bits))) & _MASK


def _sip_round(v0: int, v1: int, v2: int, v3: int) -> tuple[int, int, int, int]:
    v0 = (v0 + v1) & _MASK
    v1 = _rotl(v1, 13) ^ v0
    v0 = _rotl(v0, 32)
    v2 = (v2 + v3) & _MASK
    v3 = _rotl(v3, 16) ^ v2
    v0 = (v0 + v3) & _MASK
    v3 = _rotl(v3, 21) ^ v0
    v2 = (v2 + v1) & _MASK
    v1 = _rotl(v1, 17) ^ v2
    v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


def siphash13(data: bytes) -> int:
    """SipHash-1-3 of `data` with a zero key (Rust's `DefaultHasher::new()`)."""
    v0, v1, v2, v3 = 0x736F6D6570736575, 0x646F72616E646F6D, 0x6C7967656E657261, \
        0x7465646279746573
    whole = len(data) - len(data) % 8
    for at in range(0, whole, 8):
        word = int.from_bytes(data[at:at + 8], "little")
        v3 ^= word
        v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3)
        v0 ^= word
    word = ((len(data) & 0xFF) << 56) | int.from_bytes(data[whole:], "little")
    v3 ^= word
    v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3)
    v0 ^= word
    v2 ^= 0xFF
    for _ in range(3):
        v0, v1, v2, v3 = _sip_round(v0, v1, v2, v3)
    return v0 ^ v1 ^ v2 ^ v3


def worker_of(key: str, workers: int) -> int:
    """The worker (0..workers-1, across all processes) Bytewax runs state `key` on."""
    return siphash13(key.encode() + b"\xff") % workers


@cache
def placed_shard_names(workers: int) -> tuple[str, ...]:
    """One shard name per worker, name `i` on worker `i`: for each worker the smallest
    number (as text) that Bytewax routes to it."""
    names: dict[int, str] = {}
    for number in count():
        names.setdefault(worker_of(str(number), workers), str(number))
        if len(names) == workers:
            return tuple(names[worker] for worker in range(workers))
    raise AssertionError("unreachable")  # count() never ends
