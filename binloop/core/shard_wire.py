"""A shard chunk's records as they cross between processes: columns in one msgpack string.

Bytewax pickles every item it sends to another process. A chunk's counted records are
up to hundreds of thousands of small tuples (key, (raw line, tool, mode, ts, session)),
and pickle (its memo of every tuple and string, then a tuple made per record again)
was a tenth of a 2-process replay's CPU. Here they travel as columns: the distinct
(key, tool, mode) once, an index per record, the raw lines joined, the ts and session
ids; msgspec encodes and decodes such lists in C. The receiving shard skips the records
it ignores (a fired key, mostly) on the ts and key alone, so their tuples are never
made (`PackedRecords.unignored`). Records whose candidate is a full record (a dict: the
schema's parser made it) or whose numbers msgpack cannot hold stay pickled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import accumulate
from typing import Any, Final

import msgspec

Pair = tuple[tuple[str, str], tuple[Any, str, str, int, Any]]
_COLUMNS = tuple[list[tuple[str, str, str, str]], list[int], bytes, list[int], list[int],
                 list[int | str]]
_ENCODER: Final = msgspec.msgpack.Encoder()
_DECODER: Final = msgspec.msgpack.Decoder(_COLUMNS)


class PackedRecords:
    """A chunk's records as received: iterated as (key, candidate) pairs on demand."""

    __slots__ = ("_columns", "packed")

    def __init__(self, packed: bytes) -> None:
        self.packed = packed
        self._columns = _DECODER.decode(packed)

    def __len__(self) -> int:
        return len(self._columns[1])

    def __iter__(self) -> Iterator[Pair]:
        return self.unignored(lambda _key, _ts: False)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedRecords | list):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def unignored(self, ignores: Callable[[tuple[str, str], int], bool]) -> Iterator[Pair]:
        """The pairs whose (key, ts) `ignores` does not ignore, in order."""
        vocab, index, lines, ends, stamps, sessions = self._columns
        keys = [(k_tool, k_mode) for k_tool, k_mode, _, _ in vocab]
        start = 0
        for at, (which, ts, end) in enumerate(zip(index, stamps, ends, strict=True)):
            key = keys[which]
            if not ignores(key, ts):
                _, _, tool, mode = vocab[which]
                yield key, (lines[start:end], tool, mode, ts, sessions[at])
            start = end


def pack_records(records: Any) -> bytes | None:
    """The records as one msgpack string of columns, or None when they are not all
    (key, candidate with raw line) pairs msgpack can hold (then the caller pickles)."""
    if isinstance(records, PackedRecords):
        return records.packed
    try:
        return _columns(records)
    except (OverflowError, TypeError, ValueError, IndexError):
        return None  # a full record (a dict), a huge number, not pairs (format 1)


def _columns(records: list[Pair]) -> bytes:
    tools = [cand[1] for _, cand in records]
    modes = [cand[2] for _, cand in records]
    known: dict[tuple[str, str], int] = {}
    note = known.setdefault
    index = [note(pair, len(known)) for pair in zip(tools, modes, strict=True)]
    # A key is a function of (tool, mode) (`DetectionParams.key_of`).
    key_of = dict(zip(zip(tools, modes, strict=True), (key for key, _ in records),
                      strict=True))
    vocab = [(*key_of[pair], *pair) for pair in known]
    lines = [cand[0] for _, cand in records]
    return _ENCODER.encode((vocab, index, b"".join(lines), list(accumulate(map(len, lines))),
                            [cand[3] for _, cand in records],
                            [cand[4] for _, cand in records]))
