"""Replay of the real tau-bench airline telemetry, with the events worked out by hand.

Failures per (tool, failure_mode) and session in the file (73 failures):
  book_reservation ARGS.payment_total_mismatch     s1 s12 s51 s59x3 s62 s76 s101 s110x5 ...
  update_reservation_flights CONFLICT.no_seats     s4 s16 s54 s66x2 s116 s166 s170
  update_reservation_flights CONFLICT.insufficient_balance  s4x3 s74x3 s124 s154 s174x3
  update_reservation_flights ARGS.certificate_not_allowed   s4 s71 s74 s174
  update_reservation_flights CONFLICT.flight_unavailable    s14x6 s64 s114x4 s134 s164x3
  update_reservation_flights NOTFOUND.payment_method        s27 s71 s127 s171
  book_reservation NOTFOUND.payment_method         s151x3
  (and four keys with one or two failures in all)
Each session lasts minutes, far less than the 30-minute gap, so a session slice is the
session. θ=3 per session fires the first session with 3 failures of a key; θ=2 also
fires no_seats in s66; the global window fires at a key's 3rd failure overall.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from binloop.core.config import Config
from binloop.core.detection import detect
from binloop.core.window import WindowSpec
from binloop.replay.ingest import parse_chunk
from binloop.replay.readers import InputReader

BOOK, UPDATE = "book_reservation", "update_reservation_flights"

SESSION_THETA_3 = {
    (UPDATE, "CONFLICT.insufficient_balance", 4),
    (UPDATE, "CONFLICT.flight_unavailable", 14),
    (BOOK, "ARGS.payment_total_mismatch", 59),
    (BOOK, "NOTFOUND.payment_method", 151),
}
SESSION_THETA_2 = SESSION_THETA_3 | {(UPDATE, "CONFLICT.no_seats", 66)}
GLOBAL_THETA_3 = {
    (UPDATE, "CONFLICT.insufficient_balance", 4),
    (UPDATE, "CONFLICT.flight_unavailable", 14),
    (BOOK, "ARGS.payment_total_mismatch", 51),
    (UPDATE, "CONFLICT.no_seats", 54),
    (UPDATE, "ARGS.certificate_not_allowed", 74),
    (UPDATE, "NOTFOUND.payment_method", 127),
    (BOOK, "NOTFOUND.payment_method", 151),
}
# mode_level=1 merges update_reservation_flights' CONFLICT.* modes: s4 has 1 no_seats +
# 3 insufficient_balance failures, so CONFLICT fires in s4; ARGS (payment_total_mismatch
# only, for book) fires in s59; NOTFOUND for book in s151; update's ARGS and NOTFOUND
# never reach 3 in one session.
MODE_LEVEL_1 = {(UPDATE, "CONFLICT", 4), (BOOK, "ARGS", 59), (BOOK, "NOTFOUND", 151)}


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, SESSION_THETA_3),
        ({"theta": 2}, SESSION_THETA_2),
        ({"window": WindowSpec("global")}, GLOBAL_THETA_3),
        ({"mode_level": 1}, MODE_LEVEL_1),
    ],
)
def test_tau_events_match_the_hand_count(tau_telemetry: Path, settings: dict[str, object],
                                         expected: set[tuple[str, str, int]]) -> None:
    config = Config(input=str(tau_telemetry)).replace(**settings)
    records = [r for chunk in InputReader(str(tau_telemetry), 4096)
               for r in parse_chunk(chunk).records]
    assert len(records) == 1164
    events = detect(config.detection(), records)
    assert {(e["tool"], e["failure_mode"], e["session_id"]) for e in events} == expected
    assert all(e["count"] == config.theta for e in events)
    assert all(len(e["evidence"]) == config.theta for e in events)
    assert all(r["outcome"] == "failure" for e in events for r in e["evidence"])
