"""Replay readers: JSONL, JSONL.gz and Parquet files, directories of them, and stdin.

A reader hands out :class:`RawChunk` batches of undecoded lines (or Parquet rows) in
arrival order, numbered by `seq`, and a :class:`ReadPosition` from which a new reader
resumes exactly after the last chunk handed out (for Bytewax recovery).

What the reader itself decides (docs/robustness.md), the same for every engine:

* Lines end at `\\n`, `\\r\\n` or a lone `\\r`; a UTF-8 byte order mark at the start of
  a line (or file) is removed.
* A line longer than `max_line_bytes` is never held whole: its first bytes are kept and
  it becomes one reject (a dead letter) while the rest of it is skipped as it streams by.
* A damaged file (a truncated or corrupt `.gz`, trailing junk after the gzip data, a
  file that is not what its name says, an unreadable Parquet file): the records before
  the damage are handed out, then the damage is one reject naming the byte (or row)
  offset, and the reader goes on with the next file. `RawChunk.damaged_files` counts it.
* A plain file is read up to its size at open: a line appended while it is read is not
  torn. A last line without its newline is read only when the file has not grown since
  and the line is complete JSON; otherwise its writer is still at it (or died in the
  middle): it is left unread, with a warning, never dead-lettered as a torn record.
* Standard input (a pipe) is handed out as it comes: a chunk ends early when the pipe
  holds nothing more for now, so `tail -F FILE | binloop publish -` follows FILE; a line
  is never split, its start is held until its end arrives.
* Symbolic links inside a directory are skipped unless `follow_symlinks`.
* With `whole_blocks`, a chunk of a JSONL file is the lines of one block read (about
  `READ_BYTES`) rather than `batch_size` lines, and when the block needed no rewriting
  (no `\r`, no BOM, no oversized line) the chunk carries it as read (`RawChunk.block`):
  a block decoder takes it in one call, and 1M lines cut one by one in Python cost as
  much as decoding them. Such a block is not even cut into lines: the chunk carries the
  offsets of its newlines instead (`RawChunk.ends`, found by numpy in one pass), its
  `items` are empty until asked for (`RawChunk.lines()`), and the decoder slices out only
  the lines it keeps.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import re
import select
import sys
import zlib
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, NoReturn

import orjson

from binloop.core.errors import InputError
from binloop.core.reading import BOM, DEFAULT_READ, ReadOptions, has_bom
from binloop.core.schema import DeadLetter

if TYPE_CHECKING:  # polars costs a JSONL replay 160 ms of start-up: only for Parquet
    import polars as pl

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
GZ_SUFFIXES = (".jsonl.gz", ".ndjson.gz", ".json.gz")
PARQUET_SUFFIXES = (".parquet", ".pq")
STDIN = "-"
# How much of a rejected line or a damaged file's content a dead letter keeps.
REJECT_PREFIX_BYTES: Final = 64
READ_BYTES: Final = 1 << 20
# A sole reader's blocks (`InputReader(block_bytes=...)`: no other reader cuts the input
# alike, so any size will do). 256 KiB rather than READ_BYTES: a block, its decoded records
# and their strings then stay in a core's L2 cache while they are checked and counted
# (docs/benchmarks.md).
SOLE_READER_BLOCK_BYTES: Final = 256 << 10
PARQUET_SALVAGE_ROWS: Final = 1 << 12
_TERMINATOR = re.compile(rb"(\r\n|\r|\n)")
# The reason of a line the reader refused (it takes a line, and starts a chunk).
READER_REJECT: Final = "line of "

RawItem = bytes | dict[str, Any]
log = logging.getLogger("binloop.replay")




@dataclass(frozen=True, slots=True)
class RawChunk:
    """Consecutive raw lines (or Parquet rows) of one input partition; item `i` is at
    line `first_line + i` of `source`. Blank lines are kept as `b""`.

    `rejects` are inputs the reader itself refused (an oversized line, a damaged file's
    rest); they come before `items` in arrival order and count as records read.
    `damaged_files` is how many of them report a damaged file."""

    partition: str
    seq: int
    source: str
    first_line: int
    items: list[RawItem]
    # The seq this reader started at (> 0 after a resume from recovery).
    start_seq: int = 0
    # How the lines are written (`binloop.replay.formats`); mapped in the parse step.
    input_format: str = "binloop"
    # Adopting a live stream that holds telemetry stored before it was partitioned
    # (flows.nats_source): a chunk is applied only after the backlog of partition
    # `waits_for`, which a chunk of that partition with `releases` ends.
    waits_for: str | None = None
    releases: bool = False
    rejects: tuple[DeadLetter, ...] = ()
    damaged_files: int = 0
    # `b"\n".join(items)` when the reader read the lines as one block, else None.
    block: bytes | None = None
    # A block not cut into lines: `items` is empty and these are the offsets in `block`
    # of the newlines between its lines (numpy int64; `lines()` cuts it when asked).
    ends: Any = None
    # A strided reader's block whose reject follows some of its lines: the block's
    # further parts (same seq), each its rejects before its lines (binloop.replay.strided).
    more: tuple[RawChunk, ...] = ()
    # Set by a strided reader: `first_line` and the rejects' positions count from the
    # block's first line, and this counts the file's lines before it (on demand: the
    # parse step asks only when a dead letter needs its line number).
    lines_before: Callable[[], int] | None = None

    @property
    def count(self) -> int:
        """How many lines (or rows) the chunk holds (not those of `more`)."""
        return len(self.items) if self.ends is None else len(self.ends) + 1

    def lines(self) -> list[RawItem]:
        """The chunk's lines (a block not cut yet is cut now)."""
        if self.ends is None or self.block is None:
            return self.items
        return self.block.split(b"\n")  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class ReadPosition:
    """Where a reader stands: the next chunk's seq, the file, and the offset in it."""

    seq: int = 0
    file_index: int = 0
    offset: int = 0
    line: int = 0
    # The seq of the file's first chunk (strided readers number a plain file's chunks by
    # block: `base + k`; their offset and line are then how far lines were counted).
    base: int = 0


