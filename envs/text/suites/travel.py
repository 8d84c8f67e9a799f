"""Travel booking: a flight catalogue, a budget, and the traveller's bookings."""

from __future__ import annotations

from typing import Any

from envs.text.suites.base import ToolError, ToolSuite, read_only


class Travel(ToolSuite):
    """``flights`` is the catalogue (with free seats), ``bookings`` maps booking id -> booking."""

    name = "travel"
    description = "search, book and cancel flights within a budget"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"budget": 1000.0, "flights": [], "bookings": {}, "next_booking_id": 1}

    def _load(self, config: dict[str, Any]) -> None:
        self.budget: float = round(float(config["budget"]), 2)
        self.flights: list[dict[str, Any]] = [dict(f) for f in config["flights"]]
        self.bookings: dict[str, dict[str, Any]] = {k: dict(v) for k, v in config["bookings"].items()}
        self.next_booking_id: int = int(config["next_booking_id"])

    def _flight(self, flight_id: str) -> dict[str, Any]:
        for flight in self.flights:
            if flight["flight_id"] == flight_id:
                return flight
        raise ToolError(f"no flight with id {flight_id!r}")

    @read_only
    def search_flights(self, origin: str, destination: str, date: str | None = None) -> list[dict[str, Any]]:
        """Return the flights between two cities, cheapest first.

        Args:
            origin: Departure city, such as "Paris".
            destination: Arrival city.
            date: Day of travel as YYYY-MM-DD; omit for any day.
        """
        found = [
            dict(f)
            for f in self.flights
            if f["origin"] == origin and f["destination"] == destination and (date is None or f["date"] == date)
        ]
        return sorted(found, key=lambda f: (f["price"], f["flight_id"]))

    def book_flight(self, flight_id: str, passenger: str) -> dict[str, Any]:
        """Book a seat on a flight, paid from the budget, and return the booking.

        Args:
            flight_id: Id of the flight, such as "FL104".
            passenger: Full name of the passenger.
        """
        flight = self._flight(flight_id)
        if flight["seats"] <= 0:
            raise ToolError(f"flight {flight_id} is full")
        if flight["price"] > self.budget:
            raise ToolError(f"price {flight['price']} exceeds the remaining budget {self.budget}")
        flight["seats"] -= 1
        self.budget = round(self.budget - flight["price"], 2)
        booking_id = f"BK{self.next_booking_id:03d}"
        self.next_booking_id += 1
        self.bookings[booking_id] = {
            "booking_id": booking_id,
            "flight_id": flight_id,
            "passenger": passenger,
            "price": flight["price"],
        }
        return dict(self.bookings[booking_id])

    def cancel_booking(self, booking_id: str) -> float:
        """Cancel a booking, refund its price to the budget, and return the new budget.

        Args:
            booking_id: Id of the booking, such as "BK002".
        """
        if booking_id not in self.bookings:
            raise ToolError(f"no booking with id {booking_id!r}")
        booking = self.bookings.pop(booking_id)
        self._flight(booking["flight_id"])["seats"] += 1
        self.budget = round(self.budget + booking["price"], 2)
        return self.budget

    @read_only
    def list_bookings(self) -> list[dict[str, Any]]:
        """Return all current bookings."""
        return [dict(b) for b in self.bookings.values()]

    @read_only
    def get_budget(self) -> float:
        """Return the remaining travel budget."""
        return self.budget
