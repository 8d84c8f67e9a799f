"""Seeded multi-turn tasks with gold call sequences, and the fixed train/test split.

A task is an initial state (one config per suite) plus a list of user turns, each with the gold
calls that solve it. Gold calls are found by running templates against a scratch copy of the
world while generating, so later turns can refer to what earlier turns created ("cancel the
booking you just made") and every gold call is known to succeed.

Variants (the BFCL multi-turn model, docs/algorithms.md#multi-turn-tool-environments):

- ``base``: plain turns.
- ``missing_function``: a tool a turn needs is withheld; in that turn the right move is to say
  so without calling anything (empty gold), and the next turn releases the tool and repeats the ask.
- ``missing_parameter``: the user leaves out a value; the right move is to ask (empty gold),
  and the next turn gives the value.
- ``long_context``: a much larger initial state, and the first turn's calls return long outputs.

Everything is a pure function of ``(seed, task_id)``; ``split_of(task_id)`` never changes.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from envs.text.parsing import ToolCall
from envs.text.suites import SUITES, World
from envs.text.suites.base import copy_plain_data

VARIANTS = ("base", "missing_function", "missing_parameter", "long_context")
DEFAULT_SUITE_GROUPS: tuple[tuple[str, ...], ...] = (
    ("filesystem",),
    ("calculator",),
    ("messaging",),
    ("bank",),
    ("travel",),
    ("filesystem", "messaging"),
    ("bank", "messaging"),
    ("bank", "travel"),
    ("calculator", "bank"),
)
TEST_FRACTION_PERCENT = 20

PEOPLE = ["Alice", "Bob", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ivan", "Jia", "Kofi", "Lena"]
CITIES = ["Paris", "Rome", "Berlin", "Madrid", "Lisbon", "Vienna", "Prague", "Oslo"]
ACCOUNTS = ["checking", "savings", "travel", "emergency", "groceries"]
WORDS = ["budget", "meeting", "draft", "release", "invoice", "lunch", "review", "deadline", "launch", "backup"]
PHRASES = ["see you at the {w}", "the {w} is ready", "can we move the {w}?", "thanks for the {w}", "reminder about the {w}"]


@dataclass
class Turn:
    """One user turn.

    Attributes:
        user: The user's message.
        gold_calls: Calls that solve the turn, in order; empty means "reply without calling".
        released_tools: Tools that become available at the start of this turn (missing function).
        kind: ``normal``, ``missing_function`` / ``missing_parameter`` (the gap turn, empty gold),
            or ``follow_up`` (the turn after a gap).
    """

    user: str
    gold_calls: list[ToolCall]
    released_tools: list[str] = field(default_factory=list)
    kind: str = "normal"


@dataclass
class Task:
    """A multi-turn task: initial state per suite and its turns."""

    task_id: int
    seed: int
    suites: tuple[str, ...]
    variant: str
    initial_config: dict[str, dict[str, Any]]
    turns: list[Turn]
    withheld_tools: list[str] = field(default_factory=list)

    @property
    def split(self) -> str:
        return split_of(self.task_id)

    def build_world(self) -> World:
        """A fresh world in the task's initial state."""
        return World.from_configs(self.initial_config, SUITES)

    def available_tools(self, turn_index: int, world: World) -> set[str]:
        """Tools callable during a turn: all, minus withheld ones not yet released."""
        released = {t for turn in self.turns[: turn_index + 1] for t in turn.released_tools}
        return set(world.tool_names()) - (set(self.withheld_tools) - released)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["split"] = self.split
        for turn in out["turns"]:
            turn["gold_calls"] = [{"name": c["name"], "arguments": c["arguments"]} for c in turn["gold_calls"]]
        return out


def split_of(task_id: int) -> str:
    """``"test"`` for a fixed ~20% of task ids (by hash, so ids need not be contiguous), else ``"train"``."""
    digest = int(hashlib.sha256(f"task-{task_id}".encode()).hexdigest()[:8], 16)
    return "test" if digest % 100 < TEST_FRACTION_PERCENT else "train"