def list_input_files(path: str, follow_symlinks: bool = False) -> list[str]:
    """The files a path stands for, in replay order (a directory: sorted by name; its
    symbolic links are skipped unless `follow_symlinks`). Raises :class:`InputError`."""
    if path == STDIN:
        return [STDIN]
    target = Path(path)
    try:
        target.stat()
    except PermissionError:  # a directory on the way may not be entered
        raise InputError(f"cannot read {path}: permission denied") from None
    except OSError:
        pass  # missing: said below
    try:
        if target.is_dir():
            files = sorted(str(p) for p in target.iterdir()
                           if (follow_symlinks or not p.is_symlink()) and p.is_file()
                           and _kind(p.name))
            if not files:
                raise InputError(f"no .jsonl, .jsonl.gz or .parquet files in {path}")
            return files
    except PermissionError as exc:
        raise InputError(f"cannot read directory {path}: {exc.strerror}") from None
    if not target.exists():
        raise InputError(f"input {path} does not exist")
    if not target.is_file():
        raise InputError(f"input {path} is not a regular file or a directory")
    if not _kind(target.name):
        raise InputError(f"{path}: expected a .jsonl, .jsonl.gz, .ndjson or .parquet file")
    if not os.access(target, os.R_OK):
        raise InputError(f"cannot read {path}: permission denied")
    return [path]


def input_size(path: str, follow_symlinks: bool = False) -> int | None:
    """Total bytes of the input files, for progress (None for stdin)."""
    files = list_input_files(path, follow_symlinks)
    return None if files == [STDIN] else sum(_size(f) for f in files)


def _size(name: str) -> int:
    try:
        return Path(name).stat().st_size
    except OSError:
        return 0


def _kind(name: str) -> str | None:
    lowered = name.lower()
    if lowered.endswith(GZ_SUFFIXES):
        return "gz"
    if lowered.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if lowered.endswith(JSONL_SUFFIXES):
        return "jsonl"
    return None


def prefix_text(data: bytes, size: int | None = None) -> str:
    """The first bytes of rejected content, printable (all a dead letter keeps of it);
    `size`: the whole content's length where `data` is only its first bytes."""
    size = len(data) if size is None else size
    head = data[:REJECT_PREFIX_BYTES].decode("utf-8", errors="backslashreplace")
    return head + (f"...[{size - REJECT_PREFIX_BYTES} more bytes]"
                   if size > REJECT_PREFIX_BYTES else "")


def newline_offsets(block: bytes) -> Any:
    """The offsets of `block`'s newlines, found by numpy in one pass (`RawChunk.ends`)."""
    from binloop.core.lean_numpy import np  # imported when first needed: ~0.1 s of start-up

    return np.flatnonzero(np.frombuffer(block, np.uint8) == 0x0A)


