"""Several workers share one replayed input without sending its bytes to each other.

Each worker's source partition hands out every n-th chunk (`SeekingReader(stride=...)`),
reading only its own blocks of a plain file: the union of what n such readers hand out
must be exactly what one reader hands out (the same lines, line numbers and rejects, in
order; every chunk number once), and a replay
with several workers or processes (real Bytewax runs) must give the reference engine's
events, dead letters, late records and counters, also after a crash and a resume.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from binloop.core.errors import InputError
from binloop.core.reading import ReadOptions
from binloop.replay import readers as inputs
from binloop.replay.readers import InputReader, RawChunk
from binloop.replay.strided import SeekingReader
from tests.engine_runs import (
    Outcome,
    by_event_id,
    engine_config,
    read_jsonl,
    run_bytewax_on,
    run_processes_on,
    run_reference_on,
    same_as_reference,
)
from tests.helpers import rec

PIECES = [b'{"session_id": 1, "ts": 1700000000000, "tool": "t", "outcome": "failure", '
          b'"failure_mode": "ARGS.x"}', b"", b"not json", b"\r", b"\xef\xbb\xbf{}",
          b"x" * 40, b"{}"]


def _as_seen(chunk: RawChunk) -> tuple[Any, ...]:
    return (chunk.partition, chunk.seq, chunk.source, chunk.first_line, chunk.lines(),
            chunk.rejects, chunk.damaged_files, chunk.block,
            tuple(_as_seen(part) for part in chunk.more),
            None if chunk.lines_before is None else chunk.lines_before())


def _flat(chunks: list[RawChunk]) -> list[tuple[Any, ...]]:
    """What chunks hand out, in order: each reject, then each line with its number."""
    from binloop.replay.strided import numbered

    out: list[tuple[Any, ...]] = []
    for chunk in chunks:
        # A seeking reader's numbers count from its block: the lines before, on demand.
        before = chunk.lines_before() if chunk.lines_before is not None else 0
        for part in (chunk, *chunk.more):
            out.extend(("reject", numbered(letter, before)) for letter in part.rejects)
            out.extend(("line", part.source, before + part.first_line + i, line)
                       for i, line in enumerate(part.lines()))
            out.append(("damaged", part.damaged_files)) if part.damaged_files else None
    return out


def _shared(path: str, readers: int, options: ReadOptions) -> list[RawChunk]:
    """The chunks of `readers` strided readers, in chunk order; every seq exactly once."""
    chunks = sorted((c for i in range(readers)
                     for c in SeekingReader(path, 4, "p", None, "auto", options,
                                            stride=(i, readers))),
                    key=lambda chunk: chunk.seq)
    assert [c.seq for c in chunks] == list(range(len(chunks)))  # what shards wait for
    return chunks


def _one_reader(path: str, options: ReadOptions) -> list[RawChunk]:
    return list(InputReader(path, 4, "p", None, "auto", options, whole_blocks=True))


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(files=st.lists(st.lists(st.sampled_from(PIECES), max_size=25), min_size=1, max_size=3),
       readers=st.integers(2, 4), block_bytes=st.integers(8, 200),
       gzipped=st.lists(st.booleans(), min_size=3, max_size=3))
def test_readers_with_a_stride_hand_out_exactly_what_one_reader_does(
        tmp_path_factory: pytest.TempPathFactory, files: list[list[bytes]], readers: int,
        block_bytes: int, gzipped: list[bool]) -> None:
    """Plain files are read by seeking to one's own blocks, .gz files are read through;
    in a directory of both the chunk numbers still run on from file to file."""
    import gzip

    folder = tmp_path_factory.mktemp("strided")
    for index, lines in enumerate(files):
        data = b"\n".join(lines)
        if gzipped[index]:
            (folder / f"{index}.jsonl.gz").write_bytes(gzip.compress(data))
        else:
            (folder / f"{index}.jsonl").write_bytes(data)
    options = ReadOptions(max_line_bytes=32)  # some lines are rejects read past
    with mock.patch.object(inputs, "READ_BYTES", block_bytes):
        assert _flat(_shared(str(folder), readers, options)) == _flat(
            _one_reader(str(folder), options))


LINE_BODIES = st.one_of(st.binary(max_size=12).map(lambda b: b.replace(b"\r", b"").replace(
    b"\n", b"")), st.sampled_from([b"", b"\xef\xbb\xbf", b"\xef\xbb\xbf{}", b"{}", b"x" * 70,
                                   b"y" * 300, b'{"tool": 5}']))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(lines=st.lists(st.tuples(LINE_BODIES, st.sampled_from([b"\n", b"\r\n", b"\r"])),
                      max_size=40),
       last=LINE_BODIES, readers=st.integers(1, 4), block_bytes=st.integers(1, 120),
       max_line=st.sampled_from([8, 40, 1000]))
def test_seeking_readers_give_the_lines_and_line_numbers_of_one_reader(
        tmp_path_factory: pytest.TempPathFactory, lines: list[tuple[bytes, bytes]],
        last: bytes, readers: int, block_bytes: int, max_line: int) -> None:
    """Random line lengths (some longer than a block, some longer than max_line_bytes)
    and terminators (\\n, \\r\\n, lone \\r, a \\r as a block's last byte), BOMs,
    an unterminated last line: the union of n seeking readers is the one reader's
    lines, rejects and line numbers, in order."""
    path = tmp_path_factory.mktemp("seeking") / "in.jsonl"
    path.write_bytes(b"".join(body + end for body, end in lines) + last)
    options = ReadOptions(max_line_bytes=max_line)
    with mock.patch.object(inputs, "READ_BYTES", block_bytes):
        expected = _flat(_one_reader(str(path), options))
        got = _flat(_shared(str(path), readers, options)) if readers > 1 else _flat(
            _seeking_alone(str(path), options))
    assert got == expected


def _seeking_alone(path: str, options: ReadOptions) -> list[RawChunk]:
    """One reader that seeks block by block (n = 1: `InputReader` reads through then)."""
    from binloop.replay.strided import SeekingFile, block_chunk

    seeking = SeekingFile(path, options)
    try:
        return [block_chunk(*seeking.parts(k)[:1], "p", k, path, "binloop",
                            seeking.parts(k)[1]) for k in range(seeking.blocks)]
    finally:
        seeking.close()


def test_readers_with_a_stride_resume_anywhere_and_still_cut_the_same_chunks(
        tmp_path: Path) -> None:
    """A reader resumed from any position it reached hands out exactly the chunks it
    would have handed out next (so readers resumed at different offsets still agree)."""
    path = _telemetry(tmp_path / "in.jsonl", records=3000)
    with mock.patch.object(inputs, "READ_BYTES", 1 << 12):
        for mine in range(3):
            every = [_as_seen(c) for c in SeekingReader(str(path), 4, stride=(mine, 3))]
            assert len(every) > 10 and all(seen[1] % 3 == mine for seen in every)
            reader = SeekingReader(str(path), 4, stride=(mine, 3))
            for done in range(len(every)):
                resumed = SeekingReader(str(path), 4, resume=reader.position,
                                        stride=(mine, 3))
                assert [_as_seen(c) for c in resumed] == every[done:], done
                chunk = reader.next_chunk()
                if done % 2 and chunk is not None and chunk.lines_before is not None:
                    chunk.lines_before()  # counted this far (as for a dead letter): resumed


def test_stdin_is_not_shared() -> None:
    with pytest.raises(InputError, match="stdin cannot be shared"):
        SeekingReader("-", 4, stride=(0, 2))


def _telemetry(path: Path, records: int = 24_000) -> Path:
    """Several 1 MiB blocks, with invalid lines, blank lines and CR line ends among them;
    new tools all along (so events fire all along)."""
    lines = []
    for i in range(records):
        record = rec(1_700_000_000_000 + i * 7, tool=f"tool{i // 150}_{i % 4}",
                     mode=["ARGS.x", "TIMEOUT", None][i % 3], session=i // 500,
                     outcome="failure" if i % 5 else "success", args={"i": i, "pad": "p" * 40})
        lines.append(orjson.dumps(record))
        if i % 997 == 0:
            lines.append(b'{"tool": 5}')
        if i % 1499 == 0:
            lines.append(b"")
    data = b"\n".join(lines) + b"\n"
    cut = len(data) // 2
    path.write_bytes(data[:cut].replace(b"\n", b"\r\n", 50) + data[cut:])
    return path


@pytest.fixture(scope="module")
def telemetry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _telemetry(tmp_path_factory.mktemp("strided-flow") / "in.jsonl")


@pytest.fixture(scope="module")
def reference(telemetry: Path, tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    out = tmp_path_factory.mktemp("strided-ref") / "ref"
    return run_reference_on(engine_config(telemetry, out))


def test_worker_threads_that_read_their_own_share_agree(telemetry: Path, tmp_path: Path,
                                                         reference: Outcome) -> None:
    config = engine_config(telemetry, tmp_path / "w", workers=3)
    same_as_reference(run_bytewax_on(config, workers=3), reference)


@pytest.mark.slow
def test_two_processes_that_read_their_own_share_agree(telemetry: Path, tmp_path: Path,
                                                        reference: Outcome) -> None:
    config = engine_config(telemetry, tmp_path / "p", processes=2)
    same_as_reference(run_processes_on(config, processes=2, workers=1), reference)


def test_a_crash_and_a_resume_count_every_record_once(telemetry: Path, tmp_path: Path,
                                                       reference: Outcome) -> None:
    """Two strided readers with recovery, 64 KiB chunks, an epoch per chunk; the parse
    step fails at the 25th chunk (after snapshots were taken), then the dataflow resumes
    from the store: the events are the reference's, none written twice, none missing."""
    from bytewax.recovery import RecoveryConfig, init_db_dir
    from bytewax.testing import cluster_main

    from binloop.core.block_parse import BlockParser
    from flows.detect import build_flow

    store = tmp_path / "store"
    store.mkdir()
    init_db_dir(store, 2)
    config = engine_config(telemetry, tmp_path / "c", workers=2,
                           summary_out=str(tmp_path / "summary.json"))
    real_parse = BlockParser.parse
    calls = {"n": 0}

    def failing_parse(self: BlockParser, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 25:
            raise RuntimeError("injected crash")
        return real_parse(self, *args, **kwargs)

    recovery = RecoveryConfig(str(store))
    with mock.patch.object(inputs, "READ_BYTES", 1 << 16):
        with mock.patch.object(BlockParser, "parse", failing_parse), \
                pytest.raises(Exception, match="parse") as crash:
            cluster_main(build_flow(config), [], 0, epoch_interval=timedelta(0),
                         recovery_config=recovery, worker_count_per_proc=2)
        causes, cause = [], crash.value
        while cause is not None:
            causes.append(repr(cause))
            cause = cause.__cause__
        assert "injected crash" in " ".join(causes)
        before = read_jsonl(config.out)
        assert 0 < len(before) < len(reference.events)  # the crash came mid-way
        cluster_main(build_flow(config), [], 0, epoch_interval=timedelta(0),
                     recovery_config=recovery, worker_count_per_proc=2)
    after = read_jsonl(config.out)
    assert by_event_id(after) == by_event_id(reference.events)



def test_binloop_detect_with_two_processes_runs_process_0_in_place(
        telemetry: Path, tmp_path: Path, reference: Outcome) -> None:
    """The real command: process 1 is started first, process 0 runs in the command's own
    process; same events and dead letters as the reference engine, exit 0."""
    import subprocess
    import sys

    out, dead = tmp_path / "events.jsonl", tmp_path / "dead.jsonl"
    done = subprocess.run([sys.executable, "-m", "binloop.cli", "detect", "--input",
                           str(telemetry), "--out", str(out), "--dead-letter", str(dead),
                           "--engine", "bytewax", "--processes", "2", "--no-progress"],
                          capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr  # invalid lines are dead letters, not an error
    assert by_event_id(read_jsonl(str(out))) == by_event_id(reference.events)
    assert sorted(map(str, read_jsonl(str(dead)))) == sorted(map(str, reference.dead))


def test_a_peer_that_fails_is_reported_while_process_0_waits() -> None:
    import subprocess
    import sys
    import threading

    from binloop.ops.cluster import watch_peers

    peer = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    seen: list[int] = []
    called = threading.Event()
    watch_peers([peer], lambda code: (seen.append(code), called.set()))
    assert called.wait(30) and seen == [3]


def test_detect_beside_another_thread_starts_its_peer_as_a_process_of_its_own(
        telemetry: Path, tmp_path: Path, reference: Outcome) -> None:
    """A caller with a thread running cannot fork (the thread's locks would be copied
    held): `detect` then starts `python -m bytewax.run` peers; the same events."""
    import threading

    from binloop.cli.commands.detect import detect
    from binloop.ops.cluster import can_fork

    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not can_fork()
        config = engine_config(telemetry, tmp_path / "t", processes=2, engine="bytewax")
        summary = detect(config)
    finally:
        stop.set()
        other.join()
    assert by_event_id(read_jsonl(config.out)) == by_event_id(reference.events)
    assert summary.records_read == reference.counters["records_read"]


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(lines=st.lists(st.tuples(LINE_BODIES, st.sampled_from([b"\n", b"\r\n", b"\r"])),
                      max_size=40),
       last=LINE_BODIES, block_bytes=st.integers(1, 120), max_line=st.sampled_from([8, 1000]))
def test_a_sole_reader_gives_the_same_lines_whatever_its_block_size(
        tmp_path_factory: pytest.TempPathFactory, lines: list[tuple[bytes, bytes]],
        last: bytes, block_bytes: int, max_line: int) -> None:
    """A sole reader's blocks (`block_bytes`) only cut its chunks otherwise: the lines,
    rejects and line numbers are those of READ_BYTES blocks."""
    path = tmp_path_factory.mktemp("sole") / "in.jsonl"
    path.write_bytes(b"".join(body + end for body, end in lines) + last)
    options = ReadOptions(max_line_bytes=max_line)
    sized = InputReader(str(path), 4, "p", None, "auto", options, whole_blocks=True,
                        block_bytes=block_bytes)
    assert _flat(list(sized)) == _flat(_one_reader(str(path), options))


def test_the_file_source_of_one_worker_reads_sole_reader_blocks(tmp_path: Path) -> None:
    from flows.file_source import TelemetryFileSource

    path = tmp_path / "in.jsonl"
    records = [orjson.dumps(rec(1_700_000_000_000 + i, args={"pad": "x" * (i % 90)}))
               for i in range(30_000)]
    path.write_bytes(b"\n".join(records) + b"\n")
    partition = TelemetryFileSource(str(path)).build_part("in", f"file:{path}", None)
    chunks: list[RawChunk] = []
    with pytest.raises(StopIteration):
        while True:
            chunks.extend(partition.next_batch())
    assert len(path.read_bytes()) > 2 * inputs.READ_BYTES
    # (a chunk holds the lines that end in its block: at most one line more than a block)
    longest = max(map(len, records)) + 1
    assert max(len(c.block or b"") for c in chunks) <= inputs.SOLE_READER_BLOCK_BYTES + longest
    assert len(chunks) > len(_one_reader(str(path), ReadOptions()))
    assert _flat(chunks) == _flat(_one_reader(str(path), ReadOptions()))