# ---------------------------------------------------------------------------------------------
# Initial states
# ---------------------------------------------------------------------------------------------


def _money(rng: random.Random, low: float, high: float) -> float:
    return round(rng.uniform(low, high), 2)


def _sentence(rng: random.Random) -> str:
    return rng.choice(PHRASES).format(w=rng.choice(WORDS))


def _config_filesystem(rng: random.Random, long: bool) -> dict[str, Any]:
    files = {
        "/home/user/notes.txt": _sentence(rng),
        "/home/user/todo.txt": "\n".join(f"- {_sentence(rng)}" for _ in range(3)),
        f"/home/user/docs/report_{rng.randint(1, 9)}.txt": f"Q{rng.randint(1, 4)} report: {_sentence(rng)}",
        "/home/user/docs/ideas.txt": _sentence(rng),
    }
    log_lines = 1500 if long else 12
    lines = []
    for i in range(log_lines):
        level = rng.choice(["INFO", "INFO", "WARN", "ERROR"])
        lines.append(f"{i:05d} {level} {rng.choice(WORDS)} code={rng.randint(100, 999)}")
    lines[rng.randrange(log_lines)] = f"{rng.randrange(log_lines):05d} ERROR disk full code=507"  # always something to find
    files["/home/user/logs/app.log"] = "\n".join(lines)
    if long:
        for i in range(40):
            files[f"/home/user/archive/old_{i:03d}.txt"] = " ".join(_sentence(rng) for _ in range(20))
    return {"files": files, "directories": ["/home/user/projects"], "cwd": "/home/user"}


def _config_calculator(rng: random.Random, long: bool) -> dict[str, Any]:
    return {"memory": float(rng.randint(0, 50))}


def _config_messaging(rng: random.Random, long: bool) -> dict[str, Any]:
    names = rng.sample(PEOPLE, 5)
    contacts = {name: f"U{rng.randint(100, 999)}{i}" for i, name in enumerate(names)}
    count = 300 if long else rng.randint(3, 6)
    messages = []
    for i in range(count):
        other = contacts[rng.choice(names)]
        sender, receiver = (other, "U0001") if rng.random() < 0.5 else ("U0001", other)
        messages.append({"id": f"M{i + 1:04d}", "from": sender, "to": receiver, "text": _sentence(rng)})
    return {"user": "U0001", "contacts": contacts, "messages": messages, "next_message_id": count + 1}


def _config_bank(rng: random.Random, long: bool) -> dict[str, Any]:
    names = rng.sample(ACCOUNTS, rng.randint(3, 4))
    balances = sorted({_money(rng, 300, 9000) for _ in range(len(names) + 2)})  # distinct balances
    rng.shuffle(balances)
    accounts = dict(zip(names, balances))
    count = 800 if long else rng.randint(2, 5)
    transactions = [
        {
            "id": f"T{i + 1:05d}",
            "kind": rng.choice(["deposit", "withdrawal"]),
            "account": rng.choice(names),
            "amount": _money(rng, 5, 400),
            "counterpart": None,
        }
        for i in range(count)
    ]
    return {"accounts": accounts, "transactions": transactions, "next_transaction_id": count + 1}


def _config_travel(rng: random.Random, long: bool) -> dict[str, Any]:
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


CONFIG_MAKERS: dict[str, Callable[[random.Random, bool], dict[str, Any]]] = {
    "filesystem": _config_filesystem,
    "calculator": _config_calculator,
    "messaging": _config_messaging,
    "bank": _config_bank,
    "travel": _config_travel,
}


# ---------------------------------------------------------------------------------------------
# Turn templates: (rng, scratch world) -> Draft or None (when not applicable in this state)
# ---------------------------------------------------------------------------------------------


