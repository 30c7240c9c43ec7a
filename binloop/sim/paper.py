"""The paper's published figures that the benchmarks hold the product against."""

from __future__ import annotations

from typing import Final

# θ sweep, 500 simulated sessions, 50 injected pairs (paper, Evaluation).
PAPER_SWEEP: Final = (
    {"theta": 2, "precision": 0.81, "recall": 0.95, "f1": 0.87, "builds_per_session": 2.3},
    {"theta": 3, "precision": 0.94, "recall": 0.89, "f1": 0.91, "builds_per_session": 1.1},
    {"theta": 4, "precision": 0.97, "recall": 0.72, "f1": 0.83, "builds_per_session": 0.6},
    {"theta": 5, "precision": 0.99, "recall": 0.58, "f1": 0.73, "builds_per_session": 0.3},
)
PAPER_SESSIONS: Final = 500
PAPER_PAIRS: Final = 50

# Backlog (paper, Formal Analysis): BIN peaks at 2 and is 0 by session 100; deferral 47.
PAPER_BIN_PEAK: Final = 2
PAPER_DEFERRAL_AT_100: Final = 47
