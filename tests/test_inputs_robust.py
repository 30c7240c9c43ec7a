"""Damaged and unusual input files: every engine reads them through `binloop.replay.readers`
and agrees (docs/robustness.md)."""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from binloop.core.reading import ReadOptions
from binloop.replay.readers import (
    BOM,
    InputReader,
    LineSplitter,
    ReadPosition,
    line_blocks,
    list_input_files,
    prefix_text,
    reader_chunks,
)
from tests.engine_runs import engine_config, run_bytewax_on, run_polars_on, run_reference_on

T0 = 1_700_000_000_000
ENGINES = ("reference", "polars", "bytewax")


def record(i: int, ts: int | float | None = None, tool: str = "t") -> bytes:
    return orjson.dumps({"session_id": 1, "ts": T0 + i if ts is None else ts, "tool": tool,
                         "outcome": "failure", "failure_mode": "ARGS.x", "args": {"i": i}})


def lines_of(n: int, start: int = 0) -> list[bytes]:
    return [record(i) for i in range(start, start + n)]


def detect(engine: str, path: Path, out: Path, *extra: str) -> tuple[int, str, list[Any],
                                                                        list[Any]]:
    """`binloop detect` as a user runs it: exit code, stderr, events, dead letters."""
    out.mkdir(parents=True, exist_ok=True)
    events, dead = out / f"events-{engine}.jsonl", out / f"dead-{engine}.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "binloop.cli", "detect", "--engine", engine, "--input",
         str(path), "--out", str(events), "--dead-letter", str(dead), "--no-progress",
         *extra], capture_output=True, text=True, timeout=300)
    read = [orjson.loads(x) for x in events.read_bytes().splitlines()] if events.exists() else []
    letters = [orjson.loads(x) for x in dead.read_bytes().splitlines()] if dead.exists() else []
    return proc.returncode, proc.stderr, read, letters


def read_all(path: Path | str, batch: int = 7, **options: Any
             ) -> tuple[list[Any], list[Any], int]:
    items: list[Any] = []
    rejects: list[Any] = []
    damaged = 0
    for chunk in InputReader(str(path), batch, options=ReadOptions(**options)):
        items.extend(chunk.items)
        rejects.extend(chunk.rejects)
        damaged += chunk.damaged_files
    return items, rejects, damaged


# --- line splitting -----------------------------------------------------------------------

TERMINATORS = (b"\n", b"\r\n", b"\r")


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.tuples(st.booleans(), st.binary(max_size=12)).map(
           lambda b: (BOM if b[0] else b"") + b[1].replace(b"\r", b"").replace(b"\n", b"")),
                     max_size=30),
       ends=st.lists(st.sampled_from(TERMINATORS), min_size=30, max_size=30),
       cuts=st.lists(st.integers(1, 9), max_size=60), last_end=st.booleans(),
       max_bytes=st.sampled_from((1 << 20, 4)))
# A last line that is only a BOM is no line (found by CI's run of this property).
@example(lines=[BOM], ends=[b"\n"] * 30, cuts=[], last_end=False, max_bytes=1 << 20)
# A line of max_bytes after its BOM is not too long, also where a block ends inside it.
@example(lines=[BOM + b"abcd"], ends=[b"\n"] * 30, cuts=[7], last_end=True, max_bytes=4)
@example(lines=[BOM + b"abcd"], ends=[b"\n"] * 30, cuts=[], last_end=False, max_bytes=4)
def test_any_block_boundaries_give_the_same_lines(lines: list[bytes], ends: list[bytes],
                                                  cuts: list[int], last_end: bool,
                                                  max_bytes: int) -> None:
    """Lines end at \\n, \\r\\n or \\r, a leading BOM goes, a line longer than `max_bytes`
    (its BOM not counted) is refused (and skipped as it streams by), whatever the read
    blocks."""
    data = b"".join(line + end for line, end in zip(lines, ends, strict=False))
    if lines and not last_end:
        data = data[: len(data) - len(ends[len(lines) - 1])]
    expected: list[bytes | int] = [x.removeprefix(BOM) for x in re.split(rb"\r\n|\r|\n", data)]
    if expected and expected[-1] == b"":
        expected.pop()
    expected = [len(x) if len(x) > max_bytes else x for x in expected]  # type: ignore[arg-type]
    splitter = LineSplitter("x", max_bytes)
    got: list[bytes | int] = []
    consumed = 0

    def take(pieces: list[Any]) -> None:
        nonlocal consumed
        for piece in pieces:
            if hasattr(piece, "letter"):
                got.append(int(piece.letter.reason.split()[2]))
                consumed += piece.size
            else:
                got.extend(piece.lines)
                consumed += (sum(piece.sizes) if piece.sizes is not None
                             else sum(map(len, piece.lines)) + len(piece.lines))

    position = 0
    for cut in [*cuts, len(data)]:
        block, position = data[position: position + cut], position + cut
        if block:
            take(splitter.feed(block))
    take(splitter.finish()[0])
    assert got == expected
    assert consumed == len(data)
    assert splitter.line == len(expected) + 1


