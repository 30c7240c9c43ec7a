"""Validating a block of JSONL telemetry at C speed, agreeing exactly with the schema.

`binloop.core.schema` defines what a valid record is (orjson, then `_normalise`). This module
is a fast path for the common case and never decides anything itself: a block of lines
is decoded in one call by a typed msgspec decoder (`decode_lines`) that is *stricter*
than the schema, and a line it cannot vouch for is handed to the schema's own parser.
Stricter means: every line this decoder accepts is valid under the schema and its
fields need no normalising (lower-case outcome, a failure mode already in canonical
form, a lower-case hex id, strings within their bounds). Everything else (an upper-case
outcome, a long error text, an unknown key, a bad line) takes the schema's path, line by
line, for the block that holds it.

Per record the fast path keeps only what detection needs before a key is known to be
armed: tool, failure mode, outcome and ts, and the raw line. The full record (args
decoded, `id` computed when absent) is made by the schema's parser from that line, only
for a record that counts (see `Candidate`).

Why each block check exists (msgspec and orjson disagree there):
- `decode_lines` reads whitespace-separated JSON values, not lines: the block must be
  one object per line (every line starts with `{` and ends with `}`, and the value count
  is the line count; a raw newline cannot occur inside a JSON string, so no value can
  span two lines).
- msgspec skips `args` and unknown keys (syntax only) without checking UTF-8: the block
  must be valid UTF-8. (That their numbers may exceed a double is fine: the schema
  decides validity without decoding `args` either.)
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter
from typing import Annotated, Any, Final, Literal

import msgspec
import orjson

from binloop.core.classify import GIVEN, INFER
from binloop.core.lean_numpy import np
from binloop.core.schema import (
    FAILURE_MODE_MAX_CHARS,
    ID_DIGITS,
    LINE_MAX_BYTES,
    STRING_FIELD_MAX_CHARS,
    TOOL_MAX_CHARS,
    DeadLetter,
    InvalidRecord,
    RecordLimits,
    RecordParser,
    _check_failure_mode,
    _future_bound,
    raw_text,
    ts_floor,
)

# numpy is imported with this module, not at the first block: a local cluster forks its
# peers once the flow's modules are imported, and start-up's objects are frozen out of
# the collector's sight then (binloop.ops.memory_tuning); imported at the first block,
# it would be imported again in every process, and never frozen.
_I64_MAX: Final = 2**63 - 1
_Name = Annotated[str, msgspec.Meta(min_length=1, max_length=TOOL_MAX_CHARS)]
_Text = Annotated[str, msgspec.Meta(max_length=STRING_FIELD_MAX_CHARS)]
_Count = Annotated[int, msgspec.Meta(ge=0, le=_I64_MAX)]
_SessionInt = Annotated[int, msgspec.Meta(ge=-(2**63), le=_I64_MAX)]
_Id = Annotated[str, msgspec.Meta(min_length=64, max_length=64)]
_Mode = Annotated[str, msgspec.Meta(min_length=1, max_length=FAILURE_MODE_MAX_CHARS)]


class _Object(msgspec.Struct, gc=False):
    """Any JSON object, its content skipped (checked for syntax only)."""


class _Record(msgspec.Struct, gc=False):
    """A record the schema takes as it is (no normalising needed), or a decode error.

    Decoded as `_ts_bounded` makes it: with the ts bounds of the parser's settings."""

    session_id: _SessionInt | _Name
    ts: _Count
    tool: _Name
    outcome: Literal["success", "failure", "timeout", "cancelled"]
    args: _Object | None = None
    failure_mode: _Mode | None = None
    duration_ms: _Count | None = None
    agent_id: _Text | None = None
    error: _Text | None = None
    error_template: _Text | None = None
    id: _Id | None = None


