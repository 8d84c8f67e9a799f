"""Task templates whose turns span two suites (drawn for tasks that use both)."""

from __future__ import annotations

import random

from envs.text.suites.bank import bank_of
from envs.text.suites.base import C, Draft, Template, World
from envs.text.suites.filesystem import filesystem_of, user_files
from envs.text.suites.messaging import messaging_of
from envs.text.suites.travel import bookable_flights
from envs.text.suites.words import PEOPLE


def cross_file_to_contact(rng: random.Random, world: World) -> Draft:
    path = rng.choice(user_files(world))
    contact = rng.choice(sorted(messaging_of(world).contacts))
    content = filesystem_of(world).files[path]
    return Draft(
        f"Send {contact} the exact contents of {path} as a message.",
        [C("read_file", path=path), C("send_message", contact=contact, text=content)],
    )


def cross_balance_to_contact(rng: random.Random, world: World) -> Draft:
    account = rng.choice(sorted(bank_of(world).accounts))
    contact = rng.choice(sorted(messaging_of(world).contacts))
    balance = bank_of(world).accounts[account]
    return Draft(
        f"Check my {account} balance and send {contact} just the number, exactly as the bank gives it.",
        [C("get_balance", account=account), C("send_message", contact=contact, text=str(balance))],
    )


def cross_pay_flight(rng: random.Random, world: World) -> Draft | None:
    bookable = bookable_flights(world)
    if not bookable:
        return None
    flight = rng.choice(bookable)
    account = max(bank_of(world).accounts, key=bank_of(world).accounts.get)
    passenger = rng.choice(PEOPLE)
    return Draft(
        f"Book flight {flight['flight_id']} for {passenger} and withdraw its price from my {account} account.",
        [
            C("book_flight", flight_id=flight["flight_id"], passenger=passenger),
            C("withdraw", account=account, amount=flight["price"]),
        ],
    )


def cross_mean_balances(rng: random.Random, world: World) -> Draft:
    first, second = rng.sample(sorted(bank_of(world).accounts), 2)
    balances = [bank_of(world).accounts[first], bank_of(world).accounts[second]]
    return Draft(
        f"What is the mean of my {first} and {second} balances? Store it in the calculator memory.",
        [
            C("get_balance", account=first),
            C("get_balance", account=second),
            C("mean", numbers=balances),
            C("memory_store", value=sum(balances) / 2),
        ],
    )


CROSS_TEMPLATES: dict[frozenset[str], list[Template]] = {
    frozenset({"filesystem", "messaging"}): [cross_file_to_contact],
    frozenset({"bank", "messaging"}): [cross_balance_to_contact],
    frozenset({"bank", "travel"}): [cross_pay_flight],
    frozenset({"calculator", "bank"}): [cross_mean_balances],
}
