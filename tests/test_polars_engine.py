"""The polars engine's own parts: its loader against the reference reader, its input
kinds, the fast path being taken, ts beyond float precision, frames reused for sweeps."""

from __future__ import annotations

import gzip
import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import binloop.engines.polars.read as polars_load
from binloop.core.config import Config
from binloop.core.detection import DetectionParams, detect
from binloop.core.schema import (
    DeadLetter,
    RecordLimits,
    RecordParser,
    ToolInvocation,
    dumps_record,
    validate_record,
)
from binloop.core.window import WindowSpec
from binloop.engines.polars.engine import detect_frame, detect_rows, load_records
from binloop.engines.polars.read import LoadedRecords, record_of, records_frame
from binloop.replay.ingest import parse_chunk
from binloop.replay.readers import InputReader
from tests.helpers import rec
from tests.strategies import encode, odd_lines, telemetry_lines


def reference_read(path: Path, limits: RecordLimits) -> tuple[
        list[ToolInvocation], list[DeadLetter], int]:
    """What the reference engine reads: valid records, dead letters, blank lines."""
    records: list[ToolInvocation] = []
    dead: list[DeadLetter] = []
    blank = 0
    for chunk in InputReader(str(path), 5):
        parsed = parse_chunk(chunk, limits)
        records.extend(parsed.records)
        dead.extend(parsed.dead)
        blank += parsed.blank
    return records, dead, blank


def frame_records(loaded: LoadedRecords) -> list[tuple[object, ...]]:
    """Each row's detection fields and, for rows with a failure mode, its record."""
    rows = []
    for row in loaded.frame.drop("line", "record").iter_rows():
        rows.append(row)
    evidence = [record_of(text, mode) if text is not None else None for text, mode in
                zip(loaded.frame["record"], loaded.frame["failure_mode"], strict=True)]
    return [(*row, ev) for row, ev in zip(rows, evidence, strict=True)]


def assert_loads_like_reference(path: Path, limits: RecordLimits) -> LoadedRecords:
    records, dead, blank = reference_read(path, limits)
    loaded = load_records(str(path), limits)
    assert loaded.dead == dead
    assert loaded.blank == blank
    ours = frame_records(loaded)
    theirs = frame_records(LoadedRecords(records_frame(records), [], 0))
    # A proven line without an id has none in the frame (its hash is computed where it is
    # used: the record rebuilt for evidence, compared here, carries it).
    assert len(ours) == len(theirs)
    assert ours == [(None, *t[1:]) if o[0] is None else t
                    for o, t in zip(ours, theirs, strict=True)]
    return loaded


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(lines=odd_lines(), args_max_bytes=st.sampled_from((60, 300, 8192)),
       trailing_newline=st.booleans(),
       blocks=st.sampled_from((1 << 23, 7, 64, 1)))
def test_loader_reads_what_the_reference_reads(tmp_path_factory: pytest.TempPathFactory,
                                               lines: list[bytes], args_max_bytes: int,
                                               trailing_newline: bool,
                                               blocks: int) -> None:
    """Same records (normalised alike), same dead letters and reasons, same blanks, also
    when lines straddle reads and blocks (tiny `READ_BYTES`)."""
    path = tmp_path_factory.mktemp("load") / "odd.jsonl"
    path.write_bytes(b"\n".join(lines) + (b"\n" if trailing_newline else b""))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(polars_load, "READ_BYTES", blocks)
        assert_loads_like_reference(path, RecordLimits(args_max_bytes=args_max_bytes))


def test_a_missing_session_id_after_an_integer_one_is_a_dead_letter(tmp_path: Path) -> None:
    """A block whose first line has an integer session id is read strictly as integers,
    where a missing session id reads as null: that line is still refused (found by
    hypothesis in a full run)."""
    first = rec(1000, session=1, outcome="failure")
    missing = {k: v for k, v in rec(1001, outcome="failure").items()
               if k not in ("session_id", "agent_id")}
    path = tmp_path / "ints.jsonl"
    path.write_bytes(dumps_record(first) + b"\n" + orjson.dumps(missing) + b"\n")
    loaded = assert_loads_like_reference(path, RecordLimits())
    assert [(d.position, d.reason) for d in loaded.dead] == [("2", "missing field session_id")]
    assert loaded.frame.height == 1


