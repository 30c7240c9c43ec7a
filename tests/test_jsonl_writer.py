from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from binloop.replay import jsonl
from binloop.replay.jsonl import JsonlFileWriter, event_key


def ev(event_id: str) -> bytes:
    return orjson.dumps({"event_id": event_id, "tool": "t"})


def test_event_ids_already_in_the_file_are_not_written_again(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = JsonlFileWriter(path, event_key)
    assert writer.write([ev("a"), ev("b"), ev("a")]) == 2
    writer.close()
    again = JsonlFileWriter(path, event_key)
    assert again.write([ev("b"), ev("c")]) == 1
    again.close()
    assert [orjson.loads(x)["event_id"] for x in path.read_bytes().splitlines()] == ["a", "b", "c"]


def test_keyed_lines_are_skipped_as_their_keys_say(tmp_path: Path) -> None:
    """`write_keyed` skips what `write` skips (keys read back from the file, or written
    before), with keys given rather than read from the lines."""
    path = tmp_path / "events.jsonl"
    writer = JsonlFileWriter(path, event_key)
    assert writer.write_keyed([("a", ev("a")), ("b", ev("b")), ("a", ev("a"))]) == 2
    writer.close()
    again = JsonlFileWriter(path, event_key)
    assert again.write_keyed([("b", ev("b")), ("c", ev("c")), (None, ev("c"))]) == 2
    assert again.write([ev("c"), ev("d")]) == 1
    again.close()
    assert [orjson.loads(x)["event_id"] for x in path.read_bytes().splitlines()] == \
        ["a", "b", "c", "c", "d"]


def test_the_keyed_dataflow_sink_writes_each_key_once(tmp_path: Path) -> None:
    from sinks.jsonl_file import JsonlFileSink

    path = tmp_path / "events.jsonl"
    part = JsonlFileSink(path, event_key, keyed=True).build_part("s", str(path), None)
    part.write_batch([("a", ev("a")), ("a", ev("a")), ("b", ev("b"))])
    part.close()
    part = JsonlFileSink(path, event_key, keyed=True).build_part("s", str(path), None)
    part.write_batch([("b", ev("b")), ("c", ev("c"))])
    part.close()
    assert path.read_bytes().splitlines() == [ev("a"), ev("b"), ev("c")]


def test_a_torn_last_line_is_cut_on_open(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(ev("a") + b"\n" + b'{"event_id": "b", "to')
    writer = JsonlFileWriter(path, event_key)
    writer.write([ev("b")])
    writer.close()
    assert path.read_bytes() == ev("a") + b"\n" + ev("b") + b"\n"


def test_resume_offset_truncates_what_followed_the_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = JsonlFileWriter(path, event_key)
    writer.write([ev("a")])
    offset = writer.offset()
    writer.write([ev("b")])
    writer.close()
    resumed = JsonlFileWriter(path, event_key, resume_offset=offset)
    assert "b" not in resumed.keys
    assert resumed.write([ev("b")]) == 1
    resumed.close()
    assert path.read_bytes().count(b'"b"') == 1


def test_lines_are_streamed_across_block_boundaries(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonl, "READ_BLOCK_BYTES", 7)
    lines = [ev(str(i) * (i % 5 + 1)) for i in range(40)] + [b"", ev("tail")]
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines) + b'{"event_id": "torn"')
    with open(path, "rb") as file:
        end = jsonl.complete_end(file, path.stat().st_size)
        assert end == path.stat().st_size - len(b'{"event_id": "torn"')
        assert list(jsonl.stream_lines(file, end)) == lines
        # a line longer than the bound is skipped whole, the others are kept
        assert list(jsonl.stream_lines(file, end, max_bytes=len(ev("3")))) == [
            line for line in lines if len(line) <= len(ev("3"))]
    writer = JsonlFileWriter(path, event_key)
    assert len(writer.keys) == 41 and "tail" in writer.keys and "torn" not in writer.keys
    assert writer.write([ev("tail"), ev("torn"), ev("0")]) == 1
    writer.close()


def test_an_oversized_line_is_not_indexed(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonl, "INDEX_LINE_MAX_BYTES", 64)
    path = tmp_path / "events.jsonl"
    big = orjson.dumps({"event_id": "big", "pad": "x" * 200})
    path.write_bytes(ev("a") + b"\n" + big + b"\n" + ev("b") + b"\n")
    writer = JsonlFileWriter(path, event_key)
    assert ("a" in writer.keys, "big" in writer.keys, "b" in writer.keys) == (True, False, True)
    writer.close()


def test_a_file_without_a_newline_is_cut_to_nothing(tmp_path: Path) -> None:
    path = tmp_path / "dead.jsonl"
    path.write_bytes(b"x" * 5000)
    writer = JsonlFileWriter(path)
    writer.write([b"y"])
    writer.close()
    assert path.read_bytes() == b"y\n"


def test_the_dataflow_sink_fsyncs_at_each_snapshot_not_each_batch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches are flushed (a reader sees them) but fsynced only when the epoch's offset
    is snapshotted and at the end: what a recovery snapshot claims is on disk."""
    import os

    from sinks.jsonl_file import JsonlFileSink

    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    path = tmp_path / "events.jsonl"
    part = JsonlFileSink(path).build_part("s", str(path), None)
    for n in range(5):
        part.write_batch([b'{"n": %d}' % n])
    assert path.read_bytes().count(b"\n") == 5 and not synced  # flushed, not yet synced
    assert part.snapshot() == path.stat().st_size
    assert len(synced) == 1
    part.write_batch([b'{"n": 5}'])
    part.close()
    assert len(synced) == 2 and path.read_bytes().count(b"\n") == 6
