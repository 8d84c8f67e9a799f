"""Travel booking: a flight catalogue, a budget, and the traveller's bookings."""

from __future__ import annotations

import random
from typing import Any, cast

from envs.text.parsing import ToolCall
from envs.text.suites.base import C, Draft, SuiteDefinition, ToolError, ToolSuite, World, read_only
from envs.text.suites.words import PEOPLE


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


# ---- initial states and task templates (drawn by envs.text.tasks) ----------------------------

CITIES = ["Paris", "Rome", "Berlin", "Madrid", "Lisbon", "Vienna", "Prague", "Oslo"]


def travel_of(world: World) -> Travel:
    """The world's travel suite, typed (``world.suites`` holds ``ToolSuite``)."""
    return cast(Travel, world.suites["travel"])


def initial_config(rng: random.Random, long: bool) -> dict[str, Any]:
    """A task's initial state (``long``: the long-context variant's larger one)."""
    count = 200 if long else rng.randint(8, 12)
    routes = [tuple(rng.sample(CITIES, 2)) for _ in range(4)]
    flights = []
    for i in range(count):
        origin, destination = rng.choice(routes)
        flights.append(
            {
                "flight_id": f"FL{100 + i}",
                "origin": origin,
                "destination": destination,
                "date": f"2025-06-{rng.randint(1, 5):02d}",
                "price": float(rng.randint(60, 400)),
                "seats": rng.randint(1, 5),
            }
        )
    # A cheap flight with many seats on a day no template asks about: bookable whatever happened
    # before (the noisy policy's "extra call" relies on it).
    origin, destination = routes[0]
    flights.append(
        {"flight_id": "FL999", "origin": origin, "destination": destination, "date": "2025-06-09", "price": 25.0, "seats": 99}
    )
    return {"budget": float(rng.randint(1500, 3000)), "flights": flights, "bookings": {}, "next_booking_id": 1}


def bookable_flights(world: World, margin: float = 60.0) -> list[dict[str, Any]]:
    travel = travel_of(world)
    return [f for f in travel.flights if f["seats"] > 0 and f["price"] <= travel.budget - margin]


def travel_search(rng: random.Random, world: World) -> Draft:
    flight = rng.choice(travel_of(world).flights)
    return Draft(
        f"Find flights from {flight['origin']} to {flight['destination']} on {flight['date']}.",
        [C("search_flights", origin=flight["origin"], destination=flight["destination"], date=flight["date"])],
    )


def travel_book(rng: random.Random, world: World) -> Draft | None:
    bookable = bookable_flights(world)
    if not bookable:
        return None
    flight, passenger = rng.choice(bookable), f"{rng.choice(PEOPLE)} {rng.choice(['Smith', 'Okafor', 'Novak', 'Silva'])}"
    return Draft(
        f"Book flight {flight['flight_id']} for {passenger}.",
        [C("book_flight", flight_id=flight["flight_id"], passenger=passenger)],
        vague=f"Book flight {flight['flight_id']}.",
        clarification=f"The passenger is {passenger}.",
    )


def travel_book_cheapest(rng: random.Random, world: World) -> Draft | None:
    bookable = bookable_flights(world)
    if not bookable:
        return None
    flight = rng.choice(bookable)
    found = travel_of(world).search_flights(flight["origin"], flight["destination"], flight["date"])
    cheapest = found[0]
    if cheapest not in bookable and not any(b["flight_id"] == cheapest["flight_id"] for b in bookable):
        return None
    passenger = rng.choice(PEOPLE)
    return Draft(
        f"Book the cheapest flight from {flight['origin']} to {flight['destination']} on {flight['date']} for {passenger}.",
        [
            C("search_flights", origin=flight["origin"], destination=flight["destination"], date=flight["date"]),
            C("book_flight", flight_id=cheapest["flight_id"], passenger=passenger),
        ],
    )


def travel_cancel_last(rng: random.Random, world: World) -> Draft | None:
    bookings = travel_of(world).bookings
    if not bookings:
        return None
    last = sorted(bookings)[-1]
    return Draft(
        "Cancel the last booking you made, then tell me my remaining budget.",
        [C("cancel_booking", booking_id=last), C("get_budget")],
    )


def travel_budget(rng: random.Random, world: World) -> Draft:
    return Draft("How much travel budget do I have left, and what have I booked?", [C("get_budget"), C("list_bookings")])


def travel_long_search(rng: random.Random, world: World) -> Draft:
    flight = rng.choice(travel_of(world).flights)
    return Draft(
        f"List every flight from {flight['origin']} to {flight['destination']}, any day.",
        [C("search_flights", origin=flight["origin"], destination=flight["destination"])],
        long_output=True,
    )


def distractor(config: dict[str, Any]) -> ToolCall:
    """A call that always succeeds and always changes the state (the noisy policy's "extra call")."""
    return ToolCall("book_flight", {"flight_id": "FL999", "passenger": "Guest"})


SUITE = SuiteDefinition(
    tools=Travel,
    initial_config=initial_config,
    templates=(
        travel_search,
        travel_book,
        travel_book_cheapest,
        travel_cancel_last,
        travel_budget,
    ),
    long_templates=(travel_long_search,),
    distractor=distractor,
)
