"""The reference agent's scripted job: book a group's flights, one request at a time.

Each booking takes three tool calls: `search_direct_flight`, `get_quote` (the total:
fares, bag fees, insurance) and `book_reservation`. The agent's payment planner is
naive in the way the tau-bench agents were: it puts the fares on the travel
certificate and the rest *of the fares* on the card, forgetting that the quote also
holds bag fees and insurance. Bookings with such extras therefore fail with
`ARGS.payment_total_mismatch`, again and again: the recurring friction binloop is for.
A failed booking is set aside (`pending`) and retried once a tool that answers its
failure is loaded.

:class:`TaskState` is everything the agent needs to go on: it is the reply to a pause
request and comes back in the resume checkpoint, from which the agent continues.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Final

from binloop.agent.airline import USERS

TASK_NAME: Final = "book-group-trips"
STAGES: Final = ("search", "quote", "book")


@dataclass(frozen=True)
class Booking:
    user_id: str
    origin: str
    destination: str
    date: str
    cabin: str
    passengers: tuple[tuple[str, str, str], ...]  # (first name, last name, date of birth)
    nonfree_baggages: int = 0
    insurance: bool = False


BOOKINGS: Final = (
    Booking("mia_li_3668", "JFK", "SEA", "2024-05-20", "economy", (("Mia", "Li", "1990-04-05"),)),
    Booking("ivan_muller_7015", "DTW", "SEA", "2024-05-17", "business",
            (("Ivan", "Muller", "1986-03-14"),), nonfree_baggages=1),
    Booking("sofia_kim_7287", "ORD", "ATL", "2024-05-22", "business",
            (("Sofia", "Kim", "1979-11-02"),), insurance=True),
    Booking("omar_davis_3817", "LAX", "BOS", "2024-05-24", "economy",
            (("Omar", "Davis", "1992-07-19"),), nonfree_baggages=2),
    Booking("yara_silva_9722", "SFO", "PHX", "2024-05-25", "economy",
            (("Yara", "Silva", "1988-01-30"), ("Lucas", "Silva", "1987-06-08"))),
    Booking("chen_lee_6825", "MIA", "DEN", "2024-05-26", "economy",
            (("Chen", "Lee", "1975-09-12"), ("Mei", "Lee", "1977-02-25")),
            nonfree_baggages=1, insurance=True),
    Booking("anya_garcia_5901", "JFK", "SEA", "2024-05-27", "economy",
            (("Anya", "Garcia", "1995-12-01"),)),
)


def reservation_args(booking: Booking, flight: dict[str, Any]) -> dict[str, Any]:
    """`book_reservation` arguments with the naive payment split (see module docstring)."""
    passengers = [{"first_name": f, "last_name": last, "dob": dob}
                  for f, last, dob in booking.passengers]
    fares = flight["prices"][booking.cabin] * len(passengers)
    user = USERS[booking.user_id]
    on_certificate = min(user.certificate_balance, fares)
    payments = [{"payment_id": user.certificate, "amount": on_certificate}]
    if fares > on_certificate:
        payments.append({"payment_id": user.card, "amount": fares - on_certificate})
    return {"user_id": booking.user_id, "origin": booking.origin,
            "destination": booking.destination, "flight_type": "one_way",
            "cabin": booking.cabin,
            "flights": [{"flight_number": flight["flight_number"], "date": booking.date}],
            "passengers": passengers, "payment_methods": payments,
            "total_baggages": booking.nonfree_baggages, "nonfree_baggages":
            booking.nonfree_baggages, "insurance": "yes" if booking.insurance else "no"}


@dataclass
class TaskState:
    """Where the job stands; JSON-serialisable (a pause reply, a resume checkpoint).

    `next` is the booking to start after `current` (the one in progress: its stage and
    what earlier stages found); `done` the booked ones; `pending` the failed ones
    waiting for a tool, with their args, the quote and the error.
    """

    task: str = TASK_NAME
    total: int = len(BOOKINGS)
    next: int = 0
    current: dict[str, Any] | None = None
    done: list[dict[str, Any]] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: Any) -> TaskState:
        """The state of a checkpoint; ValueError when it is not this task's."""
        if not isinstance(value, dict) or value.get("task") != TASK_NAME:
            raise ValueError("not a book-group-trips task state")
        try:
            state = cls(task=TASK_NAME, total=int(value["total"]), next=int(value["next"]),
                        current=value.get("current"), done=list(value["done"]),
                        pending=list(value["pending"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed task state: {exc}") from None
        if not 0 <= state.next <= len(BOOKINGS) or state.total != len(BOOKINGS):
            raise ValueError("task state does not fit this job")
        if state.current is not None and (not isinstance(state.current, dict)
                                          or state.current.get("stage") not in STAGES):
            raise ValueError("task state has a malformed current booking")
        return state

    @property
    def finished(self) -> bool:
        return self.current is None and self.next >= len(BOOKINGS) and not self.pending

    def summary(self) -> str:
        booked = f"{len(self.done)} booked, {len(self.pending)} waiting for a tool"
        if self.current is not None:
            return (f"at booking {self.current['booking'] + 1} ({self.current['stage']}) of "
                    f"{self.total}; {booked}")
        if self.next < self.total:
            return f"before booking {self.next + 1} of {self.total}; {booked}"
        return f"past the last of {self.total} bookings; {booked}"
