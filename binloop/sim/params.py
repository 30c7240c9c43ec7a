"""The simulator's parameters (`binloop simulate` flags): each knob and its default, once.

Kept apart from `binloop.sim.simulate` so that building the command line imports no polars.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Final

PROFILES: Final = ("paper", "bulk", "distinct")
DEFAULT_START_TS: Final = 1_700_000_000_000  # 2023-11-14T22:13:20Z


@dataclass(frozen=True)
class SimParams:
    """Every knob of the simulator (see the module docstring for what each one does)."""

    profile: str = "paper"
    seed: int = 0
    sessions: int = 500
    pairs: int = 50
    records: int | None = None
    calls_min: int = 8
    calls_max: int = 32
    call_gap_s: tuple[int, int] = (1, 20)
    session_spacing_s: int = 60
    rate_min: float = 0.01
    rate_max: float = 0.12
    onset_max: float = 0.5
    burst_min: float = 1.3
    burst_max: float = 3.5
    noise_rate: float = 0.005
    noise_retry: float = 0.2
    unclassified_rate: float = 0.003
    cancelled_rate: float = 0.005
    secret_rate: float = 0.02
    keys: int = 1000
    session_repeat: float = 0.5
    failure_rate: float | None = None
    calls_per_session: int = 20
    record_gap_ms: int = 2000
    agents: int = 8
    start_ts: int = DEFAULT_START_TS
    # `text`: write failures without their failure_mode, only the error text, so that a
    # sweep measures what inferring the modes costs against the same file with `given`.
    modes: str = "given"

    def __post_init__(self) -> None:
        if self.modes not in ("given", "text"):
            raise ValueError(f"modes {self.modes!r} is not one of given, text")
        from binloop.sim.catalogue import ALL_MODES, TOOL_NAMES  # polars: not for --help

        if self.profile not in PROFILES:
            raise ValueError(f"profile {self.profile!r} is not one of {', '.join(PROFILES)}")
        if self.sessions < 1 or self.pairs < 0 or self.calls_min < 1:
            raise ValueError("sessions and calls_min must be >= 1, pairs >= 0")
        if self.calls_max < self.calls_min or self.burst_max < self.burst_min:
            raise ValueError("calls_max must be >= calls_min and burst_max >= burst_min")
        if not 0 < self.rate_min <= self.rate_max <= 1:
            raise ValueError("need 0 < rate_min <= rate_max <= 1")
        if self.burst_min < 1:
            raise ValueError("burst_min must be >= 1 (a hit is at least one failure)")
        if self.pairs > len(TOOL_NAMES) * len(ALL_MODES):
            raise ValueError(f"at most {len(TOOL_NAMES) * len(ALL_MODES)} distinct pairs")
        for name in ("noise_rate", "noise_retry", "unclassified_rate", "cancelled_rate",
                     "secret_rate", "onset_max", "session_repeat"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1]")
        if self.noise_retry >= 1:
            raise ValueError("noise_retry must be < 1")
        if self.records is not None and self.records < 1:
            raise ValueError("records must be >= 1")
        if self.keys < 1 or self.calls_per_session < 1 or self.record_gap_ms < 0:
            raise ValueError("keys and calls_per_session must be >= 1, record_gap_ms >= 0")
        if self.failure_rate is not None and not 0 <= self.failure_rate <= 1:
            raise ValueError("failure_rate must be in [0, 1]")

    def failure_share(self) -> float:
        if self.failure_rate is not None:
            return self.failure_rate
        return 1.0 if self.profile == "distinct" else 0.05

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v
                for k, v in dataclasses.asdict(self).items()}