def test_gz_parquet_directory_and_stdin(tmp_path: Path) -> None:
    records = [rec(1000 + i, session=i % 2 or "s", outcome="failure" if i % 3 else "success",
                   args={"i": i}) for i in range(20)]
    lines = [dumps_record(r) for r in records] + [b"not json", b""]
    body = b"\n".join(lines) + b"\n"
    folder = tmp_path / "dir"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(body)
    (folder / "b.jsonl.gz").write_bytes(gzip.compress(body))
    rows = [{**r, "args": orjson.dumps(r["args"]).decode()} for r in records]
    rows[3]["outcome"] = "exploded"
    pl.DataFrame(rows, schema_overrides={"session_id": pl.String}).write_parquet(
        folder / "c.parquet")
    limits = RecordLimits()
    for path in (folder / "a.jsonl", folder / "b.jsonl.gz", folder / "c.parquet", folder):
        loaded = assert_loads_like_reference(path, limits)
        assert loaded.frame.height >= 19
    result = subprocess.run(
        [sys.executable, "-c",
         "import sys; from binloop.engines.polars.engine import load_records; "
         "r = load_records('-'); print(r.frame.height, len(r.dead), r.blank)"],
        input=body, capture_output=True, check=True)
    assert result.stdout.split() == [b"20", b"1", b"1"]


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(lines=telemetry_lines(max_lag=100))
def test_client_and_json_dumps_lines_take_the_fast_path(
        tmp_path_factory: pytest.TempPathFactory, lines: list[bytes]) -> None:
    """Lines in the client's form (or json.dumps with sorted keys), with or without `args`,
    need no per-line parse."""
    records, _, _ = reference_read(_write(tmp_path_factory, lines), RecordLimits())
    bodies = [dict(r) for r in records] + [{k: v for k, v in r.items() if k != "args"}
                                           for r in records]
    canonical = [encode(body, style) for body in bodies for style in ("client", "json.dumps")]
    calls = []
    original = polars_load.RecordParser

    class Counting(RecordParser):
        def parse(self, raw: bytes | str) -> ToolInvocation:
            calls.append(raw)
            return super().parse(raw)

        def validate(self, obj: dict[str, Any], encoded_size: int | None = None
                     ) -> ToolInvocation:
            calls.append(obj)
            return super().validate(obj, encoded_size)

    polars_load.RecordParser = Counting  # type: ignore[misc]
    try:
        loaded = load_records(str(_write(tmp_path_factory, canonical)))
    finally:
        polars_load.RecordParser = original  # type: ignore[misc]
    assert loaded.frame.height == len(canonical) and not loaded.dead
    assert calls == []


def _write(factory: pytest.TempPathFactory, lines: list[bytes]) -> Path:
    path = factory.mktemp("lines") / "t.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def test_timestamps_beyond_float_precision_still_exact() -> None:
    """ts past 2**53 (valid with no future-skew bound) go through the detector whole."""
    no_skew = RecordLimits(max_future_skew_ms=None)
    stream = [validate_record({"ts": 2**60 + ts, "tool": "t", "failure_mode": "ARGS.x",
                               "session_id": i % 2, "outcome": "failure", "args": {"i": i}},
                              no_skew) for i, ts in enumerate((0, 3, 6, 9, 3, 12, 15, 18))]
    stream.append(stream[2])  # a duplicate
    for window in ("session", "global", "sliding:5ms"):
        params = DetectionParams(theta=2, window=WindowSpec.parse(window), session_gap_ms=4)
        assert detect_frame(records_frame(stream), params) == detect(params, stream)
    late = detect_rows(records_frame(stream), DetectionParams(
        theta=9, window=WindowSpec.parse("sliding:5ms")))
    assert late.late_rows == [4] and late.stats.duplicates == 1


def test_one_loaded_frame_serves_many_parameter_sets(tmp_path: Path) -> None:
    """A sweep loads once and detects many times; each time as the reference would."""
    stream = [rec(i * 7_000, tool=f"t{i % 3}", session=i % 4, args={"i": i},
                  mode=("ARGS.a", "ARGS.b", "NETWORK.x")[i % 5 % 3]) for i in range(300)]
    path = tmp_path / "sweep.jsonl"
    path.write_bytes(b"".join(dumps_record(r) + b"\n" for r in stream))
    loaded = load_records(str(path))
    for theta in range(1, 6):
        for window in ("session", "global", "sliding:30s"):
            for mode_level in (None, 1):
                params = Config(theta=theta, window=WindowSpec.parse(window),
                                mode_level=mode_level, session_gap=60_000).detection()
                assert detect_frame(loaded, params) == detect(params, stream)


def test_cli_polars_engine(tmp_path: Path) -> None:
    base = 1_700_000_000_000
    lines = [dumps_record(rec(base + i, args={"i": i})) for i in range(4)] + [b"{oops"]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = subprocess.run(
        [sys.executable, "-m", "binloop.cli", "detect", "--engine", "polars", "--input",
         str(path), "--theta", "2"], capture_output=True, check=True)
    (event,) = [orjson.loads(line) for line in io.BytesIO(result.stdout)]
    assert event["count"] == 2 and [r["ts"] for r in event["evidence"]] == [base, base + 1]
    assert b"records read 5 | valid 4 | invalid 1" in result.stderr
    assert b"not JSON" in result.stderr


