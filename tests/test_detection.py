"""The detection semantics of DESIGN.md on hand-made streams (the reference engine)."""

from __future__ import annotations

from binloop.core.detection import DetectionParams, Detector, SessionWindows, detect
from binloop.core.events import event_id
from binloop.core.window import WindowSpec
from tests.helpers import rec

MIN = 60_000


def params(**kw: object) -> DetectionParams:
    return DetectionParams(**kw)  # type: ignore[arg-type]


def test_fires_once_at_theta_then_disarmed() -> None:
    stream = [rec(i * 1000, args={"i": i}) for i in range(6)]
    events = detect(params(theta=3), stream)
    assert len(events) == 1
    event = events[0]
    assert event["count"] == 3
    assert event["fired_ts"] == 2000 and event["first_ts"] == 0
    assert [r["ts"] for r in event["evidence"]] == [0, 1000, 2000]
    assert event["event_id"] == event_id("t", "ARGS.x", 0, params(theta=3).config_digest)
    assert event["config"]["theta"] == 3 and event["window"] == "session"


def test_successes_and_modeless_failures_do_not_count() -> None:
    stream = [rec(1, outcome="success"), rec(2, mode=None), rec(3, outcome="cancelled"),
              rec(4, args={"n": 1}), rec(5, args={"n": 2})]
    assert detect(params(theta=3), stream) == []
    assert len(detect(params(theta=2), stream)) == 1


def test_timeout_counts_by_default_but_is_configurable() -> None:
    stream = [rec(i, outcome="timeout", args={"i": i}) for i in range(3)]
    assert len(detect(params(theta=3), stream)) == 1
    assert detect(params(theta=3, count_outcomes=frozenset({"failure"})), stream) == []


def test_mode_level_merges_finer_modes() -> None:
    stream = [rec(1, mode="ARGS.a"), rec(2, mode="ARGS.b"), rec(3, mode="ARGS.c")]
    assert detect(params(theta=3), stream) == []
    (event,) = detect(params(theta=3, mode_level=1), stream)
    assert event["failure_mode"] == "ARGS"


def test_session_window_counts_per_session() -> None:
    stream = [rec(1, session=1), rec(2, session=2), rec(3, session=1), rec(4, session=2)]
    assert detect(params(theta=3), stream) == []
    (event,) = detect(params(theta=3), [*stream, rec(5, session=2)])
    assert event["session_id"] == 2 and event["count"] == 3


def test_session_slice_restarts_after_the_gap() -> None:
    gap = 30 * MIN
    stream = [rec(0), rec(MIN), rec(MIN + gap + 1), rec(MIN + gap + 2)]
    assert detect(params(theta=3), stream) == []
    # exactly the gap after the newest ts is still the same slice
    assert len(detect(params(theta=3), [rec(0), rec(MIN), rec(MIN + gap)])) == 1


def test_session_slice_dies_when_the_key_moves_on() -> None:
    gap = 30 * MIN
    # session 1's slice [0] is dead once the key's newest ts (session 2) passes 0 + gap,
    # so an out-of-order record of session 1 at ts 10 starts a new slice.
    stream = [rec(0, session=1), rec(gap + 1, session=2), rec(10, session=1), rec(20, session=1)]
    assert detect(params(theta=3), stream) == []


def test_global_window_counts_across_sessions_and_time() -> None:
    stream = [rec(0, session=1), rec(10**9, session=2), rec(2 * 10**9, session=3)]
    (event,) = detect(params(theta=3, window=WindowSpec("global")), stream)
    assert event["count"] == 3 and event["session_id"] == 3


def test_sliding_window_counts_records_within_d() -> None:
    window = WindowSpec.parse("sliding:10s")
    stream = [rec(0), rec(5_000), rec(10_000), rec(14_000)]
    # at 10_000 the window (0, 10_000] holds 5_000 and 10_000: count 2; at 14_000 it is 3
    (event,) = detect(params(theta=3, window=window), stream)
    assert event["fired_ts"] == 14_000 and event["count"] == 3 and event["first_ts"] == 5_000