@dataclass
class Draft:
    """A turn as a template writes it; ``vague``/``clarification`` allow the missing-parameter variant."""

    user: str
    calls: list[ToolCall]
    vague: str | None = None
    clarification: str | None = None
    long_output: bool = False


def C(tool: str, /, **arguments: Any) -> ToolCall:  # noqa: N802  (short: templates read like call lists)
    return ToolCall(tool, arguments)


def _num(rng: random.Random) -> float:
    return round(rng.uniform(2, 500), rng.choice([0, 1, 2]))


Template = Callable[[random.Random, World], "Draft | None"]


def _fs_files(world: World) -> list[str]:
    return sorted(p for p in world.suites["filesystem"].files if "/archive/" not in p and not p.endswith(".log"))


def fs_write(rng: random.Random, world: World) -> Draft:
    name = f"{rng.choice(WORDS)}_{rng.randint(1, 99)}.txt"
    path = f"/home/user/{rng.choice(['docs', 'projects'])}/{name}"
    text = _sentence(rng)
    return Draft(
        f"Create the file {path} containing exactly: {text}",
        [C("write_file", path=path, content=text)],
        vague=f"Create the file {path} for me.",
        clarification=f"It should contain exactly: {text}",
    )


def fs_read(rng: random.Random, world: World) -> Draft:
    path = rng.choice(_fs_files(world))
    return Draft(f"What does {path} say?", [C("read_file", path=path)])


def fs_move(rng: random.Random, world: World) -> Draft | None:
    candidates = [p for p in _fs_files(world) if not p.startswith("/home/user/projects/")]
    if not candidates:
        return None
    path = rng.choice(candidates)
    return Draft(
        f"Move {path} into /home/user/projects.",
        [C("move", source=path, destination="/home/user/projects")],
        vague=f"Move {path} into another folder.",
        clarification="Into /home/user/projects, please.",
    )


def fs_copy_new_dir(rng: random.Random, world: World) -> Draft | None:
    directory = f"/home/user/{rng.choice(WORDS)}_{rng.randint(100, 999)}"
    if directory in world.suites["filesystem"].directories:
        return None
    path = rng.choice(_fs_files(world))
    return Draft(
        f"Make a new directory {directory} and copy {path} into it.",
        [C("mkdir", path=directory), C("copy", source=path, destination=directory)],
    )


def fs_remove(rng: random.Random, world: World) -> Draft:
    path = rng.choice(_fs_files(world))
    return Draft(
        f"Delete the file {path}.",
        [C("remove", path=path)],
        vague="Delete one of my files.",
        clarification=f"The file is {path}.",
    )


def fs_grep_log(rng: random.Random, world: World) -> Draft:
    return Draft(
        "Which lines of /home/user/logs/app.log mention ERROR? Also, how many lines does it have?",
        [C("grep", path="/home/user/logs/app.log", pattern="ERROR"), C("count_lines", path="/home/user/logs/app.log")],
        long_output=True,
    )


def fs_read_log(rng: random.Random, world: World) -> Draft:
    return Draft(
        "Show me the full contents of /home/user/logs/app.log.",
        [C("read_file", path="/home/user/logs/app.log")],
        long_output=True,
    )


def calc_multiply(rng: random.Random, world: World) -> Draft:
    a, b = _num(rng), _num(rng)
    return Draft(f"What is {a} times {b}?", [C("multiply", a=a, b=b)])


def calc_add_to_memory(rng: random.Random, world: World) -> Draft:
    a, b = _num(rng), _num(rng)
    return Draft(
        f"Add {a} and {b}, then add the result to the memory.",
        [C("add", a=a, b=b), C("memory_add", value=a + b)],
        vague=f"Add {a} to some number, then add the result to the memory.",
        clarification=f"The other number is {b}.",
    )


def calc_power_round(rng: random.Random, world: World) -> Draft:
    base, exponent = round(rng.uniform(1.1, 3.0), 3), rng.randint(2, 6)
    result = world.suites["calculator"].power(base, float(exponent))
    return Draft(
        f"Compute {base} to the power {exponent}, rounded to 2 decimal places.",
        [C("power", base=base, exponent=float(exponent)), C("round_number", x=result, digits=2)],
    )