# Lines that polars' JSON reader and orjson (the schema's) read differently, or whose
# field types only the text shows: each must be read as the reference reads it.
_BASE = '"session_id":1,"ts":1700000000000,"tool":"t","outcome":"failure","failure_mode":"ARGS.x"'
DISAGREEING_LINES = (
    '{' + _BASE + ',"failure_mode":null}',  # polars keeps the first key, orjson the last
    '{' + _BASE + ',"outcome":"success"}',
    '{' + _BASE + ',"tool":"u"}',
    '{' + _BASE + ',"ts":1700000000001}',
    '{' + _BASE + ',"id":"' + "a" * 64 + '","id":"' + "b" * 64 + '"}',
    '{"session_id":"s",' + _BASE[15:] + ',"session_id":2}',
    '{' + _BASE + ',"args":{"tool":"v"}}',  # a key of ours nested: left to the schema
    '{' + _BASE.replace('"tool"', '"t\\u006fol"') + '}',  # a key spelt with escapes
    '{' + _BASE + ',"t\\u006fol":"w"}',
    '{' + _BASE.replace('"t"', '"\\ud800"') + '}',  # a lone surrogate
    '{' + _BASE.replace('"session_id":1', '"session_id":1.0') + '}',  # polars reads "1"
    '{' + _BASE.replace('"session_id":1', '"session_id":-0') + '}',
    '{' + _BASE.replace('"session_id":1', '"session_id":"1"') + '}',
    '{' + _BASE.replace('"session_id":1', '"session_id":  "1"') + '}',
    '{' + _BASE.replace('"session_id":1', '"session_id":12345678901234567890') + '}',
    '{' + _BASE.replace('"session_id":1', '"session_id":true') + '}',
    '{' + _BASE.replace('"tool":"t"', '"tool":5') + '}',
    '{' + _BASE.replace('"ARGS.x"', '["ARGS.x"]') + '}',
    '{' + _BASE + ',"duration_ms":1e3}',
    '{' + _BASE + ',"duration_ms":-1}',
    '{' + _BASE + ',"duration_ms":18446744073709551615}',
    '{' + _BASE + ',"error":7}',
    '{' + _BASE + ',"error_template":{"a":1}}',
    '{' + _BASE + ',"agent_id":null,"error":"e"}',
    '{' + _BASE + ',"args":"s"}',
    '{' + _BASE + ',"args":null}',
    '{' + _BASE + ',"args":{"a":1},"args":[1]}',
    '{' + _BASE + ',"id":"' + "A" * 64 + '"}',
    '{' + _BASE + ',"id":"' + "g" * 64 + '"}',
    '{' + _BASE + ',"id":"' + "a" * 63 + '"}',
    '{' + _BASE + ',"id":"' + "a" * 65 + '"}',
    '{' + _BASE + ',"id":"\\u0061' + "a" * 63 + '"}',  # an escape: read as the schema reads it
    '{' + _BASE + ',"id":"' + "a" * 32 + "A" * 32 + '"}',
    '{' + _BASE.replace('"failure"', '"FAILURE"') + '}',
    '{' + _BASE.replace('"ARGS.x"', '"args.x"') + '}',
)


@pytest.mark.parametrize("line", DISAGREEING_LINES)
def test_lines_read_differently_by_polars_are_read_as_the_schema_reads_them(
        tmp_path: Path, line: str) -> None:
    clean = '{' + _BASE + '}'
    path = tmp_path / "odd.jsonl"
    # among clean lines, so that the block is read by polars at all
    path.write_bytes(f"{clean}\n{line}\n{clean}\n".encode())
    assert_loads_like_reference(path, RecordLimits())


def test_integer_session_ids_are_read_as_integers_and_mixed_blocks_leniently(
        tmp_path: Path) -> None:
    """A block whose first line has an integer session id is read with integer session
    ids (no per-line search for a quoted one); one where some id is a string (or of
    another type) is read again leniently, and every line still as the reference reads
    it: 1 and "1" stay different sessions."""
    ints = [f'{{"session_id":{i},"ts":{1700000000000 + i},"tool":"t","outcome":"failure",'
            f'"failure_mode":"ARGS.x"}}' for i in range(6)]
    block = "\n".join(ints).encode() + b"\n"
    values, session_ints = polars_load._read_values(block)
    assert session_ints and values["session_id"].to_list() == [str(i) for i in range(6)]
    for odd in ('"1"', "1.0", "true", '"s"'):
        mixed = [*ints, ints[1].replace('"session_id":1', f'"session_id":{odd}')]
        values, session_ints = polars_load._read_values("\n".join(mixed).encode())
        assert not session_ints
        path = tmp_path / "mixed.jsonl"
        path.write_text("\n".join(mixed) + "\n")
        loaded = assert_loads_like_reference(path, RecordLimits())
        assert loaded.frame["session_int"].to_list()[:6] == [True] * 6
    # a first line with a string id: read leniently at once
    assert not polars_load._read_values(block.replace(b'"session_id":0', b'"session_id":"0"'))[1]