class InputReader:
    """Reads one input (file, directory or stdin) as a sequence of chunks."""

    def __init__(self, path: str, batch_size: int, partition: str = "input",
                 resume: ReadPosition | None = None, input_format: str = "auto",
                 options: ReadOptions = DEFAULT_READ, whole_blocks: bool = False,
                 stride: tuple[int, int] = (0, 1), block_bytes: int | None = None) -> None:
        """`batch_size` lines (or Parquet rows) per chunk; with `whole_blocks`, a chunk
        of a JSONL file is the lines of one block read instead (see the module), of
        `block_bytes` (default READ_BYTES, which readers sharing an input must keep).

        `stride` (i, n): of the chunks every reader of this input cuts alike, hand out
        only those whose seq is i modulo n, so that n readers share one input without
        sending its bytes to each other; this reader reads every file through (the
        others' chunks read past), `binloop.replay.strided.SeekingReader` seeks straight
        to its own blocks of a plain file."""
        if stride != (0, 1) and path == STDIN:
            raise InputError("stdin cannot be shared by several readers: use one worker")
        self.whole_blocks = whole_blocks
        self.stride = stride
        self.block_bytes = block_bytes
        self.files = list_input_files(path, options.follow_symlinks)
        self.input_format = input_format
        self._formats: dict[int, str] = {}  # `auto` resolved, per file index
        self.partition = partition
        self.batch_size = batch_size
        self.options = options
        self.position = resume or ReadPosition()
        # Where this reader's chunks start (a shard checks a resumed stream against it);
        # readers that share an input resume at different chunks: theirs start at 0.
        self.start_seq = self.position.seq if stride[1] == 1 else 0
        self.bytes_done = 0
        self.lines_handed_out = 0  # since this reader started (for progress)
        self._file: _FileCursor | None = None

    def next_chunk(self) -> RawChunk | None:
        """The next chunk (of this reader's stride), or None at the end of the last file."""
        while self.position.file_index < len(self.files):
            chunk = self._next_own_chunk()
            if chunk is not None:
                self.lines_handed_out += sum(part.count + len(part.rejects)
                                             for part in (chunk, *chunk.more))
                return chunk
        return None

    def _next_own_chunk(self) -> RawChunk | None:
        """The current file's next chunk if it is this reader's, else None (read on). This
        reader reads every file through; `binloop.replay.strided.SeekingReader` seeks."""
        chunk = self._next_of_file()
        mine, readers = self.stride
        if chunk is not None and readers > 1 and chunk.seq % readers != mine:
            return None  # read past: another reader hands it out
        return chunk

    def _next_of_file(self) -> RawChunk | None:
        """The next chunk of the current file, or None at its end (the position then
        stands at the next file)."""
        cursor = self._cursor()
        first_line = self.position.line + 1
        got = cursor.read(self.batch_size)
        if got.count or got.rejects:
            lines = got.count + got.rejected_lines
            self.position = ReadPosition(self.position.seq + 1, self.position.file_index,
                                         cursor.offset, self.position.line + lines,
                                         self.position.base)
            self.bytes_done = self._done_before() + cursor.bytes_read()
            return RawChunk(self.partition, self.position.seq - 1, cursor.name,
                            first_line + got.rejected_lines, got.items, self.start_seq,
                            self._format_of(cursor.name, got.items),
                            rejects=tuple(got.rejects), damaged_files=got.damaged,
                            block=got.block, ends=got.ends)
        cursor.close()
        self._file = None
        seq = self.position.seq
        self.position = ReadPosition(seq, self.position.file_index + 1, base=seq)
        return None

    def _format_of(self, name: str, items: list[RawItem]) -> str:
        """The input format of the current file (`auto`: sniffed from its first line)."""
        from binloop.replay.formats import AUTO, BINLOOP, resolve, sniff_file

        if self.input_format != AUTO:
            return self.input_format
        index = self.position.file_index
        known = self._formats.get(index)
        if known is None:
            found = resolve(AUTO, items) if name == STDIN else sniff_file(name)
            if found is None:  # only blank lines so far: any format reads them alike
                return BINLOOP
            known = self._formats[index] = found
        return known

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __iter__(self) -> Iterator[RawChunk]:
        try:
            while (chunk := self.next_chunk()) is not None:
                yield chunk
        finally:
            self.close()

    def _cursor(self) -> _FileCursor:
        if self._file is None:
            name = self.files[self.position.file_index]
            self._file = open_cursor(name, self.position.offset, self.position.line,
                                     self.options, self.whole_blocks, self.block_bytes)
        return self._file

    def _done_before(self) -> int:
        return sum(_size(f) for f in self.files[: self.position.file_index] if f != STDIN)


@dataclass(slots=True)
class Batch:
    """What one `read` gives: rejects first (each stands for `rejected_lines` lines
    before the items, or for none: a damaged file's end), then up to `n` items."""

    items: list[RawItem] = field(default_factory=list)
    rejects: list[DeadLetter] = field(default_factory=list)
    rejected_lines: int = 0
    damaged: int = 0
    block: bytes | None = None  # `b"\n".join(items)` when they are one block as read
    ends: Any = None  # see RawChunk.ends: the block is not cut into `items`

    @property
    def count(self) -> int:
        return len(self.items) if self.ends is None else len(self.ends) + 1


class _FileCursor(ABC):
    """A file read line by line (or row by row) from an offset."""

    name: str
    offset: int

    @abstractmethod
    def read(self, n: int) -> Batch:
        """Up to `n` more items; an empty batch at the end of the file."""

    def bytes_read(self) -> int:
        return self.offset

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        """Release the file."""


class Damaged(Exception):
    """A byte source hit damage after handing out everything good before it."""

    def __init__(self, reason: str, position: str, raw: bytes = b"") -> None:
        super().__init__(reason)
        self.reason, self.position, self.raw = reason, position, raw


