"""The block decoder (`binloop.core.block_parse`) gives the schema's verdicts exactly.

On generated lines (clean records in several writers' styles, odd and invalid fields,
raw junk) and on damaged ones (cut, a byte flipped or inserted, lines glued or split,
numbers beyond the double range inside `args`), a chunk parsed by the block decoder has
the same counted records (the schema's full records, in order), dead letters (reason,
position), valid and blank counts and newest ts as the schema applied line by line.
"""

from __future__ import annotations

import time
from typing import Any
from unittest import mock

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from binloop.core import block_parse
from binloop.core.block_parse import BlockParser, full_record
from binloop.core.schema import RecordLimits, RecordParser, parse_record
from binloop.replay.ingest import parse_chunk
from binloop.replay.readers import RawChunk
from tests.strategies import FIELD_VALUES, RAW_LINES, odd_lines, telemetry_lines

COUNTS = frozenset({"failure", "timeout"})
LIMITS = (RecordLimits(), RecordLimits(args_max_bytes=10, max_future_skew_ms=None),
          RecordLimits(taxonomy=frozenset({"ARGS", "TIMEOUT"})),
          RecordLimits(ts_unit="auto", failure_modes="given-else-infer"),
          RecordLimits(ts_unit="s", failure_modes="infer"))
EXAMPLES = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def spec_view(items: list[Any], counts: frozenset[str], limits: RecordLimits) -> Any:
    """The schema, line by line (what the reference engine does)."""
    parsed = parse_chunk(RawChunk("p", 0, "src", 7, items), limits)
    counted = [r for r in parsed.records if r["outcome"] in counts and r["failure_mode"]]
    max_ts = max((r["ts"] for r in parsed.records), default=None)
    return counted, parsed.dead, len(parsed.records), parsed.blank, max_ts


def block_view(items: list[Any], counts: frozenset[str], limits: RecordLimits) -> Any:
    got = BlockParser(counts, limits).parse(items, "src", 7)
    if items and all(type(i) is bytes and b"\n" not in i for i in items):
        # The same lines as one block not cut into lines (how the file reader hands them).
        block = b"\n".join(items)
        ends = np.flatnonzero(np.frombuffer(block, np.uint8) == 0x0A)
        # decoded in pieces of about PIECE_BYTES: one piece, pieces of one line, and between
        for piece_bytes in (block_parse.PIECE_BYTES, 1, 150):
            with mock.patch.object(block_parse, "PIECE_BYTES", piece_bytes):
                assert BlockParser(counts, limits).parse([], "src", 7, block, ends) == got
    parser = RecordParser(limits)
    counted = [full_record(cand, parser) for cand in got.counted]
    for cand, rec in zip(got.counted, counted, strict=True):  # the cheap fields agree too
        assert cand[1:] == (rec["tool"], rec["failure_mode"], rec["ts"], rec["session_id"])
    return counted, got.dead, got.valid, got.blank, got.max_ts


@st.composite
def damaged(draw: st.DrawFn, lines: list[bytes]) -> list[bytes]:
    """The lines, some of them cut, with a byte flipped or inserted, glued or split."""
    out = list(lines)
    for _ in range(draw(st.integers(0, 3))):
        if not out:
            break
        at = draw(st.integers(0, len(out) - 1))
        line = out[at]
        how = draw(st.sampled_from(("cut", "flip", "insert", "glue", "split", "space")))
        pos = draw(st.integers(0, max(0, len(line))))
        if how == "cut":
            out[at] = line[:pos]
        elif how == "flip" and line:
            pos = min(pos, len(line) - 1)
            out[at] = line[:pos] + bytes([line[pos] ^ draw(st.integers(1, 255))]) + \
                line[pos + 1:]
        elif how == "insert":
            out[at] = line[:pos] + draw(st.sampled_from(
                (b"\r", b" ", b"\xff", b"}", b"{", b"\x00", b"\xc3\xa9", b"\\"))) + line[pos:]
        elif how == "glue" and at + 1 < len(out):
            out[at:at + 2] = [line + draw(st.sampled_from((b" ", b"", b"\r"))) + out[at + 1]]
        elif how == "split":
            out[at:at + 1] = [line[:pos], line[pos:]]
        elif how == "space":
            out[at] = b" " + line
    return out


@EXAMPLES
@given(st.data(), st.sampled_from(LIMITS), st.sampled_from(
    [COUNTS, frozenset({"failure"}), frozenset({"success", "cancelled"})]))
def test_block_decoder_agrees_with_the_schema(data: st.DataObject, limits: RecordLimits,
                                               counts: frozenset[str]) -> None:
    lines = data.draw(st.one_of(odd_lines(), telemetry_lines(max_lag=50, max_size=40)))
    lines = data.draw(damaged(lines))
    assert block_view(lines, counts, limits) == spec_view(lines, counts, limits)