def calc_store(rng: random.Random, world: World) -> Draft:
    a, b = _num(rng), rng.choice([3.0, 4.0, 7.0, 8.0])
    return Draft(
        f"Divide {a} by {b} and store the result in memory.",
        [C("divide", a=a, b=b), C("memory_store", value=a / b)],
        vague=f"Divide {a} by something and store the result in memory.",
        clarification=f"Divide it by {b}.",
    )


def calc_mean(rng: random.Random, world: World) -> Draft:
    numbers = [_num(rng) for _ in range(rng.randint(3, 6))]
    return Draft(
        f"What is the mean of {numbers}? And what is in the memory?", [C("mean", numbers=numbers), C("memory_recall")]
    )


def calc_mean_long(rng: random.Random, world: World) -> Draft:
    numbers = [_num(rng) for _ in range(150)]  # a long input rather than a long output
    return Draft(f"What is the mean of these numbers: {numbers}?", [C("mean", numbers=numbers)], long_output=True)


def msg_send(rng: random.Random, world: World) -> Draft:
    contact = rng.choice(sorted(world.suites["messaging"].contacts))
    text = _sentence(rng)
    return Draft(
        f'Send {contact} a message saying "{text}".',
        [C("send_message", contact=contact, text=text)],
        vague=f"Send {contact} a message.",
        clarification=f'Say: "{text}"',
    )


def msg_search(rng: random.Random, world: World) -> Draft:
    texts = " ".join(m["text"] for m in world.suites["messaging"].messages).lower()
    keyword = rng.choice([w for w in WORDS if w in texts] or WORDS)  # usually one with matches
    return Draft(f'Find my messages that mention "{keyword}".', [C("search_messages", keyword=keyword)])


def msg_conversation(rng: random.Random, world: World) -> Draft:
    contact = rng.choice(sorted(world.suites["messaging"].contacts))
    return Draft(
        f"Show me my conversation with {contact}.",
        [C("list_messages", contact=contact)],
        vague="Show me my conversation with one of my contacts.",
        clarification=f"With {contact}.",
    )


def msg_add_and_send(rng: random.Random, world: World) -> Draft | None:
    free = sorted(set(PEOPLE) - set(world.suites["messaging"].contacts))
    if not free:
        return None
    name, user_id, text = rng.choice(free), f"U{rng.randint(1000, 9999)}", _sentence(rng)
    return Draft(
        f'Add {name} to my contacts with user id {user_id}, then send them "{text}".',
        [C("add_contact", name=name, user_id=user_id), C("send_message", contact=name, text=text)],
    )


def msg_delete(rng: random.Random, world: World) -> Draft | None:
    messages = world.suites["messaging"].messages
    if not messages:
        return None
    message = rng.choice(messages)
    return Draft(
        f"Delete message {message['id']}.",
        [C("delete_message", message_id=message["id"])],
        vague="Delete one of my messages.",
        clarification=f"Message {message['id']}.",
    )


def msg_list_all(rng: random.Random, world: World) -> Draft:
    return Draft("List all my messages.", [C("list_messages")], long_output=True)


def _bank(world: World) -> Any:
    return world.suites["bank"]


def bank_balance(rng: random.Random, world: World) -> Draft:
    account = rng.choice(sorted(_bank(world).accounts))
    return Draft(f"What's the balance of my {account} account?", [C("get_balance", account=account)])


def bank_transfer(rng: random.Random, world: World) -> Draft:
    source, target = rng.sample(sorted(_bank(world).accounts), 2)
    amount = round(rng.uniform(10, _bank(world).accounts[source] / 2), 2)
    return Draft(
        f"Transfer {amount} from {source} to {target}.",
        [C("transfer", source=source, target=target, amount=amount)],
        vague=f"Transfer some money from {source} to {target}.",
        clarification=f"Transfer {amount}.",
    )