def test_an_oversized_line_has_one_dead_letter_wherever_the_blocks_end() -> None:
    """Rejected whole in one block or skipped as it streams by: the same letter, whose
    text says how much was cut, and the same bytes read."""
    for line, end in ((b"y" * 100, b"\r\n"), (BOM + b"z" * 70, b"\n"), (BOM + b"w" * 5, b"\r")):
        data = line + end
        seen = set()
        for cut in range(1, len(data) + 1):
            splitter = LineSplitter("x", 4)
            pieces = [*splitter.feed(data[:cut]), *splitter.feed(data[cut:]),
                      *splitter.finish()[0]]
            assert [type(p).__name__ for p in pieces] == ["_Reject"], (cut, pieces)
            letter = pieces[0].letter  # type: ignore[union-attr]
            seen.add((letter.raw, letter.reason, pieces[0].size))
        body = line.removeprefix(BOM)
        assert seen == {(prefix_text(body), f"line of {len(body)} bytes exceeds max_line_bytes "
                         "(4)", len(data))}, seen


def test_cr_crlf_lf_and_bom_files_read_every_record(tmp_path: Path) -> None:
    good = lines_of(12)
    path = tmp_path / "windows.jsonl"
    path.write_bytes(BOM + b"\r".join(good[:4]) + b"\r" + b"\r\n".join(good[4:8]) + b"\r\n"
                     + BOM + b"\n".join(good[8:]))
    for engine in ENGINES:
        code, stderr, _, dead = detect(engine, path, tmp_path / engine, "--theta", "100")
        assert code == 0, stderr
        assert dead == [] and "valid 12 | invalid 0" in stderr, (engine, stderr)


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=25),
       batch=st.integers(1, 6), limit=st.integers(8, 30))