@st.composite
def nearly_clean(draw: st.DrawFn) -> list[bytes]:
    """Lines the fast path takes, with one or two odd, damaged, glued or split among them:
    what the block checks are there to catch."""
    clean = [line for line in draw(telemetry_lines(max_lag=50, max_size=30))
             if _valid_as_is(line)]
    odd = [draw(one_field_changed(clean)) for _ in range(draw(st.integers(0, 2)))]
    for line in odd:
        clean.insert(draw(st.integers(0, len(clean))), line)
    return draw(damaged(clean)) if draw(st.booleans()) or not odd else clean


@st.composite
def one_field_changed(draw: st.DrawFn, clean: list[bytes]) -> bytes:
    """A clean record with one field set to an odd, normalised or invalid value, or
    dropped, or a raw junk line."""
    if not clean or draw(st.integers(0, 5)) == 0:
        return draw(st.sampled_from(RAW_LINES))
    body = orjson.loads(draw(st.sampled_from(clean)))
    name = draw(st.sampled_from(sorted(FIELD_VALUES)))
    if draw(st.integers(0, 7)) == 0:
        body.pop(name, None)
    else:
        body[name] = draw(st.sampled_from(FIELD_VALUES[name]))
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:  # an int beyond 64 bits
        import json

        return json.dumps(body, separators=(",", ":")).encode()


@EXAMPLES
@given(nearly_clean(), st.sampled_from(LIMITS))
def test_one_odd_line_in_a_clean_block(lines: list[bytes], limits: RecordLimits) -> None:
    assert block_view(lines, COUNTS, limits) == spec_view(lines, COUNTS, limits)


@EXAMPLES
@given(telemetry_lines(max_lag=50, max_size=60))
def test_clean_blocks_take_the_fast_path_and_agree(lines: list[bytes]) -> None:
    clean = [line for line in lines if _valid_as_is(line)]
    parser = BlockParser(COUNTS, RecordLimits())
    got = parser.parse(clean, "src", 1)
    assert parser.blocks_fast == 1 or not clean
    assert block_view(clean, COUNTS, RecordLimits()) == spec_view(clean, COUNTS, RecordLimits())
    assert got.valid == len(clean)


def _valid_as_is(line: bytes) -> bool:
    """A line the schema takes without normalising (what the fast path is for)."""
    try:
        rec = parse_record(line)
    except Exception:
        return False
    return bool(line.startswith(b"{") and orjson.loads(line) == rec)


@pytest.mark.parametrize("args", [b'{"x":1e400}', b'{"x":-1.8e308}', b'{"n":1' + b"0" * 400 + b"}",
                                  b'{"x":[1e999,2]}'])
def test_numbers_beyond_a_double_in_args_do_not_invalidate_a_record(args: bytes) -> None:
    line = (b'{"session_id":1,"ts":5,"tool":"t","outcome":"failure","failure_mode":"ARGS",'
            b'"args":' + args + b"}")
    rec = parse_record(line)
    assert rec["args"]["_truncated"] is True and rec["tool"] == "t"
    counted, dead, valid, _, _ = block_view([line, line], COUNTS, RecordLimits())
    assert (counted, dead, valid) == ([rec, rec], [], 2)


@pytest.mark.parametrize("line", [
    b'{"session_id":1,"ts":1e400,"tool":"t","outcome":"failure","args":{"x":1e400}}',
    b'{"session_id":1,"ts":5,"tool":"t","outcome":"failure","args":{"x":"\xff"}}',
    b'{"session_id":1,"ts":5,"tool":"t","outcome":"failure","args":{"x":1e400}} x',
    b'{"session_id":1' + b"0" * 400 + b',"ts":5,"tool":"t","outcome":"failure","args":{"x":1e400}}',
])
def test_a_line_bad_outside_args_stays_invalid(line: bytes) -> None:
    counted, dead, valid, _, _ = block_view([line], COUNTS, RecordLimits())
    assert (counted, valid, [d.reason[:8] for d in dead]) == ([], 0, ["not JSON"])
    assert spec_view([line], COUNTS, RecordLimits())[1] == dead


CLEAN = [orjson.dumps({"args": {"n": n}, "failure_mode": mode, "id": f"{n:064x}",
                       "outcome": outcome, "session_id": session, "tool": "book",
                       "ts": 1_000_000 + n}, option=orjson.OPT_SORT_KEYS)
         for n, (mode, outcome, session) in enumerate([
             (None, "success", 1), ("ARGS.date", "failure", "s-1"), ("TIMEOUT", "timeout", 2),
             ("ARGS.date", "failure", 1)])]


