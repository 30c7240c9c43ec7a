from __future__ import annotations

from pathlib import Path

import orjson

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