# --- byte sources ----------------------------------------------------------------------


class _Bytes(ABC):
    """Raw content of one input, block by block."""

    @abstractmethod
    def read(self, limit: int = READ_BYTES) -> bytes:
        """The next block (a source may give more than `limit`); b"" at the end.
        Raises :class:`Damaged` after the good part."""

    def grew(self) -> bool:
        """Whether the input has grown since it was opened (a writer is still at it)."""
        return False

    def waiting(self) -> bool:
        """Whether the next read would wait for a writer (a pipe with nothing in it now)."""
        return False

    def compressed_tell(self) -> int | None:
        return None

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        """Release the input."""


class _PlainBytes(_Bytes):
    """A file up to the size it had when it was opened."""

    def __init__(self, name: str, offset: int) -> None:
        self._file = open(name, "rb", buffering=0)  # noqa: SIM115 - closed by close()
        self._limit = os.fstat(self._file.fileno()).st_size
        self._left = max(0, self._limit - offset)
        self._file.seek(offset)

    def read(self, limit: int = READ_BYTES) -> bytes:
        if self._left <= 0:
            return b""
        data = self._file.read(min(limit, READ_BYTES, self._left)) or b""
        self._left -= len(data)
        if not data:
            self._left = 0
        return data

    def grew(self) -> bool:
        try:
            return os.fstat(self._file.fileno()).st_size > self._limit
        except OSError:
            return False

    def close(self) -> None:
        self._file.close()


class _StreamBytes(_Bytes):
    """A stream (stdin, a pipe, bytes in memory): read as it comes, never closed here."""

    def __init__(self, stream: IO[bytes] | Any) -> None:
        self._read = getattr(stream, "read1", None) or stream.read
        try:
            self._fd: int | None = stream.fileno()
        except (AttributeError, OSError, ValueError):  # bytes in memory never wait
            self._fd = None

    def read(self, limit: int = READ_BYTES) -> bytes:
        data: bytes = self._read(READ_BYTES)
        return data

    def waiting(self) -> bool:
        if self._fd is None:
            return False
        try:
            ready, _, _ = select.select([self._fd], [], [], 0)
        except (OSError, ValueError):
            return False
        return not ready


class _GzipBytes(_Bytes):
    """A gzip file (one or more members), decompressed a bounded block at a time.

    Damage is reported with the compressed byte offset where it was found: a file that
    does not start as gzip, corrupt data or a bad checksum, a stream cut short, and
    bytes after the last member that are not another member (zero padding is fine)."""

    def __init__(self, name: str, skip: int) -> None:
        self._raw = open(name, "rb")  # noqa: SIM115 - closed by close()
        self._fed = 0  # compressed bytes the decompressor has consumed so far
        self._member_fed = 0  # ... of the current member
        self._inflate = zlib.decompressobj(wbits=31)
        self._pending = b""  # compressed bytes not yet given to the decompressor
        self._ended = False
        self._damage: Damaged | None = None
        self._skip = skip

    def read(self, limit: int = READ_BYTES) -> bytes:
        while True:
            data = self._next()
            if self._skip <= 0 or not data:
                return data
            if len(data) <= self._skip:
                self._skip -= len(data)
                continue
            data, self._skip = data[self._skip:], 0
            return data

    def compressed_tell(self) -> int:
        return self._raw.tell()

    def _next(self) -> bytes:
        while not self._ended:
            inflate = self._inflate
            source = inflate.unconsumed_tail
            if not source:
                source, self._pending = self._pending or self._raw.read(READ_BYTES), b""
                if not source:
                    self._fail(self._truncated())
            try:
                out = inflate.decompress(source, READ_BYTES)
            except zlib.error as exc:
                self._fail(Damaged(self._zlib_reason(exc), f"byte {self._fed}",
                                   self._raw_prefix()))
            used = len(source) - len(inflate.unconsumed_tail) - len(inflate.unused_data)
            self._fed += used
            self._member_fed += used
            if inflate.eof:
                try:
                    self._next_member(inflate.unused_data)
                except Damaged as found:
                    self._ended, self._damage = True, found
            if out:
                return out
        pending, self._damage = self._damage, None
        if pending is not None:
            raise pending
        return b""

    def _fail(self, damage: Damaged) -> NoReturn:
        self._ended = True
        raise damage

    def _next_member(self, rest: bytes) -> None:
        rest = rest or self._raw.read(READ_BYTES)
        if not rest:
            self._ended = True
            return
        if rest[:2] in (b"\x1f\x8b", b"\x1f"):
            self._inflate = zlib.decompressobj(wbits=31)
            self._member_fed = 0
            self._pending = rest
            return
        self._ended = True
        if self._only_zeros(rest):
            return  # zero padding after the last member (tape and block writers add it)
        raise Damaged("trailing data after the gzip stream", f"byte {self._fed}",
                      rest[:REJECT_PREFIX_BYTES])

    def _only_zeros(self, rest: bytes) -> bool:
        while rest:
            if rest.strip(b"\0"):
                return False
            rest = self._raw.read(READ_BYTES)
        return True

    def _truncated(self) -> Damaged:
        if self._fed == 0:
            return Damaged("not gzip data (the file is empty)", "byte 0")
        return Damaged(f"truncated gzip stream: the file ends at byte {self._fed} before the "
                       "end of its compressed data", f"byte {self._fed}")

    def _zlib_reason(self, exc: zlib.error) -> str:
        text = str(exc).removeprefix("Error -3 while decompressing data: ")
        if self._member_fed == 0 and "header" in text:
            return ("not gzip data (the file does not start with a gzip header)"
                    if self._fed == 0 else "trailing data after the gzip stream")
        return f"corrupt gzip data ({text})"

    def _raw_prefix(self) -> bytes:
        if self._fed > 0:
            return b""
        position = self._raw.tell()
        self._raw.seek(0)
        head = self._raw.read(REJECT_PREFIX_BYTES)
        self._raw.seek(position)
        return head

    def close(self) -> None:
        self._raw.close()


