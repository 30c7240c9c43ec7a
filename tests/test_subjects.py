"""Subject tokens: any tool name or session id becomes one safe, stable token."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from binloop.nats.subjects import (
    TOKEN_MAX_CHARS,
    event_subject,
    partition_filters,
    partition_transform,
    subject_token,
    telemetry_subject,
)

SAFE_TOKEN = re.compile(r"[A-Za-z0-9_\-%~]+")


@pytest.mark.parametrize(("value", "token"), [
    ("search", "search"),
    ("book.flight", "book%2Eflight"),
    ("get user", "get%20user"),
    ("café", "caf%C3%A9"),
    ("a*b>c", "a%2Ab%3Ec"),
    ("50%", "50%25"),
    (42, "42"),
])
def test_tokens_escape_everything_but_safe_characters(value: str | int, token: str) -> None:
    assert subject_token(value) == token


@given(st.text(min_size=1, max_size=300))
def test_any_text_is_one_bounded_token(text: str) -> None:
    token = subject_token(text)
    assert SAFE_TOKEN.fullmatch(token), token
    assert len(token) <= TOKEN_MAX_CHARS
    assert subject_token(text) == token


@given(st.text(min_size=1, max_size=60), st.text(min_size=1, max_size=60))
def test_distinct_names_give_distinct_tokens(a: str, b: str) -> None:
    if a != b:
        assert subject_token(a) != subject_token(b)


def test_long_names_keep_a_prefix_and_a_hash() -> None:
    long_a, long_b = "x" * 300, "x" * 299 + "y"
    assert subject_token(long_a) != subject_token(long_b)
    assert subject_token(long_a).startswith("xxxx") and "~" in subject_token(long_a)


def test_subject_layout() -> None:
    assert telemetry_subject("telemetry", 7, "book.flight") == "telemetry.7.book%2Eflight"
    assert event_subject("bin.events", "get user", "ARGS.bad_total") == \
        "bin.events.get%20user.ARGS.bad_total"
    src, dest = partition_transform("telemetry", 8)
    assert src == "telemetry.*.*"
    assert dest == "telemetry_p.{{partition(8,2)}}.{{wildcard(2)}}"
    # partition 0 also reads whatever was stored unpartitioned
    assert partition_filters("telemetry", 0) == ["telemetry_p.0.>", "telemetry.>"]
    assert partition_filters("telemetry", 3) == ["telemetry_p.3.>"]


def test_server_urls_are_shown_without_credentials() -> None:
    from binloop.nats.jetstream import redact_url

    assert redact_url("nats://alice:s3cret@nats-1:4222,nats://tok@nats-2:4222") == \
        "nats://***@nats-1:4222,nats://***@nats-2:4222"
    assert redact_url("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"


def test_every_subject_a_tools_records_may_be_stored_under() -> None:
    from binloop.nats.subjects import tool_filters

    assert tool_filters("telemetry", "book.flight") == [
        "telemetry_p.*.book%2Eflight", "telemetry_p.*.*.book%2Eflight", "telemetry.*.book%2Eflight"]