# How much of a block one decoder call takes: the decoded records and their strings then
# stay in a core's L2 cache while they are checked and counted (docs/benchmarks.md).
PIECE_BYTES: Final = 256 << 10
# How long a decoder's future-skew bound is used (it is the bound when it was made, so
# it only gets stricter than the schema's as time passes).
DECODER_REFRESH_S: Final = 1.0
_DECODE_ERRORS: Final = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)
_TS = attrgetter("ts")
_MODE = attrgetter("failure_mode")
_IDS = attrgetter("id")
_ERROR = attrgetter("error")
_ID_DIGITS: Final = ID_DIGITS.encode()


# A valid record that counts (outcome in the count set, with a failure mode), before its
# full form is needed (`full_record`; the detector asks for it only for an armed key):
# (raw line, or the full record when the schema's parser made it; tool, failure mode,
# ts, session id). A tuple: a chunk holds hundreds of
# thousands, and a tuple is made in a fraction of a dataclass's time.
Candidate = tuple[Any, str, str, int, "int | str"]


@dataclass(slots=True)
class BlockResult:
    """What detection needs of a chunk: its counted records in arrival order, its
    rejects, how many records were valid, and the newest valid ts (None if none)."""

    counted: list[Candidate] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    valid: int = 0
    blank: int = 0
    max_ts: int | None = None
    ts_converted: int = 0  # records whose ts was taken as seconds (`ts_unit`)