# --- lines -----------------------------------------------------------------------------


@dataclass(slots=True)
class _Reject:
    """A line the reader refused, standing for `lines` lines and `size` bytes."""

    letter: DeadLetter
    lines: int
    size: int
    damaged: bool = False


@dataclass(slots=True)
class _Lines:
    """Complete lines and the bytes each took (`sizes` None: each line + one `\\n`;
    then `block` may hold `b"\\n".join(lines)` as read)."""

    lines: list[bytes]
    sizes: list[int] | None
    block: bytes | None = None
    # Set (and `lines` empty) for a block not cut into lines: see RawChunk.ends.
    ends: Any = None


class LineSplitter:
    """Cuts blocks of bytes into lines (`\\n`, `\\r\\n`, `\\r`), strips byte order marks,
    and refuses lines longer than `max_bytes` while they stream by."""

    def __init__(self, source: str, max_bytes: int, first_line: int = 1,
                 uncut: bool = False) -> None:
        """With `uncut`, a block that needs no rewriting is handed out whole with the
        offsets of its newlines (`_Lines.ends`) rather than cut into lines."""
        self.source = source
        self.max_bytes = max_bytes
        self.uncut = uncut
        self.line = first_line  # number of the next line to complete
        self._carry = b""
        self._skipping = 0  # > 0: bytes seen so far of an oversized line being skipped
        self._skipped_head = b""
        self._skipped_bom = 0  # the skipped line's BOM (read, but not part of the line)
        self._skip_cr = False  # the oversized line ended at a \r that may precede a \n

    def feed(self, data: bytes) -> list[_Lines | _Reject]:
        out: list[_Lines | _Reject] = []
        if self._skipping:
            data = self._skip_rest(data, out)
            if self._skipping or not data:
                return out
        text = self._carry + data if self._carry else data
        self._carry = b""
        # A \r at the very end may be the first half of \r\n: decide with the next block.
        held_cr = text.endswith(b"\r")
        if held_cr:
            text = text[:-1]
        if b"\r" not in text and not has_bom(text):
            if self.uncut:
                cut = self._uncut(text)
                if cut is not None:
                    found, tail = cut
                    if found is not None:
                        out.append(found)
                    self._carry = tail + b"\r" if held_cr else tail
                    return out
            lines = text.split(b"\n")
            tail = lines.pop()
            if lines:
                if max(map(len, lines)) > self.max_bytes:
                    out.extend(self._with_rejects(lines, [len(x) + 1 for x in lines]))
                else:
                    out.append(_Lines(lines, None, text[:len(text) - len(tail) - 1]))
                    self.line += len(lines)
        else:
            parts = _TERMINATOR.split(text)
            tail = parts.pop()
            lines = parts[0::2]
            sizes = [len(a) + len(b) for a, b in zip(lines, parts[1::2], strict=True)]
            out.extend(self._with_rejects(lines, sizes))
        bom = len(BOM) if tail.startswith(BOM) else 0
        if len(tail) - bom > self.max_bytes:
            self._skipping = len(tail)
            self._skipped_head = tail[bom:bom + REJECT_PREFIX_BYTES]
            self._skipped_bom = bom
            self._skip_cr = held_cr
        else:
            self._carry = tail + b"\r" if held_cr else tail
        return out

    def _uncut(self, text: bytes) -> tuple[_Lines | None, bytes] | None:
        """The complete lines of `text` as one uncut block and the partial last line,
        or None when a line is too long (then the caller cuts it to reject that one)."""
        newlines = newline_offsets(text)
        if not len(newlines):
            return (None, text) if len(text) <= self.max_bytes else None
        last = int(newlines[-1])
        if len(text) - last - 1 > self.max_bytes:
            return None  # the partial last line outgrew: skipped from here, as when cut
        if last > self.max_bytes:
            from binloop.core.lean_numpy import np

            widths = np.diff(newlines, prepend=-1) - 1
            if int(widths.max()) > self.max_bytes:
                return None
        self.line += len(newlines)
        return _Lines([], None, text[:last], newlines[:-1]), text[last + 1:]

    def finish(self) -> tuple[list[_Lines | _Reject], bytes]:
        """At the end of the input: the last line if it had no terminator, and the raw
        bytes of such an unterminated line (for callers that drop a torn line)."""
        if self._skipping:
            return [self._oversized(1 if self._skip_cr else 0)], b""
        tail, self._carry = self._carry, b""
        if not tail:
            return [], b""
        if tail == BOM:  # a BOM and nothing after it is no line, but its bytes are read
            return [_Lines([], [len(BOM)])], b""
        if tail.endswith(b"\r"):
            return self._with_rejects([tail[:-1]], [len(tail)]), b""
        return self._with_rejects([tail], [len(tail)]), tail

    def resume_with(self, partial_line: bytes) -> None:
        """Start as a splitter that has been fed `partial_line`, the start of a line
        (a reader that seeks into a file: `binloop.replay.strided`)."""
        self._carry = partial_line

    def resume_skipping(self, seen: int, head: bytes, bom: int, held_cr: bool) -> None:
        """Start as a splitter skipping an oversized line of which `seen` bytes were fed:
        `head` its first bytes after a BOM of `bom` bytes, `held_cr` whether the last byte
        fed was a `\\r` after it."""
        self._skipping, self._skipped_head, self._skipped_bom = seen, head, bom
        self._skip_cr = held_cr

    def pending(self) -> bytes:
        """The partial line held (for a damage report)."""
        return self._skipped_head or self._carry

    def _skip_rest(self, data: bytes, out: list[_Lines | _Reject]) -> bytes:
        """Skip the rest of an oversized line; returns what follows it."""
        if self._skip_cr:
            self._skip_cr = False
            terminator = 2 if data.startswith(b"\n") else 1
            out.append(self._oversized(terminator))
            return data[terminator - 1:]
        # bytes.find (memchr) rather than a regex: this runs over every byte skipped.
        found = [at for at in (data.find(b"\n"), data.find(b"\r")) if at >= 0]
        at = min(found) if found else len(data)
        if len(self._skipped_head) < REJECT_PREFIX_BYTES:  # the letter's text: its first bytes
            self._skipped_head += data[:min(at, REJECT_PREFIX_BYTES - len(self._skipped_head))]
        self._skipping += at
        if not found:
            return b""
        if data[at] == 0x0D and at + 1 == len(data):
            self._skip_cr = True
            return b""
        end = at + (2 if data[at:at + 2] == b"\r\n" else 1)
        out.append(self._oversized(end - at))
        return data[end:]

    def _oversized(self, terminator: int) -> _Reject:
        size, head, bom = self._skipping, self._skipped_head, self._skipped_bom
        self._skipping, self._skipped_head, self._skipped_bom = 0, b"", 0
        self._skip_cr = False
        # (the same letter as for a line rejected whole in one block: `_with_rejects`)
        letter = DeadLetter(prefix_text(head, size - bom),
                            f"{READER_REJECT}{size - bom} bytes exceeds max_line_bytes "
                            f"({self.max_bytes})",
                            self.source, str(self.line))
        self.line += 1
        return _Reject(letter, 1, size + terminator)

    def _with_rejects(self, lines: list[bytes], sizes: list[int]) -> list[_Lines | _Reject]:
        """Lines with BOMs stripped; an oversized one becomes a reject."""
        out: list[_Lines | _Reject] = []
        kept: list[bytes] = []
        kept_sizes: list[int] = []
        for line, size in zip(lines, sizes, strict=True):
            body = line[3:] if line.startswith(BOM) else line
            if len(body) > self.max_bytes:
                if kept:
                    out.append(_Lines(kept, kept_sizes))
                    kept, kept_sizes = [], []
                letter = DeadLetter(prefix_text(body), f"{READER_REJECT}{len(body)} bytes "
                                    f"exceeds max_line_bytes ({self.max_bytes})", self.source,
                                    str(self.line))
                out.append(_Reject(letter, 1, size))
            else:
                kept.append(body)
                kept_sizes.append(size)
            self.line += 1
        if kept:
            out.append(_Lines(kept, kept_sizes))
        return out