@pytest.mark.parametrize(("name", "value"), [
    (name, value) for name, values in FIELD_VALUES.items() for value in values] + [
    (name, None) for name in FIELD_VALUES])
@pytest.mark.parametrize("limits", LIMITS[:2])
def test_each_odd_field_value_in_an_otherwise_clean_block(name: str, value: Any,
                                                          limits: RecordLimits) -> None:
    """Exhaustively: one record of a clean block with one field changed (or, for None,
    removed), each time both as a counted and as an uncounted record."""
    for target in (1, 0):
        body = orjson.loads(CLEAN[target])
        if value is None:
            body.pop(name, None)
        else:
            body[name] = value
        try:
            odd = orjson.dumps(body)
        except orjson.JSONEncodeError:
            import json

            odd = json.dumps(body, separators=(",", ":")).encode()
        lines = [*CLEAN[:target], odd, *CLEAN[target + 1:]]
        assert block_view(lines, COUNTS, limits) == spec_view(lines, COUNTS, limits)
    parser = BlockParser(COUNTS, limits)
    parser.parse(CLEAN, "src", 1)
    assert parser.blocks_fast == 1  # the clean block itself takes the fast path


def test_a_record_split_over_two_lines_beside_two_records_on_one_line() -> None:
    """Three lines that `decode_lines` reads as three values: none of them is a record."""
    first, second, third = CLEAN[1], CLEAN[2], CLEAN[3]
    cut = first.index(b",") + 1
    lines = [first[:cut], first[cut:], second + b" " + third]
    assert block_view(lines, COUNTS, RecordLimits()) == spec_view(lines, COUNTS, RecordLimits())
    assert block_view(lines, COUNTS, RecordLimits())[2] == 0


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from([b"{}", b"", b"a\r", b"\r", b"xy", b"z\r\r", b"\xff"]),
                max_size=30), st.booleans(), st.integers(1, 12))
def test_block_reads_give_the_lines_of_line_reads(parts: list[bytes], newline_at_end: bool,
                                                  block_bytes: int) -> None:
    """A file read in blocks: the same lines (and positions) as read line by line, and
    the block handed over is exactly those lines joined."""
    import tempfile
    from unittest import mock

    from binloop.replay import readers
    from binloop.replay.readers import InputReader

    data = b"\n".join(parts) + (b"\n" if newline_at_end and parts else b"")
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as handle:
        handle.write(data)
        handle.flush()
        by_line = [c.items for c in InputReader(handle.name, 4)]
        with mock.patch.object(readers, "READ_BYTES", block_bytes):  # blocks this small
            chunks = list(InputReader(handle.name, 4, whole_blocks=True))
    assert [i for c in chunks for i in c.lines()] == [i for items in by_line for i in items]
    for chunk in chunks:
        assert chunk.count == len(chunk.lines())
        assert chunk.block is None or chunk.block == b"\n".join(chunk.lines())  # type: ignore
        assert chunk.ends is None or not chunk.items  # an uncut block carries no items
    assert [c.first_line for c in chunks] == [
        1 + sum(c.count for c in chunks[:n]) for n in range(len(chunks))]
    for chunk in chunks:
        assert BlockParser(COUNTS, RecordLimits()).parse(chunk.items, "s", 1, chunk.block,
                                                         chunk.ends) == \
            BlockParser(COUNTS, RecordLimits()).parse(chunk.lines(), "s", 1)


def _line(**fields: Any) -> bytes:
    base = {"session_id": 1, "ts": 1_700_000_000_000, "tool": "grep", "args": {},
            "outcome": "failure"}
    return orjson.dumps({**base, **fields})


@pytest.mark.parametrize("limits", [RecordLimits(ts_unit="auto"), RecordLimits(ts_unit="s"),
                                    RecordLimits(ts_unit="ms")])
def test_seconds_in_a_clean_block_are_converted_as_the_schema_does(limits: RecordLimits) -> None:
    """A block whose smallest ts is below the seconds floor is not taken as decoded."""
    lines = [_line(failure_mode="PERM"), _line(ts=1_700_000_000, failure_mode="PERM"),
             _line(ts=1_700_000_001_000, failure_mode="NOTFOUND")]
    assert block_view(lines, COUNTS, limits) == spec_view(lines, COUNTS, limits)
    got = BlockParser(COUNTS, limits).parse(lines, "src", 7)
    spec = parse_chunk(RawChunk("p", 0, "src", 7, lines), limits)
    assert got.ts_converted == spec.ts_converted == {"ms": 0, "auto": 1, "s": 1}[limits.ts_unit]