class BlockParser:
    """Parses chunks of raw lines; one per stream (it caches failure modes)."""

    def __init__(self, count_outcomes: frozenset[str], limits: RecordLimits) -> None:
        self.count_outcomes = count_outcomes
        self.limits = limits
        # Failure modes that the schema keeps exactly as written (taxonomy per limits).
        self._normal_modes: set[str] = set()
        self._modes_max = 4096
        self.blocks_fast = 0
        self.blocks_by_line = 0
        # What the schema's parser does beyond validating (a block holding such a record
        # is not taken as it is): a ts below the floor is in seconds, and a record with
        # an outcome in `_infer` (and no failure mode, or any with `_override`) gets the
        # failure mode inferred from its error text.
        self._floor = ts_floor(limits.ts_unit)
        self._infer = limits.infer_outcomes if limits.failure_modes != GIVEN else frozenset()
        self._override = limits.failure_modes == INFER
        self._decoder = _ts_bounded(self._floor, limits.max_future_skew_ms)
        self._decoder_until = time.monotonic() + DECODER_REFRESH_S

    def _record_decoder(self) -> msgspec.json.Decoder[_Record]:
        """The decoder, remade when its future-skew bound is older than DECODER_REFRESH_S."""
        now = time.monotonic()
        if now >= self._decoder_until:
            self._decoder = _ts_bounded(self._floor, self.limits.max_future_skew_ms)
            self._decoder_until = now + DECODER_REFRESH_S
        return self._decoder

    def parse(self, items: Sequence[bytes | dict[str, Any]], source: str,
              first_line: int, block: bytes | None = None, ends: Any = None) -> BlockResult:
        """The chunk's records: one decoder call for a clean block of lines, else line
        by line (decoder, then the schema for what the decoder refuses). `block`, when
        given, is `b"\n".join(items)`; with `ends` (the offsets of its newlines) the
        block is not cut into `items` yet, and only a block that needs the line-by-line
        path is cut."""
        out = BlockResult()
        if ends is not None and block is not None:
            if self._fast_uncut(block, ends, out):
                self.blocks_fast += 1
                return out
            out = BlockResult()
            items = block.split(b"\n")
            if b"" not in items:
                # `_fast_block` would check the same lines the same way and refuse them
                # too; with a blank line it takes the others as a block.
                return self._line_by_line(items, source, first_line)
        if items and type(items[0]) is bytes and \
                self._fast_block(items, out, block):  # type: ignore[arg-type]
            self.blocks_fast += 1
            return out
        return self._line_by_line(items, source, first_line)

    def _line_by_line(self, items: Sequence[bytes | dict[str, Any]], source: str,
                      first_line: int) -> BlockResult:
        self.blocks_by_line += 1
        out = BlockResult()
        self._by_line(items, source, first_line, out)
        return out

    # -- one call per block ------------------------------------------------------------

    def _fast_block(self, items: Sequence[bytes], out: BlockResult,
                    block: bytes | None) -> bool:
        lines = items
        blank = items.count(b"")
        if blank:
            lines = [line for line in items if line]
        if not lines:
            out.blank = blank
            return True
        if block is None or blank:
            block = b"\n".join(lines)
        if not (block[:1] == b"{" and block[-1:] == b"}"
                and block.count(b"}\n{") == len(lines) - 1
                and _lines_within_limit(block, lines)
                and _is_utf8(block)):
            return False
        decoded = self._decoded(block, len(lines))
        if decoded is None:
            return False
        records, max_ts, modes = decoded
        if self._infer and self._any_inferred(records):
            return self._fast_with_inference(lines, records, out, blank, max_ts)
        counts = self.count_outcomes
        out.valid, out.blank, out.max_ts = len(records), blank, max_ts
        out.counted = [(lines[i], rec.tool, rec.failure_mode, rec.ts, rec.session_id)  # type: ignore[misc]
                       for i in compress(range(len(records)), modes)
                       if (rec := records[i]).outcome in counts]
        return True

    def _fast_uncut(self, block: bytes, ends: Any, out: BlockResult) -> bool:
        """`_fast_block` for a block not cut into lines: the line checks are made on
        the newline offsets, and only the counted records' lines are sliced out."""
        view = np.frombuffer(block, np.uint8)
        if not (block[:1] == b"{" and block[-1:] == b"}"
                and (not len(ends) or (bool((view[ends - 1] == 0x7D).all())
                                       and bool((view[ends + 1] == 0x7B).all())))
                and (len(block) <= LINE_MAX_BYTES
                     or int((np.diff(ends, prepend=-1, append=len(block)) - 1).max())
                     <= LINE_MAX_BYTES)
                and _is_utf8(block)):
            return False
        cuts = [-1, *ends.tolist(), len(block)]
        for first, end in _pieces(ends, len(cuts) - 1, len(block)):
            if not self._fast_piece(block, cuts, first, end, out):
                return False
        return True

    def _fast_piece(self, block: bytes, cuts: list[int], first: int, end: int,
                    out: BlockResult) -> bool:
        """Lines `first`..`end`-1 of an uncut block (`cuts`: the offsets before its lines
        and its length) decoded in one call; their counted records and counts added to
        `out`."""
        piece = block[cuts[first] + 1:cuts[end]]
        decoded = self._decoded(piece, end - first)
        if decoded is None:
            return False
        records, max_ts, modes = decoded
        if self._infer and self._any_inferred(records):
            part = BlockResult()
            if not self._fast_with_inference(piece.split(b"\n"), records, part, 0, max_ts):
                return False
            counted = part.counted
        else:
            counts = self.count_outcomes
            counted = [(block[cuts[first + i] + 1:cuts[first + i + 1]], rec.tool,  # type: ignore[misc]
                        rec.failure_mode, rec.ts, rec.session_id)
                       for i in compress(range(len(records)), modes)
                       if (rec := records[i]).outcome in counts]
        out.counted.extend(counted)
        out.valid += len(records)
        out.max_ts = max_ts if out.max_ts is None else max(out.max_ts, max_ts)
        return True

    def _decoded(self, block: bytes,
                 lines: int) -> tuple[list[_Record], int, list[str | None]] | None:
        """The block's records, newest ts and failure modes, when it decodes into `lines`
        records that the schema takes as they are (else None: the block goes line by line)."""
        try:
            records: list[_Record] = self._record_decoder().decode_lines(block)
        except _DECODE_ERRORS:
            return None
        if len(records) != lines:
            return None
        checked = self._as_decoded(records)
        return None if checked is None else (records, *checked)

    def _as_decoded(self, records: list[_Record]) -> tuple[int, list[str | None]] | None:
        """(newest ts, failure modes) when the schema takes every decoded record as it
        is (failure modes canonical, ids lower-case hex; the decoder checked ts bounds),
        else None."""
        modes = list(map(_MODE, records))  # failure modes are non-empty: None is the only false
        if not self._modes_normal(set(modes)) or not _ids_lower_hex(records):
            return None
        return max(map(_TS, records)), modes

    def _any_inferred(self, records: list[_Record]) -> bool:
        """Whether the schema's parser would infer a failure mode in any record (only a
        record with error text can get one: the others are not looked at one by one)."""
        return any(map(self._inferred, compress(records, map(_ERROR, records))))

    def _inferred(self, rec: _Record) -> bool:
        """Whether the schema's parser infers this record's failure mode (it leaves a
        record without error text as it is: there is nothing to infer from)."""
        error = rec.error
        return (rec.outcome in self._infer and (self._override or rec.failure_mode is None)
                and error is not None and error.strip() != "")

    def _fast_with_inference(self, lines: Sequence[bytes], records: list[_Record],
                             out: BlockResult, blank: int, max_ts: int) -> bool:
        """A valid block where some records get an inferred failure mode: those are
        made by the schema's parser (which infers it), the rest taken as decoded."""
        parser = RecordParser(self.limits)
        counts = self.count_outcomes
        counted: list[Candidate] = []
        for line, rec in zip(lines, records, strict=True):
            if self._inferred(rec):
                try:
                    full = parser.parse(line)
                except InvalidRecord:  # never for a line the decoder took; to be safe
                    return False
                if full["failure_mode"] is not None and full["outcome"] in counts:
                    counted.append((full, full["tool"], full["failure_mode"], full["ts"],
                                    full["session_id"]))
            elif rec.failure_mode is not None and rec.outcome in counts:
                counted.append((line, rec.tool, rec.failure_mode, rec.ts, rec.session_id))
        out.valid, out.blank, out.max_ts, out.counted = len(records), blank, max_ts, counted
        return True

    def _modes_normal(self, modes: set[str | None]) -> bool:
        modes.discard(None)
        unknown: set[str] = modes - self._normal_modes  # type: ignore[assignment]
        for mode in unknown:
            try:
                if _check_failure_mode(mode, self.limits.taxonomy) != mode:
                    return False
            except InvalidRecord:
                return False
            if len(self._normal_modes) >= self._modes_max:
                self._normal_modes.clear()
            self._normal_modes.add(mode)
        return True

    # -- line by line ------------------------------------------------------------------

    def _by_line(self, items: Sequence[bytes | dict[str, Any]], source: str,
                 first_line: int, out: BlockResult) -> None:
        parser = RecordParser(self.limits)
        decoder = self._record_decoder()
        counts = self.count_outcomes
        max_ts = -1
        for index, item in enumerate(items):
            if not item:
                out.blank += 1
                continue
            cand: Candidate | None
            try:
                fast = self._fast_line(item, decoder) if type(item) is bytes else None
                if fast is not None:
                    ts, counted = fast.ts, fast.failure_mode is not None and \
                        fast.outcome in counts
                    cand = (item, fast.tool, fast.failure_mode, ts,  # type: ignore[assignment]
                            fast.session_id) if counted else None
                else:
                    rec = parser.parse(item) if isinstance(item, bytes) else \
                        parser.validate(item)
                    ts = rec["ts"]
                    mode = rec["failure_mode"]
                    cand = (rec, rec["tool"], mode, ts, rec["session_id"]) \
                        if mode is not None and rec["outcome"] in counts else None
            except InvalidRecord as exc:
                raw = raw_text(item) if isinstance(item, bytes) else \
                    raw_text(orjson.dumps(item))
                out.dead.append(DeadLetter(raw, str(exc), source, str(first_line + index)))
                continue
            out.valid += 1
            max_ts = max(max_ts, ts)
            if cand is not None:
                out.counted.append(cand)
        out.max_ts = max_ts if out.valid else None
        out.ts_converted = parser.ts_converted

    def _fast_line(self, line: bytes, decoder: msgspec.json.Decoder[_Record]) -> _Record | None:
        """The decoded line when the schema would take it as it is, else None."""
        if len(line) > LINE_MAX_BYTES or line[:1] != b"{" or not _is_utf8(line):
            return None
        try:
            rec = decoder.decode(line)
        except _DECODE_ERRORS:
            return None
        mode = rec.failure_mode
        if ((self._infer and self._inferred(rec))
                or (mode is not None and mode not in self._normal_modes
                    and not self._modes_normal({mode}))
                or (rec.id is not None and not _lower_hex(rec.id))):
            return None
        return rec