class _LineCursor(_FileCursor):
    """Lines of a byte source, handed out in batches with their exact end offset."""

    def __init__(self, name: str, source: _Bytes, offset: int, line: int,
                 options: ReadOptions, drop_torn: bool, whole_blocks: bool = False,
                 block_bytes: int | None = None) -> None:
        self.name = name
        self._whole_blocks = whole_blocks
        self._block_bytes = block_bytes or READ_BYTES
        self.offset = offset
        self._source = source
        self._splitter = LineSplitter(name, options.max_line_bytes, line + 1, whole_blocks)
        self._queue: deque[_Lines | _Reject] = deque()
        self._ended = False
        self._drop_torn = drop_torn
        self._consumed = offset  # bytes of the source read so far, from its start
        self._spill = b""  # read beyond a block's end, for the next block
        self._damage: Damaged | None = None  # found while a block was being filled

    def read(self, n: int) -> Batch:
        batch = Batch()
        if self._whole_blocks:
            n = sys.maxsize
        while len(batch.items) < n:
            if not self._queue:
                # A pipe hands out what has come (`tail -F f | binloop ...` follows f).
                if self._ended or (batch.items and self._source.waiting()):
                    break
                self._fill()
                continue
            piece = self._queue[0]
            if isinstance(piece, _Reject):
                if batch.count:
                    break  # a reject opens the next batch: rejects come before items
                self._queue.popleft()
                batch.rejects.append(piece.letter)
                batch.rejected_lines += piece.lines
                batch.damaged += piece.damaged
                self.offset += piece.size
                continue
            if piece.ends is not None:  # an uncut block (whole_blocks): a chunk of its own
                if batch.count:
                    break
                self._queue.popleft()
                batch.block, batch.ends = piece.block, piece.ends
                self.offset += len(piece.block) + 1  # type: ignore[arg-type]
                break
            take = n - len(batch.items)
            lines = piece.lines
            if take >= len(lines):
                self._queue.popleft()
                batch.block = None if batch.items else piece.block
                batch.items.extend(lines)
                self.offset += (len(piece.block) + 1 if piece.block is not None
                                else sum(piece.sizes) if piece.sizes is not None
                                else sum(map(len, lines)) + len(lines))
                if self._whole_blocks:
                    break
            else:
                batch.items.extend(lines[:take])
                if piece.sizes is not None:
                    self.offset += sum(piece.sizes[:take])
                    piece.sizes = piece.sizes[take:]
                else:
                    self.offset += sum(map(len, lines[:take])) + take
                piece.lines, piece.block, batch.block = lines[take:], None, None
        return batch

    def _aligned_read(self) -> bytes:
        """The source's bytes up to the next multiple of the block size from its start (or
        its end): chunks then end at the same lines whatever offset a reader started or
        resumed at, which readers sharing an input (`InputReader.stride`) rely on."""
        if self._damage is not None:
            damage, self._damage = self._damage, None
            raise damage
        want = self._block_bytes - self._consumed % self._block_bytes
        parts: list[bytes] = []
        got = 0
        while got < want:
            try:
                data, self._spill = self._spill or self._source.read(want - got), b""
            except Damaged as damage:
                if not parts:
                    raise
                self._damage = damage  # the good bytes before it first
                break
            if not data:
                break
            if got + len(data) > want:
                data, self._spill = data[:want - got], data[want - got:]
            parts.append(data)
            got += len(data)
        self._consumed += got
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _fill(self) -> None:
        try:
            data = self._aligned_read() if self._whole_blocks else self._source.read()
        except Damaged as damage:
            self._ended = True
            raw = damage.raw or self._splitter.pending()
            letter = DeadLetter(prefix_text(raw), f"damaged file: {damage.reason}", self.name,
                                damage.position)
            self._queue.append(_Reject(letter, 0, 0, damaged=True))
            return
        if data:
            self._queue.extend(self._splitter.feed(data))
            return
        self._ended = True
        pieces, torn = self._splitter.finish()
        if torn and self._drop_torn and (self._source.grew() or not _complete_json(torn)):
            # A prefix of a JSON object is never a JSON object: this line is cut short.
            log.warning("%s: line %d (%d bytes) has no line end and is not complete yet: "
                        "left unread (a writer is still at it?)", self.name,
                        self._splitter.line - 1, len(torn))
            return
        self._queue.extend(pieces)

    def bytes_read(self) -> int:
        told = self._source.compressed_tell()
        return self.offset if told is None else told

    def close(self) -> None:
        self._source.close()