def bank_deposit(rng: random.Random, world: World) -> Draft:
    account, amount = rng.choice(sorted(_bank(world).accounts)), _money(rng, 20, 900)
    return Draft(
        f"Deposit {amount} into my {account} account and tell me the new balance.",
        [C("deposit", account=account, amount=amount)],
        vague="Deposit my paycheck into my account.",
        clarification=f"It's {amount}, into {account}.",
    )


def bank_withdraw(rng: random.Random, world: World) -> Draft:
    account = rng.choice(sorted(_bank(world).accounts))
    amount = round(rng.uniform(5, _bank(world).accounts[account] / 3), 2)
    return Draft(f"Withdraw {amount} from {account}.", [C("withdraw", account=account, amount=amount)])


def bank_history(rng: random.Random, world: World) -> Draft:
    account = rng.choice(sorted(_bank(world).accounts))
    return Draft(
        f"Show me the last 200 transactions of my {account} account.",
        [C("list_transactions", account=account, limit=200)],
        long_output=True,
    )


def _bookable(world: World, margin: float = 60.0) -> list[dict[str, Any]]:
    travel = world.suites["travel"]
    return [f for f in travel.flights if f["seats"] > 0 and f["price"] <= travel.budget - margin]


def travel_search(rng: random.Random, world: World) -> Draft:
    flight = rng.choice(world.suites["travel"].flights)
    return Draft(
        f"Find flights from {flight['origin']} to {flight['destination']} on {flight['date']}.",
        [C("search_flights", origin=flight["origin"], destination=flight["destination"], date=flight["date"])],
    )


def travel_book(rng: random.Random, world: World) -> Draft | None:
    bookable = _bookable(world)
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
    bookable = _bookable(world)
    if not bookable:
        return None
    flight = rng.choice(bookable)
    found = world.suites["travel"].search_flights(flight["origin"], flight["destination"], flight["date"])
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
    bookings = world.suites["travel"].bookings
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
    flight = rng.choice(world.suites["travel"].flights)
    return Draft(
        f"List every flight from {flight['origin']} to {flight['destination']}, any day.",
        [C("search_flights", origin=flight["origin"], destination=flight["destination"])],
        long_output=True,
    )


def cross_file_to_contact(rng: random.Random, world: World) -> Draft:
    path = rng.choice(_fs_files(world))
    contact = rng.choice(sorted(world.suites["messaging"].contacts))
    content = world.suites["filesystem"].files[path]
    return Draft(
        f"Send {contact} the exact contents of {path} as a message.",
        [C("read_file", path=path), C("send_message", contact=contact, text=content)],
    )


def cross_balance_to_contact(rng: random.Random, world: World) -> Draft:
    account = rng.choice(sorted(_bank(world).accounts))
    contact = rng.choice(sorted(world.suites["messaging"].contacts))
    balance = _bank(world).accounts[account]
    return Draft(
        f"Check my {account} balance and send {contact} just the number, exactly as the bank gives it.",
        [C("get_balance", account=account), C("send_message", contact=contact, text=str(balance))],
    )


def cross_pay_flight(rng: random.Random, world: World) -> Draft | None:
    bookable = _bookable(world)
    if not bookable:
        return None
    flight = rng.choice(bookable)
    account = max(_bank(world).accounts, key=_bank(world).accounts.get)
    passenger = rng.choice(PEOPLE)
    return Draft(
        f"Book flight {flight['flight_id']} for {passenger} and withdraw its price from my {account} account.",
        [
            C("book_flight", flight_id=flight["flight_id"], passenger=passenger),
            C("withdraw", account=account, amount=flight["price"]),
        ],
    )