def _pieces(ends: Any, lines: int, size: int) -> list[tuple[int, int]]:
    """(first line, end line) ranges of about PIECE_BYTES that cover an uncut block of
    `size` bytes and `lines` lines, whose newlines are at offsets `ends`."""
    count = round(size / PIECE_BYTES)
    if count <= 1:
        return [(0, lines)]
    # line k holds offset x when k newlines come before x: a piece ends before that line
    cut_at = np.searchsorted(ends, np.arange(1, count) * (size // count)).tolist()
    starts = [0, *dict.fromkeys(k for k in cut_at if 0 < k < lines)]
    return list(zip(starts, [*starts[1:], lines], strict=True))


def _lines_within_limit(block: bytes, lines: Sequence[bytes]) -> bool:
    """No line is longer than LINE_MAX_BYTES (the lines before the last fit in one such
    span when blocks are read at most that big: then only the last needs looking at)."""
    if len(block) - len(lines[-1]) <= LINE_MAX_BYTES:
        return len(lines[-1]) <= LINE_MAX_BYTES
    return max(map(len, lines)) <= LINE_MAX_BYTES


def _is_utf8(block: bytes) -> bool:
    if block.isascii():
        return True
    try:
        block.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _ids_lower_hex(records: list[_Record]) -> bool:
    """Whether every id is lower-case hex (the schema lower-cases one). One pass over the
    joined ids: msgspec's `pattern` would call a regex per record, which costs more."""
    return _lower_hex("".join(filter(None, map(_IDS, records))))


def _lower_hex(text: str) -> bool:
    """Whether `text` holds only the digits of a lower-case hex id: one C pass (a third
    of `str.strip(ID_DIGITS)`'s time on a 64-digit id)."""
    return text.isascii() and not text.encode().translate(None, _ID_DIGITS)


def _ts_bounded(floor: float, max_future_skew_ms: int | None) -> msgspec.json.Decoder[_Record]:
    """A decoder of `_Record`s that refuses a ts the schema would not take as it is: below
    `floor` (seconds, converted) or beyond the future-skew bound as of now."""
    future = _future_bound(max_future_skew_ms)
    if math.isinf(floor):  # every ts is in seconds: none is taken as it is
        low, high = 1, 0
    else:  # (bounds within int64: msgspec's limit; an empty range when the bound is < 0)
        low = max(0, math.ceil(floor))
        high = _I64_MAX if math.isinf(future) else max(-1, min(_I64_MAX, math.floor(future)))
    stamp = Annotated[int, msgspec.Meta(ge=low, le=high)]
    bounded = msgspec.defstruct("_Record", [("ts", stamp)], bases=(_Record,), gc=False)
    return msgspec.json.Decoder(bounded)


def full_record(cand: Candidate, parser: RecordParser) -> Any:
    """The record as the schema gives it (args decoded, `id` computed when absent)."""
    item = cand[0]
    return parser.parse_counted(item) if isinstance(item, bytes) else item