class _ParquetCursor(_FileCursor):
    """Rows of a Parquet file; an unreadable file or row group is one damage reject."""

    def __init__(self, name: str, offset: int) -> None:
        self.name = name
        self.offset = offset
        self._size = _size(name)
        self._damage: DeadLetter | None = None
        self._frame = self._load()

    def _load(self) -> pl.DataFrame:
        import polars as pl

        try:
            return pl.read_parquet(self.name)
        except Exception as exc:  # polars raises many kinds for bad files
            first_error = exc
        # Salvage the rows before the damage, a slice at a time.
        frames: list[pl.DataFrame] = []
        rows = 0
        try:
            scan = pl.scan_parquet(self.name)
            while True:
                part = scan.slice(rows, PARQUET_SALVAGE_ROWS).collect()
                if part.height == 0:
                    break
                frames.append(part)
                rows += part.height
        except Exception as exc:
            first_error = exc
        self._damage = DeadLetter("", f"damaged file: unreadable Parquet "
                                  f"({_one_line(first_error)})", self.name, f"row {rows}")
        return pl.concat(frames) if frames else pl.DataFrame()

    def read(self, n: int) -> Batch:
        rows = self._frame.slice(self.offset, n).to_dicts() if self._frame.width else []
        self.offset += len(rows)
        if rows or self._damage is None:
            return Batch([_parquet_row(row) for row in rows])
        batch = Batch(rejects=[self._damage], damaged=1)
        self._damage = None
        return batch

    def bytes_read(self) -> int:
        return self._size * self.offset // max(1, self._frame.height)


