"""The pull consumer's bookkeeping, shared by the nats-py and the wire reader."""

from __future__ import annotations

import orjson

from binloop.nats.pull_protocol import Delivery, PullSettings, PullTracker, split_envelope


def tracker(position: int = 0, batch: int = 4) -> PullTracker:
    return PullTracker("TELEMETRY", position, "p0", PullSettings(batch=batch, max_bytes=100))


def test_requests_keep_one_to_two_batches_in_flight() -> None:
    pull = tracker(batch=4)
    assert [orjson.loads(r)["batch"] for r in pull.requests()] == [4]
    assert pull.requests() == []
    for dseq in range(1, 4):  # three of four delivered: credit 1 < batch
        pull.arrive(dseq, dseq)
    assert len(pull.requests()) == 1


def test_sequences_new_seen_and_gap() -> None:
    pull = tracker(position=5)
    assert pull.arrive(4, 1) == "seen"  # before the position: a redelivery
    assert pull.arrive(6, 2) == "new"
    assert pull.arrive(9, 4) == "gap"  # consumer seq 3 never came
    pull.restart()
    assert pull.arrive(7, 1) == "new"


def test_a_request_that_ended_returns_its_credit_and_maxbytes_asks_for_one() -> None:
    pull = tracker(batch=4)
    pull.requests()
    assert pull.status("409", "Message Size Exceeds MaxBytes", 4)
    requests = [orjson.loads(r) for r in pull.requests()]
    assert requests[0] == {"batch": 1, "expires": 30_000_000_000,
                           "idle_heartbeat": 1_000_000_000}
    assert [r["batch"] for r in requests[1:]] == [4]
    assert pull.status("100", "Idle Heartbeat", 0)
    assert not pull.status("409", "Consumer Deleted", 0)


def test_take_records_envelopes_and_rejects() -> None:
    pull, out = tracker(), Delivery()
    pull.take(out, 3, b'{"a":1}', None)
    pull.take(out, 4, b'{"a":2}\r\n{"a":3}\n', "JSONL")
    pull.take(out, 7, b"zzz", "gzip")
    assert out.items == [b'{"a":1}', b'{"a":2}', b'{"a":3}']
    assert (out.first_seq, out.last_seq, out.messages, pull.position) == (3, 7, 3, 7)
    assert len(out.rejects) == 1 and "unknown Binloop-Batch encoding 'gzip'" in \
        out.rejects[0].reason and out.rejects[0].position == "stream seq 7"


def test_an_empty_message_is_a_reject_not_a_blank_line() -> None:
    pull, out = tracker(), Delivery()
    pull.take(out, 1, b"", None)
    pull.take(out, 2, b" \r\n", None)
    pull.take(out, 3, b"\n", "jsonl")
    pull.take(out, 4, b'{"a":1}', None)
    assert out.items == [b'{"a":1}'] and out.messages == 4
    assert [(d.reason, d.position) for d in out.rejects] == [
        ("empty message: no record", "stream seq 1"),
        ("empty message: no record", "stream seq 2"),
        ("empty Binloop-Batch envelope: no record", "stream seq 3")]


def test_a_byte_order_mark_before_a_record_is_removed() -> None:
    """As in a file (binloop.replay.readers): a Windows-written line stays a record."""
    bom = b"\xef\xbb\xbf"
    pull, out = tracker(), Delivery()
    pull.take(out, 1, bom + b'{"a":1}', None)
    pull.take(out, 2, bom + b'{"a":2}\r\n' + bom + b'{"a":3}\n{"a":4}', "jsonl")
    pull.take(out, 3, bom, None)  # nothing but a mark: an empty message
    assert out.items == [b'{"a":1}', b'{"a":2}', b'{"a":3}', b'{"a":4}']
    assert [d.reason for d in out.rejects] == ["empty message: no record"]
    assert split_envelope(b'{"a":1}\n\xef\xbb\xbf{"b":2}\n') == [b'{"a":1}', b'{"b":2}']


def test_consumer_config_starts_after_the_position() -> None:
    config = tracker(position=41).consumer_config(["a.>", "b.>"]).as_dict()
    assert config["opt_start_seq"] == 42 and config["filter_subjects"] == ["a.>", "b.>"]
    assert "filter_subject" not in config
    assert tracker().consumer_config(["a.>"]).as_dict()["filter_subject"] == "a.>"
    # The API form, through nats-py's own enums: what the wire reader sends.
    assert orjson.loads(orjson.dumps(config))["deliver_policy"] == "by_start_sequence"
    assert (config["ack_policy"], config["replay_policy"]) == ("none", "instant")
    assert config["inactive_threshold"] == 30_000_000_000


def test_stale_after_a_reconnect_or_three_silent_heartbeats() -> None:
    pull = tracker()
    assert pull.stale(reconnected=True, connected=True)
    assert not pull.stale(reconnected=False, connected=True)
    pull.last_activity -= 3.5
    assert pull.stale(reconnected=False, connected=True)
    assert not pull.stale(reconnected=False, connected=False)  # the client reconnects first


def test_caught_up_only_when_all_delivered_arrived() -> None:
    pull = tracker()
    pull.arrive(1, 1)
    assert pull.caught_up(num_pending=0, delivered=1)
    assert not pull.caught_up(num_pending=0, delivered=2)
    assert not pull.caught_up(num_pending=3, delivered=1)
    assert split_envelope(b"x\ny\n") == [b"x", b"y"]