def cross_mean_balances(rng: random.Random, world: World) -> Draft:
    first, second = rng.sample(sorted(_bank(world).accounts), 2)
    balances = [_bank(world).accounts[first], _bank(world).accounts[second]]
    return Draft(
        f"What is the mean of my {first} and {second} balances? Store it in the calculator memory.",
        [
            C("get_balance", account=first),
            C("get_balance", account=second),
            C("mean", numbers=balances),
            C("memory_store", value=sum(balances) / 2),
        ],
    )


TEMPLATES: dict[str, list[Template]] = {
    "filesystem": [fs_write, fs_read, fs_move, fs_copy_new_dir, fs_remove, fs_grep_log],
    "calculator": [calc_multiply, calc_add_to_memory, calc_power_round, calc_store, calc_mean],
    "messaging": [msg_send, msg_search, msg_conversation, msg_add_and_send, msg_delete],
    "bank": [bank_balance, bank_transfer, bank_deposit, bank_withdraw],
    "travel": [travel_search, travel_book, travel_book_cheapest, travel_cancel_last, travel_budget],
}
LONG_TEMPLATES: dict[str, list[Template]] = {
    "filesystem": [fs_grep_log, fs_read_log],
    "calculator": [calc_mean_long],
    "messaging": [msg_list_all],
    "bank": [bank_history],
    "travel": [travel_long_search],
}
CROSS_TEMPLATES: dict[frozenset[str], list[Template]] = {
    frozenset({"filesystem", "messaging"}): [cross_file_to_contact],
    frozenset({"bank", "messaging"}): [cross_balance_to_contact],
    frozenset({"bank", "travel"}): [cross_pay_flight],
    frozenset({"calculator", "bank"}): [cross_mean_balances],
}


# ---------------------------------------------------------------------------------------------
# The generator
# ---------------------------------------------------------------------------------------------


class TaskGenerationError(RuntimeError):
    """A template produced a gold call that fails: a bug in the templates, never the model's fault."""


def _templates_for(suites: Sequence[str]) -> list[Template]:
    pool = [t for s in suites for t in TEMPLATES[s]]
    for pair, templates in CROSS_TEMPLATES.items():
        if pair <= set(suites):
            pool += templates * 2  # cross-suite turns are the point of multi-suite tasks
    return pool


def _draft_turns(rng: random.Random, suites: Sequence[str], world: World, num_turns: int, long: bool) -> list[Draft]:
    pool = _templates_for(suites)
    drafts: list[Draft] = []
    for turn_index in range(num_turns):
        if long and turn_index == 0:
            candidates = [t for s in suites for t in LONG_TEMPLATES[s]]
        else:
            candidates = pool
        for _attempt in range(50):
            draft = rng.choice(candidates)(rng, world)
            if draft is not None:
                break
        else:
            raise TaskGenerationError("no applicable template after 50 attempts")
        for call in draft.calls:  # advance the scratch world, so later templates see the effects
            try:
                world.execute(call)
            except Exception as exc:
                raise TaskGenerationError(f"gold call {call} failed: {exc}") from exc
        drafts.append(draft)
    return drafts