def _complete_json(line: bytes) -> bool:
    """Whether an unterminated last line is a whole JSON value (once per file)."""
    try:
        orjson.loads(line[3:] if line.startswith(BOM) else line)
    except orjson.JSONDecodeError:
        return False
    return True


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] or type(exc).__name__


def _parquet_row(row: dict[str, Any]) -> dict[str, Any]:
    """A Parquet row as a record: null columns dropped, `args` JSON text decoded."""
    record = {k: v for k, v in row.items() if v is not None}
    args = record.get("args")
    if isinstance(args, str):
        # Undecodable text stays text: validation then rejects it with the reason.
        with contextlib.suppress(orjson.JSONDecodeError):
            record["args"] = orjson.loads(args)
    return record


def open_cursor(name: str, offset: int = 0, line: int = 0,
                options: ReadOptions = DEFAULT_READ, whole_blocks: bool = False,
                block_bytes: int | None = None) -> _FileCursor:
    """A cursor over one input file from `offset` (bytes; decompressed bytes for .gz;
    rows for Parquet), `line` lines already read before it; whole blocks are cut at the
    multiples of `block_bytes` (default READ_BYTES)."""
    if name == STDIN:  # line batches: a whole block would wait for a block of input
        return _LineCursor(name, _StreamBytes(sys.stdin.buffer), offset, line, options,
                           drop_torn=False)
    kind = _kind(name)
    if kind == "parquet":
        return _ParquetCursor(name, offset)
    source: _Bytes = _GzipBytes(name, offset) if kind == "gz" else _PlainBytes(name, offset)
    return _LineCursor(name, source, offset, line, options, drop_torn=kind != "gz",
                       whole_blocks=whole_blocks, block_bytes=block_bytes)


@dataclass(frozen=True, slots=True)
class LineBlock:
    """A block of one file's lines for a bulk reader (the polars loader): `rejects` come
    before `lines`, which start at line `first_line`; `done_bytes` is how far the file
    has been read."""

    first_line: int
    lines: list[bytes]
    rejects: tuple[DeadLetter, ...]
    damaged: int
    done_bytes: int


def line_blocks(name: str, block_lines: int, options: ReadOptions = DEFAULT_READ,
                stream: Any = None, offset: int = 0, line: int = 0) -> Iterator[LineBlock]:
    """The lines of one JSONL(.gz) file or stdin (or of `stream`, named `name`),
    `block_lines` at a time, as the chunk reader splits and refuses them; a file from
    byte `offset`, where `line` lines lie before it."""
    cursor = (open_cursor(name, offset, line, options) if stream is None else
              _LineCursor(name, _StreamBytes(stream), 0, 0, options, drop_torn=False))
    try:
        while True:
            got = cursor.read(block_lines)
            if not got.items and not got.rejects:
                return
            lines = [item for item in got.items if isinstance(item, bytes)]
            yield LineBlock(line + got.rejected_lines + 1, lines, tuple(got.rejects),
                            got.damaged, cursor.bytes_read())
            line += got.rejected_lines + len(lines)
    finally:
        cursor.close()


def reader_chunks(reject_lines: list[int], batch_size: int) -> Callable[[int], int]:
    """An order key of the chunk that holds each line of a file, as :class:`InputReader`
    cuts chunks: `batch_size` lines at a time, except that a line the reader refused
    (`reject_lines`, ascending) opens a new chunk unless the chunk holds no kept line
    yet (rejects come before a chunk's items)."""
    starts, item_starts = [1], [1]
    for line in reject_lines:
        if line == item_starts[-1]:
            item_starts[-1] += 1  # one more reject at the front of this chunk
            continue
        following = item_starts[-1] + batch_size
        while following < line:
            starts.append(following)
            item_starts.append(following)
            following += batch_size
        starts.append(line)
        item_starts.append(line + 1)

    def chunk_of(line: int) -> int:
        index = bisect.bisect_right(starts, line) - 1
        later = max(0, line - item_starts[index]) // batch_size
        return (index << 40) + later

    return chunk_of
