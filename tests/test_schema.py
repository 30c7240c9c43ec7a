from __future__ import annotations

import json
import time

import orjson
import pytest

from binloop.core.schema import (
    InvalidRecord,
    RecordLimits,
    dumps_record,
    parse_record,
    record_id,
)

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
        (line(failure_mode=["ARGS"]), "failure_mode must be"),
        (line(failure_mode={"ARGS": 1}), "failure_mode must be"),
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


# The hot path (`_already_normal`) must never accept what the full validator would
# change or reject.
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from binloop.core.schema import (  # noqa: E402
    DEFAULT_LIMITS,
    RecordParser,
    _already_normal,
    _normalise,
)

ANY_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-5, 2**62), st.text(max_size=5),
                       st.floats(allow_nan=False))
FIELD_VALUES: dict[str, Any] = {
    "id": st.one_of(st.just("ab" * 32), st.just("AB" * 32), st.just("xy" * 32), ANY_SCALAR),
    "session_id": st.one_of(st.integers(-3, 10), st.text(max_size=3), ANY_SCALAR),
    "ts": st.one_of(st.integers(-1, 1_800_000_000_000), st.just(2**60), ANY_SCALAR),
    "tool": st.one_of(st.text(max_size=4), st.just("x" * 257), ANY_SCALAR),
    "args": st.one_of(st.dictionaries(st.text(max_size=3), st.integers()), ANY_SCALAR),
    "outcome": st.sampled_from(["success", "FAILURE", "timeout", "cancelled", "nope", None, 3]),
    "failure_mode": st.sampled_from([None, "ARGS.x", "args.x", "ARGS", "BAD.x", "ARGS..x", 5,
                                     ["ARGS"], {"ARGS": 1}]),
    "duration_ms": st.one_of(st.integers(-2, 10), ANY_SCALAR),
    "agent_id": ANY_SCALAR,
    "error": st.one_of(ANY_SCALAR, st.just("e" * 5000)),
    "extra": ANY_SCALAR,
    "args2": ANY_SCALAR,
}


NORMAL = {**GOOD, "outcome": "failure", "failure_mode": "ARGS.x", "id": "ab" * 32,
          "agent_id": "a"}


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    """A normal record with a few fields changed or removed."""
    changed = draw(st.sets(st.sampled_from(sorted(FIELD_VALUES)), max_size=2))
    removed = draw(st.sets(st.sampled_from(sorted(NORMAL)), max_size=1))
    obj = {k: v for k, v in NORMAL.items() if k not in removed}
    return {**obj, **{name: draw(FIELD_VALUES[name]) for name in changed}}


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None, max_examples=300)
@given(records())
def test_hot_path_agrees_with_the_full_validator(obj: dict[str, Any]) -> None:
    for mode in ("ARGS.x", "ARGS"):  # make the failure-mode cache warm, as in a stream
        _normalise({**GOOD, "failure_mode": mode}, DEFAULT_LIMITS, 100)
    fast = _already_normal(obj, DEFAULT_LIMITS)
    if fast is not None:
        assert fast == _normalise(dict(obj), DEFAULT_LIMITS, 100)


def test_hot_path_takes_normal_records() -> None:
    _normalise(dict(NORMAL), DEFAULT_LIMITS, 100)
    assert _already_normal(dict(NORMAL), DEFAULT_LIMITS) == NORMAL
    assert _already_normal({**NORMAL, "outcome": "FAILURE"}, DEFAULT_LIMITS) is None


def record_or_reason(parse: Callable[[bytes], Any], raw: bytes) -> object:
    """What `parse` gives for `raw`: the record, or the reason it refuses it."""
    try:
        return parse(raw)
    except InvalidRecord as exc:
        return str(exc)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None, max_examples=300)
@given(records())
def test_record_parser_is_parse_record(obj: dict[str, Any]) -> None:
    """The per-chunk parser gives what `parse_record` gives (record or reason)."""
    raw = json.dumps(obj).encode()  # orjson refuses ints beyond 64 bits; a producer may not
    parser = RecordParser(DEFAULT_LIMITS)
    expected = record_or_reason(parse_record, raw)
    for _ in range(2):  # cold, then with the failure-mode cache warm
        assert record_or_reason(parser.parse, raw) == expected


@st.composite
def records_without_id(draw: st.DrawFn) -> dict[str, Any]:
    """A record as `records` draws it, mostly without its `id` (telemetry of other writers)."""
    obj = draw(records())
    if draw(st.integers(0, 3)):
        obj.pop("id", None)
    return obj


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None, max_examples=400)
@given(records_without_id(), st.sampled_from(["given", "given-else-infer", "infer"]))
def test_parse_counted_is_parse_record(obj: dict[str, Any], failure_modes: str) -> None:
    """The counted records' parser gives what `parse_record` gives (record, its encoding,
    or reason), with and without failure-mode inference."""
    limits = RecordLimits(failure_modes=failure_modes)
    raw = json.dumps(obj).encode()
    expected = record_or_reason(lambda line: parse_record(line, limits), raw)
    parser = RecordParser(limits)
    for _ in range(2):  # cold, then with the failure-mode cache warm
        got = record_or_reason(parser.parse_counted, raw)
        assert got == expected
        if isinstance(got, dict):
            assert dumps_record(got) == dumps_record(expected)  # type: ignore[arg-type]


def test_parse_counted_takes_a_normal_line_without_id_as_read() -> None:
    body = {k: v for k, v in NORMAL.items() if k != "id"}
    parser = RecordParser(DEFAULT_LIMITS)
    parser.parse_counted(orjson.dumps(body))  # the first of a failure mode validates it
    got = parser.parse_counted(orjson.dumps(body))
    assert list(got) == [*body, "id"]  # the line's own dict, not a normalised copy
    assert got == parse_record(orjson.dumps(body))