@pytest.mark.parametrize("failure_modes", ["given", "given-else-infer", "infer"])
def test_inferred_failure_modes_in_a_clean_block_are_the_schemas(failure_modes: str) -> None:
    """Records whose failure mode the schema infers from the error text: the same mode
    and `error_template` as `RecordParser` gives, and the same records counted."""
    limits = RecordLimits(failure_modes=failure_modes)
    lines = [_line(error="permission denied: /etc/shadow"),
             _line(failure_mode="NOTFOUND", error="connection refused by 10.0.0.1:443"),
             _line(outcome="success"), _line(outcome="timeout", error="timed out after 30s"),
             _line(failure_mode="ARGS", error_template="x"), _line(), _line(error=" "),
             _line(failure_mode="PERM", error="")]
    counted, *rest = block_view(lines, COUNTS, limits)
    assert (counted, *rest) == spec_view(lines, COUNTS, limits)
    inferred = [r for r in counted if "error_template" in r and r.get("error")]
    assert (len(inferred) > 0) == (failure_modes != "given")
    if failure_modes == "given":
        assert [r["failure_mode"] for r in counted] == ["NOTFOUND", "ARGS", "PERM"]


def test_a_non_string_error_template_is_refused_as_the_schema_does() -> None:
    lines = [_line(failure_mode="PERM"), _line(failure_mode="PERM", error_template=3)]
    view = block_view(lines, COUNTS, RecordLimits())
    assert view == spec_view(lines, COUNTS, RecordLimits())
    assert view[2] == 1 and "error_template" in view[1][0].reason


@pytest.mark.parametrize("failure_modes", ["given", "given-else-infer"])
def test_keys_written_with_escapes_are_not_missed(failure_modes: str) -> None:
    """`"\\u0069d"` is the key `id` and `"\\u0065rror"` the key `error`: a block check
    that looks for a key's plain spelling must not skip the records that spell it so."""
    limits = RecordLimits(failure_modes=failure_modes)
    clean = [_line(failure_mode="PERM") for _ in range(3)]
    upper_id = _line(failure_mode="PERM").replace(b'{', b'{"\\u0069d": "' + b"AB" * 32 + b'", ', 1)
    error = _line(failure_mode=None).replace(b'{', b'{"\\u0065rror": "permission denied", ', 1)
    for odd in (upper_id, error):
        lines = [*clean, odd]
        assert block_view(lines, COUNTS, limits) == spec_view(lines, COUNTS, limits)


def test_the_decoders_future_bound_follows_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decoder refuses a ts beyond the future-skew bound as of when it was made (the
    schema then decides); once remade, a record the clock has caught up with decodes in
    the one call again."""
    monkeypatch.setattr(block_parse, "DECODER_REFRESH_S", 0.05)
    parser = BlockParser(COUNTS, RecordLimits(max_future_skew_ms=1000))
    line = orjson.dumps({"session_id": "s", "ts": int(time.time() * 1000) + 1400,
                         "tool": "t", "outcome": "failure", "failure_mode": "TIMEOUT"})
    early = parser.parse([line, line], "src", 1)
    assert (early.valid, len(early.dead), parser.blocks_by_line) == (0, 2, 1)
    assert "future" in early.dead[0].reason
    time.sleep(0.6)
    late = parser.parse([line, line], "src", 1)
    assert (late.valid, late.dead, parser.blocks_fast) == (2, [], 1)
    assert [cand[3] for cand in late.counted] == [orjson.loads(line)["ts"]] * 2


def test_an_uncut_block_refused_goes_line_by_line_once_and_a_blank_line_stays_fast() -> None:
    """An uncut block the decoder refuses is not checked again as cut lines (the same
    checks of the same lines), unless it holds a blank line: then the other lines are
    still taken as one block."""
    def uncut(lines: list[bytes]) -> tuple[bytes, Any]:
        block = b"\n".join(lines)
        return block, np.flatnonzero(np.frombuffer(block, np.uint8) == 0x0A)

    bad = [*CLEAN[:3], b'{"ts": "soon"', *CLEAN[3:]]
    parser = BlockParser(COUNTS, RecordLimits())
    with mock.patch.object(parser, "_fast_block", wraps=parser._fast_block) as fast_block:
        got = parser.parse([], "src", 1, *uncut(bad))
    assert fast_block.call_count == 0 and parser.blocks_by_line == 1
    assert (got.valid, [d.position for d in got.dead]) == (len(CLEAN), ["4"])
    assert got == BlockParser(COUNTS, RecordLimits()).parse(bad, "src", 1)

    blank = [*CLEAN[:3], b"", *CLEAN[3:]]
    parser = BlockParser(COUNTS, RecordLimits())
    got = parser.parse([], "src", 1, *uncut(blank))
    assert (parser.blocks_fast, got.valid, got.blank, got.dead) == (1, len(CLEAN), 1, [])