def test_sliding_window_out_of_order_and_late() -> None:
    window = WindowSpec.parse("sliding:10s")
    detector = Detector(params(theta=3, window=window))
    statuses = [detector.observe(r).status for r in
                [rec(20_000), rec(9_000), rec(12_000), rec(19_000)]]
    # 9_000 is more than 10s older than 20_000: late. 12_000 counts (12_000 alone in
    # (2_000, 12_000]); 19_000 sees (9_000, 19_000] = {12_000, 19_000}: 2.
    assert statuses == ["counted", "late", "counted", "counted"]
    assert detector.observe(rec(18_000)).status == "counted"  # (8_000, 18_000]: 12k, 18k
    seen = detector.observe(rec(19_500))
    # (9_500, 19_500] holds 12k, 19k, 18k and itself: the count jumps past theta to 4
    assert seen.status == "fired" and seen.event is not None
    assert seen.event["count"] == 4 and seen.event["first_ts"] == 12_000
    assert [r["ts"] for r in seen.event["evidence"]] == [12_000, 19_000, 18_000, 19_500]


def test_duplicates_count_once() -> None:
    same = rec(5)
    stream = [same, same, same, rec(6)]
    assert detect(params(theta=3), stream) == []
    detector = Detector(params(theta=3))
    assert [detector.observe(r).status for r in stream] == ["counted", "duplicate", "duplicate",
                                                             "counted"]


def test_rearm_gives_a_new_epoch_and_event_id() -> None:
    detector = Detector(params(theta=2))
    first = [detector.observe(rec(i)).event for i in range(3)]
    assert first[1] is not None and first[2] is None
    key = ("t", "ARGS.x")
    assert detector.rearm(key, fired_epoch=0)
    assert not detector.rearm(key, fired_epoch=0)  # idempotent
    again = [detector.observe(rec(10 + i)).event for i in range(2)]
    assert again[1] is not None and again[1]["arm_epoch"] == 1
    assert again[1]["event_id"] != first[1]["event_id"]


def test_disarm_from_library_suppresses() -> None:
    detector = Detector(params(theta=1))
    detector.disarm(("t", "ARGS.x"))
    assert detector.observe(rec(1)).status == "disarmed"


def test_evidence_is_bounded_newest_last() -> None:
    stream = [rec(i) for i in range(5)]
    (event,) = detect(params(theta=5, evidence_max=2), stream)
    assert [r["ts"] for r in event["evidence"]] == [3, 4]


def test_state_of_a_key_stays_bounded_on_its_own_clock() -> None:
    detector = Detector(params(theta=3))
    for i in range(20_000):  # one failure per session, an hour apart: slices die
        detector.observe(rec(i * 60 * MIN, session=i))
    window = detector.keys[("t", "ARGS.x")].window
    assert isinstance(window, SessionWindows) and len(window.slices) <= 2
    assert len(detector.keys[("t", "ARGS.x")].recent_ids) == 64  # dedup_max


def test_a_skewed_record_of_another_key_changes_no_event() -> None:
    stream = [rec(i * MIN, session=i // 3) for i in range(24)]
    skewed = rec(23 * 60 * MIN, tool="clock_runs_ahead", mode="NETWORK.x")
    behind = rec(0, tool="clock_runs_behind", mode="NETWORK.x")
    expected = detect(params(theta=3), stream)
    assert len(expected) == 1
    for position in (0, 1, 5, 23):
        skew_stream = [*stream[:position], skewed, behind, *stream[position:]]
        assert detect(params(theta=3), skew_stream) == expected


def test_beyond_lateness_is_measured_against_the_key_s_own_newest_ts() -> None:
    detector = Detector(params(theta=10, allowed_lateness_ms=MIN))
    detector.observe(rec(100 * MIN, tool="ahead"))
    detector.observe(rec(10 * MIN))
    detector.observe(rec(8 * MIN))  # 2 min behind its key's newest: beyond
    detector.observe(rec(9 * MIN + 1))  # within a minute
    assert detector.stats.beyond_lateness == 1

