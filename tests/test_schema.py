from __future__ import annotations

import time

import orjson
import pytest

from binloop.schema import InvalidRecord, RecordLimits, parse_record, record_id

GOOD = {"session_id": 7, "ts": 1_700_000_000_000, "tool": "book", "args": {"a": 1},
        "outcome": "FAILURE", "failure_mode": "args.total", "duration_ms": 12, "error": "bad"}


def line(**changes: object) -> bytes:
    return orjson.dumps({**GOOD, **changes})


def test_valid_record_is_normalised() -> None:
    rec = parse_record(line())
    assert rec["outcome"] == "failure"
    assert rec["failure_mode"] == "ARGS.total"
    assert rec["id"] == record_id(dict(rec))
    assert len(rec["id"]) == 64


def test_given_id_is_kept_and_checked() -> None:
    assert parse_record(line(id="A" * 64))["id"] == "a" * 64
    with pytest.raises(InvalidRecord, match="id must be"):
        parse_record(line(id="xyz"))


def test_same_content_same_id_whatever_the_case_of_outcome() -> None:
    assert parse_record(line(outcome="failure"))["id"] == parse_record(line())["id"]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"tool": "x"}', "missing field"),
        (line(ts="yesterday"), "ts must be"),
        (line(ts=True), "ts must be"),
        (line(outcome="exploded"), "outcome must be"),
        (line(tool=""), "tool name must be"),
        (line(tool="x" * 257), "tool name must be"),
        (line(args=[1]), "args must be"),
        (line(session_id=None), "missing field session_id"),
        (line(session_id=1.5), "session_id must be"),
        (line(duration_ms=-1), "duration_ms"),
        (line(failure_mode="BOGUS.x"), "taxonomy"),
        (line(failure_mode="ARGS..x"), "dot-separated"),
        (line(error=3), "error must be"),
        (b'{"tool": "\xff\xfe"}', "not JSON"),
        (line(ts=int(time.time() * 1000) + 10 * 86_400_000), "future"),
    ],
)
def test_invalid_records_give_a_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(InvalidRecord, match=reason):
        parse_record(raw)


def test_huge_args_are_truncated_not_rejected() -> None:
    rec = parse_record(line(args={"blob": "x" * 100_000}), RecordLimits(args_max_bytes=1000))
    assert rec["args"]["_truncated"] is True
    assert rec["args"]["_bytes"] > 100_000
    assert len(orjson.dumps(rec["args"])) < 1100


def test_oversized_line_rejected_before_parsing() -> None:
    with pytest.raises(InvalidRecord, match="exceeds"):
        parse_record(b" " * (2 << 20))


def test_extra_failure_codes_extend_the_taxonomy() -> None:
    limits = RecordLimits(taxonomy=frozenset({"ARGS", "QUOTA"}))
    assert parse_record(line(failure_mode="quota.daily"), limits)["failure_mode"] == "QUOTA.daily"