def test_resume_from_any_position_reads_the_rest(tmp_path_factory: pytest.TempPathFactory,
                                                 sizes: list[int], batch: int,
                                                 limit: int) -> None:
    """A reader resumed at any chunk's position hands out exactly what followed it,
    oversized lines (rejects) included."""
    path = tmp_path_factory.mktemp("resume") / "in.jsonl"
    body = [bytes([97 + n % 26]) * size for n, size in enumerate(sizes)]
    path.write_bytes(b"\r\n".join(body[: len(body) // 2]) + b"\n"
                     + b"\n".join(body[len(body) // 2:]) + b"\n")
    options = ReadOptions(max_line_bytes=limit)
    chunks = list(InputReader(str(path), batch, options=options))
    whole = [(c.first_line, c.items, [r.position for r in c.rejects]) for c in chunks]
    reader = InputReader(str(path), batch, options=options)
    positions = [ReadPosition()]
    while reader.next_chunk() is not None:
        positions.append(reader.position)
    for index, position in enumerate(positions):
        rest = [(c.first_line, c.items, [r.position for r in c.rejects])
                for c in InputReader(str(path), batch, resume=position, options=options)]
        assert rest == whole[index:]
    # The polars engine orders its dead letters and lates by the reader's chunks.
    reject_lines = [int(p) for _, _, rejected in whole for p in rejected]
    chunk_of = reader_chunks(reject_lines, batch)
    for number, (first, items, rejected) in enumerate(whole):
        for line in [*map(int, rejected), *range(first, first + len(items))]:
            assert chunk_of(line) == chunk_of(int(rejected[0]) if rejected else first), number
        if number:
            previous = whole[number - 1]
            assert chunk_of(previous[0]) < chunk_of(first) or not previous[1]


# --- oversized lines ----------------------------------------------------------------------


def test_oversized_line_streams_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    with open(path, "wb") as out:
        out.write(record(0) + b"\n")
        out.write(b'{"junk": "' + b"x" * (50 << 20) + b'"}\n')
        out.write(record(1) + b"\r" + record(2) + b"\n")
    tracemalloc.start()
    try:
        items, rejects, damaged = read_all(path, 4096)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert items == [record(0), record(1), record(2)] and damaged == 0
    (letter,) = rejects
    assert letter.position == "2" and "52428812 bytes exceeds max_line_bytes" in letter.reason
    assert letter.raw.startswith('{"junk": "xxx') and len(letter.raw) < 120
    assert peak < 12 << 20, f"peak {peak} bytes for a 50 MB line"


def test_oversized_lines_agree_in_every_engine(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    body = lines_of(9)
    body.insert(3, b"y" * 3000)
    body.insert(7, b'{"tool": "' + b"z" * 5000 + b'"}')
    path.write_bytes(b"\n".join(body) + b"\n")
    results = [detect(e, path, tmp_path / e, "--max-line-bytes", "2048", "--theta", "2",
                      "--batch-size", "3")
               for e in ENGINES]
    for code, stderr, _, _ in results:
        assert code == 0, stderr
    reference = results[0]
    assert [d["position"] for d in reference[3]] == ["4", "8"]
    assert all("exceeds max_line_bytes (2048)" in d["reason"] for d in reference[3])
    for other in results[1:]:
        assert other[3] == reference[3]
        assert sorted(e["event_id"] for e in other[2]) == sorted(
            e["event_id"] for e in reference[2])


# --- damaged files ------------------------------------------------------------------------


def damaged_directory(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    good = lines_of(1000)
    whole = gzip.compress(b"\n".join(good) + b"\n")
    (folder / "a_truncated.jsonl.gz").write_bytes(whole[: len(whole) * 2 // 3])
    (folder / "b_junk.jsonl.gz").write_bytes(
        gzip.compress(b"\n".join(lines_of(10, 2000)) + b"\n") + b"JUNK")
    (folder / "c_text.jsonl.gz").write_bytes(b"I am plain text, not gzip\n")
    (folder / "d_empty.parquet").write_bytes(b"")
    frame = pl.DataFrame([orjson.loads(x) for x in lines_of(50, 3000)]).with_columns(
        pl.col("args").struct.json_encode())
    frame.write_parquet(folder / "e_good.parquet")
    data = (folder / "e_good.parquet").read_bytes()
    (folder / "f_truncated.parquet").write_bytes(data[: len(data) // 2])
    (folder / "g_good.jsonl").write_bytes(b"\n".join(lines_of(7, 4000)) + b"\n")
    return folder


def test_damaged_files_are_one_dead_letter_each_in_every_engine(tmp_path: Path) -> None:
    folder = damaged_directory(tmp_path)
    _, _rejects, damaged = read_all(folder, 100)
    assert damaged == 5
    truncated_good = len([i for i in read_all(folder / "a_truncated.jsonl.gz", 100)[0] if i])
    assert 500 < truncated_good < 1000  # the records before the damage
    results = [detect(e, folder, tmp_path / e, "--theta", "2", "--window", "global")
               for e in ENGINES]
    reference = results[0]
    for code, stderr, _, dead in results:
        assert code == 65, stderr
        assert "DAMAGED FILES 5" in stderr and "Traceback" not in stderr
        assert dead == reference[3]
        valid = truncated_good + 10 + 50 + 7
        assert f"valid {valid:,} | invalid 5" in stderr, stderr
    by_file = {Path(d["source"]).name: d for d in reference[3]}
    assert set(by_file) == {"a_truncated.jsonl.gz", "b_junk.jsonl.gz", "c_text.jsonl.gz",
                            "d_empty.parquet", "f_truncated.parquet"}
    assert by_file["a_truncated.jsonl.gz"]["reason"].startswith(
        "damaged file: truncated gzip stream")
    assert re.fullmatch(r"byte \d+", by_file["a_truncated.jsonl.gz"]["position"])
    assert by_file["b_junk.jsonl.gz"]["reason"] == (
        "damaged file: trailing data after the gzip stream")
    assert by_file["b_junk.jsonl.gz"]["raw"] == "JUNK"
    assert "not gzip data" in by_file["c_text.jsonl.gz"]["reason"]
    assert by_file["d_empty.parquet"]["position"] == "row 0"
    assert "unreadable Parquet" in by_file["f_truncated.parquet"]["reason"]
    # The good files after the damaged ones were read: both fire in the same events.
    assert {e["tool"] for e in reference[2]} == {"t"}
    for _, _, events, _ in results[1:]:
        assert sorted(e["event_id"] for e in events) == sorted(
            e["event_id"] for e in reference[2])


def test_concatenated_and_zero_padded_gzip_are_not_damage(tmp_path: Path) -> None:
    part = gzip.compress(b"\n".join(lines_of(5)) + b"\n")
    path = tmp_path / "two.jsonl.gz"
    path.write_bytes(part + part + b"\0" * 512)
    items, rejects, damaged = read_all(path)
    assert len(items) == 10 and rejects == [] and damaged == 0


# --- symlinks, unknown content, appended files --------------------------------------------


def test_symlinks_in_a_directory_are_skipped_unless_followed(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(b"\n".join(lines_of(3)) + b"\n")
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"root:x:0:0:root:/root:/bin/bash\n" * 3)
    (folder / "passwd.jsonl").symlink_to(secret)
    assert [Path(f).name for f in list_input_files(str(folder))] == ["a.jsonl"]
    assert [Path(f).name for f in list_input_files(str(folder), follow_symlinks=True)] == [
        "a.jsonl", "passwd.jsonl"]
    code, stderr, _, dead = detect("reference", folder, tmp_path / "plain")
    assert code == 0 and dead == [] and "valid 3 | invalid 0" in stderr
    code, stderr, _, dead = detect("reference", folder, tmp_path / "followed",
                                   "--follow-symlinks")
    assert code == 0 and len(dead) == 3
    # Content that is not a JSON object is not telemetry: only a short prefix is kept.
    assert all(len(d["raw"]) <= 64 + len("...[99 more chars]") for d in dead)


def test_a_file_appended_while_read_is_read_as_it_was_at_open(tmp_path: Path) -> None:
    path = tmp_path / "live.jsonl"
    path.write_bytes(b"\n".join(lines_of(10)) + b"\n" + record(10)[:20])
    reader = InputReader(str(path), 4)
    first = reader.next_chunk()
    assert first is not None and len(first.items) == 4
    with open(path, "ab") as writer:  # the writer finishes its line and goes on
        writer.write(record(10)[20:] + b"\n" + b"\n".join(lines_of(5, 11)) + b"\n")
    rest = [item for chunk in iter(reader.next_chunk, None) for item in chunk.items]
    assert rest == lines_of(6, 4)  # complete lines only: no torn line, nothing appended
    # A file that did not grow keeps its last line even without a newline.
    still = tmp_path / "still.jsonl"
    still.write_bytes(b"\n".join(lines_of(3)))
    assert read_all(still)[0] == lines_of(3)


def test_a_stalled_writer_s_last_line_is_left_unread_not_dead_lettered(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A writer paused in the middle of a line: every engine reads the complete lines,
    dead-letters nothing and says the last line was left; once the writer has finished
    the line, the next replay reads it."""
    path = tmp_path / "live.jsonl"
    path.write_bytes(b"\n".join(lines_of(10)) + b"\n" + record(10)[:25])
    for engine, run in (("reference", run_reference_on), ("polars", run_polars_on),
                        ("bytewax", run_bytewax_on)):
        caplog.clear()
        got = run(engine_config(path, tmp_path / engine))
        assert got.dead == [] and got.counters["valid"] == got.counters["records_read"] == 10
        assert "line 11 (25 bytes) has no line end" in caplog.text, engine
    with open(path, "ab") as writer:
        writer.write(record(10)[25:])  # complete JSON, still no newline: a record
    got = run_reference_on(engine_config(path, tmp_path / "after"))
    assert got.dead == [] and got.counters["valid"] == 11
    # A last line that is not JSON and never will be is not telemetry: it is left too.
    path.write_bytes(b"\n".join(lines_of(3)) + b"\nroot:x:0:0")
    assert read_all(path)[:2] == (lines_of(3), [])


def test_a_pipe_is_handed_out_as_it_comes_and_never_splits_a_line() -> None:
    """`tail -F FILE | binloop ...`: what has come through the pipe is handed out without
    waiting for a full chunk, and a line whose end has not come yet is held."""
    read_end, write_end = os.pipe()
    blocks = line_blocks("pipe", 4096, stream=os.fdopen(read_end, "rb"))
    os.write(write_end, record(0) + b"\n" + record(1) + b"\n" + record(2)[:20])
    writing = True
    with ThreadPoolExecutor(1) as pool:
        try:
            first = pool.submit(next, blocks).result(timeout=20)  # the pipe is still open
            assert first.lines == [record(0), record(1)]
            second = pool.submit(next, blocks)
            time.sleep(0.2)
            assert not second.done()  # the half line is held, not handed out
            os.write(write_end, record(2)[20:] + b"\n")
            assert second.result(timeout=20).lines == [record(2)]
        finally:  # a reader that waits for the end of the pipe fails, not hangs
            os.close(write_end)
            writing = False
    assert not writing and list(blocks) == []


@pytest.mark.parametrize("engine", ["reference", "bytewax"])
def test_detect_follows_a_pipe(tmp_path: Path, engine: str) -> None:
    """`tail -F FILE | binloop detect --input -`: an event fires while the pipe is open."""
    events = tmp_path / "events.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "binloop.cli", "detect", "--engine", engine, "--input", "-",
         "--theta", "2", "--window", "global", "--out", str(events), "--dead-letter",
         str(tmp_path / "dead.jsonl"), "--no-progress"], stdin=subprocess.PIPE,
        stderr=subprocess.PIPE)
    assert proc.stdin is not None
    try:
        proc.stdin.write(record(0) + b"\n" + record(1) + b"\n" + record(2)[:10])
        proc.stdin.flush()
        deadline = time.monotonic() + 60
        while not (events.exists() and events.read_bytes().count(b"\n") == 1):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        proc.stdin.write(record(2)[10:] + b"\n")
    finally:
        proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    assert proc.stderr is not None and b"valid 3 | invalid 0" in proc.stderr.read()


APPENDER = """
import os, sys, time
import orjson
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
i = int(sys.argv[2])
while True:  # each record in two writes, a pause in the middle of the line
    line = orjson.dumps({"session_id": 1, "ts": 1_700_000_000_000 + i, "tool": "t",
                         "outcome": "failure", "failure_mode": "ARGS.x", "args": {"i": i}})
    os.write(fd, line[:30])
    time.sleep(0.0005)
    os.write(fd, line[30:] + b"\\n")
    i += 1
"""


@pytest.mark.slow
def test_a_file_appended_while_every_engine_reads_it(tmp_path: Path) -> None:
    """A real writer appends (lines in two writes) while `binloop detect` replays the file
    in every engine: no torn line is ever dead-lettered, every record read is valid."""
    path = tmp_path / "live.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines_of(3000)))
    writer = subprocess.Popen([sys.executable, "-c", APPENDER, str(path), "3000"])
    try:
        for attempt in range(2):
            for engine in ENGINES:
                code, stderr, _, dead = detect(engine, path, tmp_path / f"{engine}{attempt}")
                assert (code, dead) == (0, []), stderr
                found = re.search(r"records read ([\d,]+) \| valid ([\d,]+) \| invalid 0",
                                  stderr)
                assert found and found[1] == found[2], stderr
                assert int(found[1].replace(",", "")) >= 3000
    finally:
        writer.kill()
        writer.wait()
    assert path.stat().st_size > 3000 * len(record(0))  # it did write meanwhile


# --- timestamps in seconds ----------------------------------------------------------------


def seconds_file(tmp_path: Path) -> Path:
    seconds = T0 // 1000
    body = [record(i, ts=seconds + i * 60, tool=f"t{i % 2}") for i in range(8)]
    body.append(record(99, ts=seconds + 0.25, tool="t0"))
    body.append(record(100, tool="t1"))  # a ms record among them
    path = tmp_path / "seconds.jsonl"
    path.write_bytes(b"\n".join(body) + b"\n")
    return path


def test_seconds_are_converted_and_counted_in_every_engine(tmp_path: Path) -> None:
    path = seconds_file(tmp_path)
    results = [detect(e, path, tmp_path / e, "--theta", "3") for e in ENGINES]
    reference = results[0]
    assert reference[0] == 0 and "ts in seconds converted 9" in reference[1]
    fired = {e["tool"]: [r["ts"] for r in e["evidence"]] for e in reference[2]}
    assert fired["t0"][:3] == [T0, T0 + 120_000, T0 + 240_000]
    for code, stderr, events, dead in results[1:]:
        assert code == 0 and "ts in seconds converted 9" in stderr, stderr
        assert sorted(orjson.dumps(e, option=orjson.OPT_SORT_KEYS) for e in events) == sorted(
            orjson.dumps(e, option=orjson.OPT_SORT_KEYS) for e in reference[2])
        assert dead == reference[3] == []


def test_ts_unit_ms_and_s(tmp_path: Path) -> None:
    path = seconds_file(tmp_path)
    code, stderr, events, dead = detect("reference", path, tmp_path / "ms", "--ts-unit", "ms")
    # As milliseconds the seconds are January 1970 dates, 60 ms apart; the float is invalid.
    assert code == 0 and "converted" not in stderr
    assert events and all(e["fired_ts"] < 10**11 for e in events)
    assert [d["position"] for d in dead] == ["9"] and "integer" in dead[0]["reason"]
    code, stderr, _events, dead = detect("polars", path, tmp_path / "s", "--ts-unit", "s")
    # As seconds the ms record is 50,000 years ahead: beyond the future-skew allowance.
    assert code == 0 and "ts in seconds converted 9" in stderr
    assert [d["position"] for d in dead] == ["10"] and "future" in dead[0]["reason"]


# --- agreement on odd files ---------------------------------------------------------------

ODD_TERMINATORS = (b"\n", b"\r\n", b"\r")


@st.composite
def odd_file(draw: st.DrawFn) -> bytes:
    """Telemetry as real files get it: mixed line ends, byte order marks, oversized and
    non-JSON lines, records in seconds, out-of-order ts; maybe a torn last line."""
    clock = T0
    parts: list[bytes] = []
    for n in range(draw(st.integers(0, 40))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            line = draw(st.sampled_from([b"x" * 300, b"not json", b"[1]", b"{" + b"y" * 400]))
        else:
            clock += draw(st.integers(0, 50_000))
            ts: int | float = clock - draw(st.integers(0, 3_000_000))
            if kind == 1:
                ts = ts / 1000 if draw(st.booleans()) else ts // 1000
            line = record(n, ts=ts, tool=draw(st.sampled_from(["a", "b"])))
        if draw(st.integers(0, 9)) == 0:
            line = BOM + line
        parts.append(line + draw(st.sampled_from(ODD_TERMINATORS)))
    data = b"".join(parts)
    return data[:-1] if data and draw(st.booleans()) else data


@settings(max_examples=60, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(data=odd_file(), batch_size=st.sampled_from((3, 16, 4096)),
       window=st.sampled_from(("session", "global", "sliding:2m")),
       late_out=st.booleans(), block_bytes=st.sampled_from((1, 300, 1 << 23)))
def test_reference_and_polars_agree_on_odd_files(tmp_path_factory: pytest.TempPathFactory,
                                                 data: bytes, batch_size: int, window: str,
                                                 late_out: bool, block_bytes: int) -> None:
    """Also when the polars engine reads in tiny blocks (a chunk's rejects and lates then
    span blocks)."""
    import binloop.engines.polars.read as polars_read
    from binloop.core.window import WindowSpec
    from tests.engine_runs import engine_config, run_polars_on, run_reference_on

    base = tmp_path_factory.mktemp("odd")
    path = base / "in.jsonl"
    path.write_bytes(data)
    knobs: dict[str, Any] = {"theta": 2, "window": WindowSpec.parse(window),
                             "max_line_bytes": 256, "session_gap": 120_000,
                             "batch_size": batch_size, **({} if late_out else {"late_out": None})}
    reference = run_reference_on(engine_config(path, base / "ref", **knobs))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(polars_read, "READ_BYTES", block_bytes)
        polars = run_polars_on(engine_config(path, base / "pol", **knobs))
    assert polars == reference


@pytest.mark.slow
def test_publish_of_a_damaged_file_publishes_the_good_part_and_says_so(
        nats_server: Any, tmp_path: Path) -> None:
    import asyncio

    from binloop.nats.jetstream import connect

    whole = gzip.compress(b"\n".join(lines_of(2000)) + b"\n")
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(whole[: len(whole) // 2])
    good = len([i for i in read_all(path, 100)[0] if i])
    proc = subprocess.run(
        [sys.executable, "-m", "binloop.cli", "publish", "--nats", nats_server.url, str(path)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 65, proc.stderr
    lines = proc.stderr.splitlines()
    (dead,) = [line for line in lines if line.startswith("dead-letter: ")]
    assert "truncated gzip stream" in dead
    assert any(line.startswith(f"published {good:,} records") for line in lines)
    assert lines[-1].startswith("binloop publish: error: input not published at ")

    async def stored() -> int:
        nc = await connect(nats_server.url, "test", 5)
        try:
            info = await nc.jetstream().stream_info("TELEMETRY")
            return int(info.state.messages)
        finally:
            await nc.close()

    assert asyncio.run(stored()) == good