@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(['{"a":1}', '{"a":"\ufffd"}', '{"é":"ü€𝄞"}', "", "x",
                                 b"\xff\xfe", b'{"a":"\xc3"}', b"\xef\xbf\xbd",
                                 # read leniently, one U+FFFD of the same size
                                 b'{"a":"\xf0\x9d\x84"}']),
                min_size=1, max_size=20))
def test_block_lines_are_the_lines_as_written(parts: list[str | bytes]) -> None:
    """A block's lines (`_lines_of`): the text of each line as decoded one by one, null
    for a line that is not UTF-8, and its size in bytes. A block that is all UTF-8 is
    read at once as it is (a written U+FFFD included); only another one is also handed
    back as bytes."""
    lines = [part.encode() if isinstance(part, str) else part for part in parts]
    text, size, raw = polars_load._lines_of(b"".join(line + b"\n" for line in lines))

    def decoded(line: bytes) -> str | None:
        try:
            return line.decode()
        except UnicodeDecodeError:
            return None

    # a blank line's text is null or empty (its size tells it)
    assert [value or None for value in text.to_list()] == [
        decoded(line) or None for line in lines]
    assert size.to_list() == [len(line) for line in lines]
    all_utf8 = all(decoded(line) is not None for line in lines)
    assert (raw is None) == all_utf8 or (raw is not None and raw == lines)

def test_outcomes_and_modes_are_decided_once_per_distinct_value() -> None:
    """Values already in their normal form are kept as they are; rejected ones are null;
    others are normalised by the schema's own function."""
    frame = pl.DataFrame({"o": ["success", "failure", None, "success"]})
    decide = polars_load._normal_outcome
    expr = polars_load._decided(frame["o"], decide)
    assert str(expr) == str(pl.col("o"))  # kept as it is: no per-row mapping
    frame = pl.DataFrame({"o": ["success", "bogus", None, "FAILURE"]})
    assert frame.select(polars_load._decided(frame["o"], decide)).to_series().to_list() == [
        "success", None, None, "failure"]
    frame = pl.DataFrame({"o": ["success", "bogus"]})
    assert frame.select(polars_load._decided(frame["o"], decide)).to_series().to_list() == [
        "success", None]


def test_a_plain_file_replay_does_not_import_numpy(tmp_path: Path) -> None:
    """Start-up is part of every whole-process figure: the polars engine's path for a
    plain JSONL file must not pay for numpy's import (~0.1 s)."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(dumps_record(rec(1700000000000 + i, outcome="failure"))
                              + b"\n" for i in range(50)))
    out = tmp_path / "events.jsonl"
    code = ("import sys; from binloop.cli import main; "
            f"main(['detect', '--input', {str(path)!r}, '--out', {str(out)!r}, "
            "'--no-progress', '--engine', 'polars', '--window', 'global', '--theta', '3']); "
            "print('numpy' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    assert result.stdout.split()[-1] == b"False"
    assert out.read_bytes().count(b"\n") == 1


def test_whole_lines_through_one_buffer(tmp_path: Path) -> None:
    """Blocks end at line ends whatever the buffer size; a line longer than the buffer
    makes room for itself; a last line without its line end is held (the line reader
    decides it), and so is a line beyond the line limit."""
    lines = [b"x" * n for n in (3, 40, 1, 0, 25, 7)]
    body = b"\n".join(lines) + b"\n" + b"tail"
    path = tmp_path / "lines.jsonl"
    path.write_bytes(body)
    for size in (1, 5, 16, 1 << 20):
        with pytest.MonkeyPatch.context() as patch, open(path, "rb", buffering=0) as file:
            patch.setattr(polars_load, "READ_BYTES", size)
            reader = polars_load._WholeLines(file, len(body), 1 << 20)
            blocks = []
            while (block := reader.next_block()) is not None:
                assert block.endswith(b"\n")
                blocks.append(block)
            assert b"".join(blocks) == body[:-4] and reader.held == 4
    with pytest.MonkeyPatch.context() as patch, open(path, "rb", buffering=0) as file:
        patch.setattr(polars_load, "READ_BYTES", 8)
        reader = polars_load._WholeLines(file, len(body), 30)
        assert reader.next_block() == b"xxx\n"  # then a 40-byte line, beyond 30
        assert reader.next_block() is None and reader.held > 30
    with open(path, "rb", buffering=0) as file:  # up to the size at open only
        reader = polars_load._WholeLines(file, 4, 1 << 20)
        assert reader.next_block() == b"xxx\n" and reader.next_block() is None
        assert reader.held == 0
