"""Records of NATS messages handed to the parse step as runs of whole lines
(`PullSettings.runs`, `flows.nats_source.delivery_chunk`): the same lines, rejects,
counted records, dead letters and counters as when every message is cut into lines."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from binloop.core.block_parse import BlockParser
from binloop.core.detection import DetectionParams
from binloop.core.schema import DEFAULT_LIMITS, DeadLetter
from binloop.nats.pull_protocol import BOM, Delivery, PullSettings, PullTracker, envelope_run
from flows.nats_source import delivery_chunk
from flows.operators import IngestStats, ShardChunk, ShardRouter, _split_chunk

PARAMS = DetectionParams(theta=3)
COUNTS = frozenset({"failure", "timeout"})


def record(i: int, tool: str = "search", outcome: str = "failure") -> bytes:
    return orjson.dumps({"session_id": i // 7, "ts": 1_700_000_000_000 + i, "tool": tool,
                         "outcome": outcome, "args": {"i": i},
                         "failure_mode": "ARGS.bad" if outcome == "failure" else None})


Message = tuple[bytes, str | None]


def read(messages: list[Message], runs: bool) -> Delivery:
    tracker = PullTracker("TELEMETRY", 0, "p0", PullSettings(runs=runs))
    out = Delivery()
    for seq, (data, batch) in enumerate(messages, 1):
        tracker.take(out, seq, data, batch)
    return out


def parsed(delivery: Delivery) -> list[Any]:
    chunk = delivery_chunk(delivery, "TELEMETRY/0", 0, 0)
    return _split_chunk(chunk, BlockParser(COUNTS, DEFAULT_LIMITS), ShardRouter(PARAMS, 4))


PIECES = st.sampled_from([record(1), record(2, "fetch", "success"), record(3, "fetch"),
                          b"{oops", b"", b" ", b"\r", b"\n", BOM, b"\xff", b'{"tool": 1}'])
DATA = st.lists(PIECES, max_size=6).map(lambda parts: b"\n".join(parts)) | \
    st.lists(PIECES, max_size=4).map(b"".join)
MESSAGES = st.lists(st.tuples(DATA, st.sampled_from([None, "jsonl", " JSONL ", "gzip"])),
                    max_size=8)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(MESSAGES)
def test_runs_hold_the_same_lines_and_parse_the_same(messages: list[Message]) -> None:
    cut, runs = read(messages, False), read(messages, True)
    assert not cut.runs
    assert runs.lines() == cut.items and runs.records == cut.records == len(cut.items)
    assert (runs.rejects, runs.messages, runs.first_seq, runs.last_seq) == \
        (cut.rejects, cut.messages, cut.first_seq, cut.last_seq)
    if cut.records:
        assert parsed(runs) == parsed(cut)


def test_envelopes_reach_the_parse_step_uncut() -> None:
    envelopes = [(b"\n".join(record(i) for i in range(j, j + 100)) + b"\n", "jsonl")
                 for j in range(0, 300, 100)]
    delivery = read([*envelopes, (record(300), None)], True)
    chunk = delivery_chunk(delivery, "TELEMETRY/0", 5, 2)
    assert chunk.items == [] and chunk.block is not None and chunk.count == 301
    assert chunk.ends.tolist() == [i for i, byte in enumerate(chunk.block) if byte == 0x0A]
    assert (chunk.seq, chunk.start_seq, chunk.source) == (5, 2, "nats:TELEMETRY/0@1-4")
    stats = [x for x in parsed(delivery) if isinstance(x, IngestStats)]
    assert stats == [IngestStats(301, 301, 0, 1_700_000_000_300)]


def test_a_bad_line_in_a_run_is_dead_lettered_with_its_reason_and_position() -> None:
    good = b"\n".join(record(i) for i in range(5))
    bad = b"\n".join([record(5), b'{"session_id": 1, "tool": "x"', record(6)])
    messages: list[Message] = [(good, "jsonl"), (bad, "jsonl"), (b"zz", "gzip")]
    runs, cut = read(messages, True), read(messages, False)
    got, expected = parsed(runs), parsed(cut)
    assert got == expected
    dead = [x for x in got if isinstance(x, DeadLetter)]
    assert [(d.position, d.source) for d in dead] == [("7", "nats:TELEMETRY/0@1-3")]
    assert "JSON" in dead[0].reason or "json" in dead[0].reason
    counted = sum(len(x[1].records) for x in got if isinstance(x, tuple)
                  and isinstance(x[1], ShardChunk))
    assert counted == 7
    assert [IngestStats(8, 7, 1, 1_700_000_000_006)] == \
        [x for x in got if isinstance(x, IngestStats)]
    assert [r.reason.split(" ")[:2] for r in runs.rejects] == [["unknown", "Binloop-Batch"]]


def test_a_record_holding_a_newline_cuts_the_delivery_into_lines() -> None:
    pretty = orjson.dumps(orjson.loads(record(9)), option=orjson.OPT_INDENT_2)
    messages: list[Message] = [(record(1) + b"\n" + record(2), "jsonl"), (pretty, None),
                               (record(3), None)]
    runs = read(messages, True)
    assert not runs.runs and runs.items == [record(1), record(2), pretty, record(3)]
    assert delivery_chunk(runs, "p", 0, 0).items == runs.items


def test_envelope_run_is_the_envelope_split_and_joined() -> None:
    assert envelope_run(b"a\nb\n") == b"a\nb"
    assert envelope_run(b"a\r\n" + BOM + b"b") == b"a\nb"
    assert envelope_run(b"a\n\nb") == b"a\n\nb"
