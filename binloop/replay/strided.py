"""One plain JSONL file shared by `n` strided readers that seek straight to their blocks.

The file (up to its size when the reader reached it) is cut at every multiple of
`READ_BYTES` into blocks `0..K-1`; block `k` is chunk `base + k` of the input, and
reader `i` of `n` hands out the blocks whose chunk number is `i` modulo `n` — an empty
chunk for a block that ends no line, so that every chunk number exists once.

A block holds the lines that the one sequential reader's splitter completes while it is
fed that block: the line splitter is rebuilt at the block's start exactly as the
sequential read would have left it there (the partial line since the last terminator
before the block, or, when that partial line is already longer than `max_line_bytes`,
the splitter's "skipping" state: its length and first bytes), then fed the block. A `\\r`
that is a block's last byte is decided with the next block (it may be half of `\\r\\n`),
so the line it ends belongs to the next block, as in the sequential read. The last block
also gets the end of the file (an unterminated last line, the torn-line rule).

No other block is split or decoded, and the lines before a block are counted only when
a line number is needed: a chunk's `first_line` and its rejects' positions count from
the block's first line, and `RawChunk.lines_before()` (line terminators counted with
`bytes.count` from where the last count stopped) turns them into line numbers of the
file: the parse step asks only for a chunk that has dead letters. The counting cursor
(offset, lines before it) is part of the read position, so a resumed reader continues
exactly.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from functools import partial
from typing import Final

from binloop.core.reading import BOM, DEFAULT_READ, ReadOptions
from binloop.core.schema import DeadLetter
from binloop.replay import readers
from binloop.replay.readers import (
    InputReader,
    LineSplitter,
    RawChunk,
    RawItem,
    ReadPosition,
    _complete_json,
    _kind,
    _Lines,
    _Reject,
)

log = logging.getLogger("binloop.replay")
SCAN_BYTES: Final = 1 << 16  # how far back one read looks for a line's start
COUNT_BYTES: Final = 1 << 20  # how much one read counts terminators in


class SeekingReader(InputReader):
    """An :class:`InputReader` with a `stride` that reads only its own blocks of a plain
    JSONL file (whole blocks; a .gz file or Parquet is read through as by the base)."""

    def __init__(self, path: str, batch_size: int, partition: str = "input",
                 resume: ReadPosition | None = None, input_format: str = "auto",
                 options: ReadOptions = DEFAULT_READ,
                 stride: tuple[int, int] = (0, 1)) -> None:
        super().__init__(path, batch_size, partition, resume, input_format, options,
                         whole_blocks=True, stride=stride)
        self._seeking: SeekingFile | None = None

    def _next_own_chunk(self) -> RawChunk | None:
        if _kind(self.files[self.position.file_index]) == "jsonl":
            return self._next_block()
        return super()._next_own_chunk()

    def _next_block(self) -> RawChunk | None:
        """This reader's next block of a plain file, or None at the file's end (the
        position then stands at the next file)."""
        position = self.position
        name = self.files[position.file_index]
        if self._seeking is None:
            # (offset, line) of this reader's position: how far its lines were counted.
            self._seeking = SeekingFile(name, self.options, position.offset, position.line)
        seeking = self._seeking
        mine, readers_n = self.stride
        block = position.seq - position.base
        block += (mine - position.base - block) % readers_n
        if block >= seeking.blocks:
            seeking.close()
            self._seeking = None
            end = position.base + seeking.blocks
            self.position = ReadPosition(end, position.file_index + 1, base=end)
            return None
        parts, lines_before = seeking.parts(block)
        seq = position.base + block
        counter = seeking.counter
        self.position = ReadPosition(seq + 1, position.file_index, counter.counted_to,
                                     counter.lines_before, position.base)
        self.bytes_done = self._done_before() + min(seeking.size,
                                                    (block + 1) * seeking.block_bytes)
        first = parts[0].items if parts else []
        return block_chunk(parts, self.partition, seq, name, self._format_of(name, first),
                           lines_before)

    def close(self) -> None:
        super().close()
        if self._seeking is not None:
            self._seeking.close()
            self._seeking = None


class LineCounter:
    """Lines completed before an offset of one file, counted forward from the last
    offset asked for (the file is opened only for the count)."""

    def __init__(self, name: str, counted_to: int = 0, lines_before: int = 0) -> None:
        self.name = name
        self.counted_to = counted_to  # always a line's start
        self.lines_before = lines_before

    def lines_to(self, offset: int) -> int:
        """Lines completed before `offset` (a line's start)."""
        if offset < self.counted_to:  # asked out of order: count again from the start
            self.counted_to = self.lines_before = 0
        if offset == self.counted_to:
            return self.lines_before
        buffer = bytearray(COUNT_BYTES)  # reused: no fresh pages per read
        with open(self.name, "rb", buffering=0) as file:
            while self.counted_to < offset:
                size = os.preadv(file.fileno(), [buffer], self.counted_to)
                size = min(size, offset - self.counted_to)
                if size <= 0:
                    break  # the file shrank: nothing more to count
                data = buffer if size == len(buffer) else memoryview(buffer)[:size].tobytes()
                lines = data.count(b"\n")
                if b"\r" in data:
                    lines += data.count(b"\r") - data.count(b"\r\n")
                    if data.endswith(b"\r") and self.counted_to + size < offset \
                            and os.pread(file.fileno(), 1, self.counted_to + size) == b"\n":
                        lines -= 1  # a \r\n cut by this read: its \n is counted next
                self.counted_to += size
                self.lines_before += lines
        return self.lines_before


@dataclass(frozen=True, slots=True)
class BlockPart:
    """Rejects then lines (from `first_line`) of one block: a block with a reject after
    some of its lines is several parts (rejects come before a chunk's items)."""

    first_line: int
    items: list[RawItem]
    rejects: tuple[DeadLetter, ...]
    block: bytes | None
    ends: object


class SeekingFile:
    """The blocks of one plain file for reader `mine` of `readers` (see the module)."""

    def __init__(self, name: str, options: ReadOptions, counted_to: int = 0,
                 lines_before: int = 0) -> None:
        self.name = name
        self._file = open(name, "rb", buffering=0)  # noqa: SIM115 - closed by close()
        self._fd = self._file.fileno()
        self.size = os.fstat(self._fd).st_size
        self.block_bytes = readers.READ_BYTES
        self.blocks = -(-self.size // self.block_bytes)
        self._max_bytes = options.max_line_bytes
        self.counter = LineCounter(name, counted_to, lines_before)

    def parts(self, k: int) -> tuple[list[BlockPart], partial[int]]:
        """The parts of block `k` (none for a block that completes no line), their line
        numbers counted from the block's first line; and the count of the lines before
        it (call it only when a line number is needed)."""
        lo = k * self.block_bytes
        hi = min(self.size, lo + self.block_bytes)
        last = k == self.blocks - 1
        data = self._pread(lo, hi - lo)
        held_cr = lo > 0 and self._pread(lo - 1, 1) == b"\r"
        if not last and not held_cr and b"\n" not in data and b"\r" not in data:
            # inside a line: the block that ends it hands it out
            return [], partial(self.counter.lines_to, self.counter.counted_to)
        start = self._line_start(lo, held_cr)
        lines_before = partial(self.counter.lines_to, start)
        splitter = LineSplitter(self.name, self._max_bytes, 1, uncut=True)
        carried = lo - start
        body = carried - (1 if held_cr else 0)
        bom = len(BOM) if body >= len(BOM) and self._pread(start, len(BOM)) == BOM else 0
        if body - bom > self._max_bytes:  # the sequential splitter is skipping this line
            # It keeps the line's first bytes (after a BOM) for the dead letter.
            splitter.resume_skipping(body, self._pread(
                start + bom, min(body - bom, readers.REJECT_PREFIX_BYTES)), bom, held_cr)
        elif carried:
            splitter.resume_with(self._pread(start, carried))
        pieces = splitter.feed(data)
        if last:
            end, torn = splitter.finish()
            if torn and (self._grew() or not _complete_json(torn)):
                log.warning("%s: line %d (%d bytes) has no line end and is not complete "
                            "yet: left unread (a writer is still at it?)", self.name,
                            lines_before() + splitter.line - 1, len(torn))
            else:
                pieces.extend(end)
        return _as_parts(pieces, 1), lines_before

    def _line_start(self, lo: int, held_cr: bool) -> int:
        """Where the line in progress at `lo` starts: after the last terminator before
        it, except a `\\r` just before `lo` (its line is decided in this block)."""
        end = lo - 1 if held_cr else lo
        while end > 0:
            begin = max(0, end - SCAN_BYTES)
            window = self._pread(begin, end - begin)
            found = max(window.rfind(b"\n"), window.rfind(b"\r"))
            if found >= 0:
                return begin + found + 1
            end = begin
        return 0

    def _pread(self, offset: int, size: int) -> bytes:
        return os.pread(self._fd, size, offset) if size > 0 else b""

    def _grew(self) -> bool:
        try:
            return os.fstat(self._fd).st_size > self.size
        except OSError:
            return False

    def close(self) -> None:
        self._file.close()


def _as_parts(pieces: list[_Lines | _Reject], first_line: int) -> list[BlockPart]:
    """Splitter output as parts, each its rejects before its lines."""
    parts: list[BlockPart] = []
    rejects: list[DeadLetter] = []
    line = first_line
    for piece in pieces:
        if isinstance(piece, _Reject):
            rejects.append(piece.letter)
            line += piece.lines
            continue
        if piece.ends is not None:
            parts.append(BlockPart(line, [], tuple(rejects), piece.block, piece.ends))
            line += len(piece.ends) + 1
        elif piece.lines:
            parts.append(BlockPart(line, list(piece.lines), tuple(rejects), piece.block, None))
            line += len(piece.lines)
        else:
            continue  # a last line that is only a BOM: no line
        rejects = []
    if rejects:
        parts.append(BlockPart(line, [], tuple(rejects), None, None))
    return parts


def block_chunk(parts: list[BlockPart], partition: str, seq: int, source: str,
                input_format: str, lines_before: partial[int]) -> RawChunk:
    """One chunk for one block: its first part, the others in `RawChunk.more`."""
    chunks = [RawChunk(partition, seq, source, part.first_line, part.items, 0, input_format,
                       rejects=part.rejects, damaged_files=0, block=part.block,
                       ends=part.ends, lines_before=lines_before) for part in parts]
    if not chunks:
        return RawChunk(partition, seq, source, 1, [], 0, input_format,
                        lines_before=lines_before)
    head, *more = chunks
    return replace(head, more=tuple(more)) if more else head


def numbered(letter: DeadLetter, lines_before: int) -> DeadLetter:
    """A dead letter of a chunk whose line numbers count from its block's first line,
    with its line number in the file."""
    if not lines_before or not letter.position.isdigit():
        return letter
    return replace(letter, position=str(int(letter.position) + lines_before))