def generate_task(
    task_id: int, suites: Sequence[str] = ("bank",), variant: str = "base", seed: int = 0, num_turns: tuple[int, int] = (2, 4)
) -> Task:
    """One task, a pure function of its arguments.

    Args:
        task_id: Integer id (also decides the split).
        suites: Names of the suites the task uses (keys of ``envs.text.suites.SUITES``).
        variant: One of ``VARIANTS``.
        seed: Seed of the whole task family.
        num_turns: Inclusive range for the number of drafted turns (gap turns come on top).
    """
    unknown = set(suites) - set(SUITES)
    if unknown or not suites:
        raise ValueError(f"unknown or empty suites {sorted(unknown)}; known: {sorted(SUITES)}")
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; known: {VARIANTS}")
    suites = tuple(suites)
    rng = random.Random(f"{seed}/{task_id}/{'+'.join(suites)}/{variant}")
    long = variant == "long_context"
    config = {s: CONFIG_MAKERS[s](rng, long) for s in suites}
    world = World.from_configs(config, SUITES)
    drafts = _draft_turns(rng, suites, world, rng.randint(*num_turns), long)
    turns = [Turn(d.user, list(d.calls)) for d in drafts]
    withheld: list[str] = []

    if variant == "missing_parameter":
        options = [i for i, d in enumerate(drafts) if d.vague]
        if not options:  # force one: redraw the last turn from templates that support vagueness
            return generate_task(task_id, suites, variant, seed + 7919, num_turns)
        i = rng.choice(options)
        turns[i : i + 1] = [
            Turn(drafts[i].vague or "", [], kind="missing_parameter"),
            Turn(drafts[i].clarification or "", list(drafts[i].calls), kind="follow_up"),
        ]
    elif variant == "missing_function":
        options = []
        for i, turn in enumerate(turns):
            earlier = {c.name for t in turns[:i] for c in t.gold_calls}
            options += [(i, c.name) for c in turn.gold_calls if c.name not in earlier]
        i, tool = rng.choice(options)  # turn 0 always qualifies, so options is never empty
        withheld = [tool]
        turns[i : i + 1] = [
            Turn(turns[i].user, [], kind="missing_function"),
            Turn(
                "You now have the tool you were missing. Please go ahead with my last request.",
                list(turns[i].gold_calls),
                released_tools=[tool],
                kind="follow_up",
            ),
        ]
    return Task(
        task_id=task_id,
        seed=seed,
        suites=suites,
        variant=variant,
        initial_config=copy_plain_data(config),
        turns=turns,
        withheld_tools=withheld,
    )


class TaskSet:
    """A deterministic family of tasks: task ``i`` cycles through suite groups, then variants.

    Args:
        num_tasks: How many task ids (0 .. num_tasks-1) the family holds.
        seed: Seed of the family; the same seed gives the same tasks.
        suite_groups: Suite combinations to cycle over (default: every suite alone plus four pairs).
        variants: Variants to cycle over (default: all of ``VARIANTS``).
        split: ``"train"``, ``"test"`` or ``None`` (all ids).
    """

    def __init__(
        self,
        num_tasks: int = 1000,
        seed: int = 0,
        suite_groups: Sequence[Sequence[str]] = DEFAULT_SUITE_GROUPS,
        variants: Sequence[str] = VARIANTS,
        split: str | None = None,
    ) -> None:
        if split not in (None, "train", "test"):
            raise ValueError(f"split must be 'train', 'test' or None, got {split!r}")
        if num_tasks < 1 or not suite_groups or not variants:
            raise ValueError("num_tasks, suite_groups and variants must be non-empty")
        for v in variants:
            if v not in VARIANTS:
                raise ValueError(f"unknown variant {v!r}; known: {VARIANTS}")
        self.seed = seed
        self.suite_groups = [tuple(g) for g in suite_groups]
        self.variants = list(variants)
        self.task_ids = [i for i in range(num_tasks) if split is None or split_of(i) == split]
        if not self.task_ids:
            raise ValueError(f"no task ids in split {split!r} among {num_tasks} tasks")
        self._cache: dict[int, Task] = {}

    def __len__(self) -> int:
        return len(self.task_ids)

    def __iter__(self) -> Iterator[Task]:
        return (self.get(i) for i in self.task_ids)

    def get(self, task_id: int) -> Task:
        """The task with this id (generated once, then cached)."""
        if task_id not in self._cache:
            group = self.suite_groups[task_id % len(self.suite_groups)]
            variant = self.variants[(task_id // len(self.suite_groups)) % len(self.variants)]
            self._cache[task_id] = generate_task(task_id, group, variant, self.seed)
        return self._cache[task_id]

    def sample(self, rng: random.Random | Any) -> Task:
        """A task drawn uniformly from this set's ids (``rng``: random.Random or numpy Generator)."""
        index = int(rng.integers(len(self.task_ids))) if hasattr(rng, "integers") else rng.randrange(len(self.task_ids))
        return self.get(self.task_ids[index])
