"""An in-process mock airline service: the tools the reference agent works with.

Modelled on the tau-bench airline domain (the source of the project's real
telemetry): `search_direct_flight`, `get_quote` and `book_reservation`, with the same
argument shapes and the same error texts. A booking is accepted only when its payment
amounts add up to the quoted total (fares plus checked-bag fees plus insurance),
otherwise it fails with `ARGS.payment_total_mismatch` and tau's message
"Error: payment amount does not add up, total price is X, but paid Y". Other checks
(unknown user, flight or payment method; a certificate over its balance) fail with
their own failure modes. Deterministic; `latency_s` makes each call take as long as a
real network call would, so that a paused agent visibly stops in the middle of its
work.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Final

BAG_FEE: Final = 50
INSURANCE_PER_PASSENGER: Final = 30

FLIGHTS: Final[dict[tuple[str, str], list[dict[str, Any]]]] = {
    ("JFK", "SEA"): [{"flight_number": "HAT136", "prices": {"economy": 125, "business": 410}},
                     {"flight_number": "HAT039", "prices": {"economy": 130, "business": 395}}],
    ("DTW", "SEA"): [{"flight_number": "HAT097", "prices": {"economy": 180, "business": 520}}],
    ("ORD", "ATL"): [{"flight_number": "HAT223", "prices": {"economy": 99, "business": 310}}],
    ("LAX", "BOS"): [{"flight_number": "HAT045", "prices": {"economy": 215, "business": 640}}],
    ("SFO", "PHX"): [{"flight_number": "HAT181", "prices": {"economy": 88, "business": 260}}],
    ("MIA", "DEN"): [{"flight_number": "HAT302", "prices": {"economy": 142, "business": 455}}],
}


class ToolError(Exception):
    """A failed tool call: the service's error text and its failure mode (the API's code)."""

    def __init__(self, failure_mode: str, message: str) -> None:
        super().__init__(message)
        self.failure_mode = failure_mode
        self.message = message


@dataclass
class User:
    user_id: str
    certificate: str
    certificate_balance: int
    card: str


USERS: Final = {u.user_id: u for u in (
    User("mia_li_3668", "certificate_7504069", 250, "credit_card_4421486"),
    User("ivan_muller_7015", "certificate_8998287", 300, "credit_card_7238816"),
    User("sofia_kim_7287", "certificate_5921432", 200, "credit_card_3012555"),
    User("omar_davis_3817", "certificate_2640119", 150, "credit_card_8811430"),
    User("yara_silva_9722", "certificate_4408122", 100, "credit_card_6094351"),
    User("chen_lee_6825", "certificate_1193050", 150, "credit_card_5120934"),
    User("anya_garcia_5901", "certificate_9950124", 200, "credit_card_2291877"),
)}


@dataclass
class AirlineService:
    """The service; each public method is one tool (args in, result out, or ToolError)."""

    latency_s: float = 0.0
    reservations: dict[str, dict[str, Any]] = field(default_factory=dict)

    def call(self, tool: str, args: dict[str, Any]) -> Any:
        """Dispatch a tool call by name (how the agent, and generated tools, invoke tools)."""
        handler = {"search_direct_flight": self.search_direct_flight,
                   "get_quote": self.get_quote,
                   "book_reservation": self.book_reservation}.get(tool)
        if handler is None:
            raise ToolError("TOOL_GAP", f"Error: unknown tool {tool}")
        if self.latency_s:
            time.sleep(self.latency_s)
        return handler(args)

    def search_direct_flight(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        flights = FLIGHTS.get((str(args.get("origin")), str(args.get("destination"))))
        if not flights:
            raise ToolError("NOTFOUND.flight", f"Error: no direct flight from {args.get('origin')}"
                                               f" to {args.get('destination')}")
        return [{**f, "date": args.get("date")} for f in flights]

    def get_quote(self, args: dict[str, Any]) -> dict[str, Any]:
        """The total price of a booking: fares, checked-bag fees and insurance."""
        return {"total": self._total(args)}

    def book_reservation(self, args: dict[str, Any]) -> dict[str, Any]:
        user = USERS.get(str(args.get("user_id")))
        if user is None:
            raise ToolError("NOTFOUND.user", f"Error: user {args.get('user_id')} not found")
        total = self._total(args)
        payments = args.get("payment_methods")
        if not isinstance(payments, list) or not payments:
            raise ToolError("ARGS.payment_methods", "Error: payment_methods is required")
        for payment in payments:
            self._check_payment(user, payment)
        paid = sum(p["amount"] for p in payments)
        if paid != total:
            raise ToolError("ARGS.payment_total_mismatch",
                            f"Error: payment amount does not add up, total price is {total}, "
                            f"but paid {paid}")
        reservation_id = f"R{len(self.reservations) + 1:05d}"
        self.reservations[reservation_id] = {**args, "total": total}
        return {"reservation_id": reservation_id, "total": total, "status": "confirmed"}

    @staticmethod
    def _check_payment(user: User, payment: Any) -> None:
        if not isinstance(payment, dict) or not isinstance(payment.get("amount"), int | float):
            raise ToolError("ARGS.payment_methods", "Error: each payment needs payment_id and "
                                                    "amount")
        if payment.get("payment_id") not in (user.certificate, user.card):
            raise ToolError("NOTFOUND.payment_method",
                            f"Error: payment method {payment.get('payment_id')} not found")
        if payment["payment_id"] == user.certificate and (
                payment["amount"] > user.certificate_balance):
            raise ToolError("CONFLICT.insufficient_balance",
                            f"Error: not enough balance in payment method {user.certificate}")

    @staticmethod
    def _total(args: dict[str, Any]) -> int:
        fares = {f["flight_number"]: f["prices"] for flights in FLIGHTS.values() for f in flights}
        cabin = str(args.get("cabin", "economy"))
        passengers = args.get("passengers") or []
        total = 0
        for flight in args.get("flights") or []:
            prices = fares.get(str(flight.get("flight_number")))
            if prices is None or cabin not in prices:
                raise ToolError("NOTFOUND.flight",
                                f"Error: flight {flight.get('flight_number')} not found")
            total += prices[cabin] * len(passengers)
        total += BAG_FEE * int(args.get("nonfree_baggages") or 0)
        if args.get("insurance") == "yes":
            total += INSURANCE_PER_PASSENGER * len(passengers)
        return total
