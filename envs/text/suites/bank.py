"""A bank with several named accounts and a transaction log."""

from __future__ import annotations

import random
from typing import Any

from envs.text.parsing import ToolCall
from envs.text.suites.base import C, Draft, SuiteDefinition, ToolError, ToolSuite, World, read_only
from envs.text.suites.words import money


class Bank(ToolSuite):
    """``accounts`` maps account name -> balance (rounded to cents); ``transactions`` is the log."""

    name = "bank"
    description = "accounts, balances and transfers"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"accounts": {}, "transactions": [], "next_transaction_id": 1}

    def _load(self, config: dict[str, Any]) -> None:
        self.accounts: dict[str, float] = {k: round(float(v), 2) for k, v in config["accounts"].items()}
        self.transactions: list[dict[str, Any]] = [dict(t) for t in config["transactions"]]
        self.next_transaction_id: int = int(config["next_transaction_id"])

    def _account(self, account: str) -> str:
        if account not in self.accounts:
            raise ToolError(f"no account named {account!r}; accounts: {sorted(self.accounts)}")
        return account

    @staticmethod
    def _positive(amount: float) -> float:
        if not amount > 0 or amount > 1e12:
            raise ToolError("amount must be positive (and below 1e12)")
        return round(amount, 2)

    def _log(self, kind: str, account: str, amount: float, counterpart: str | None = None) -> str:
        transaction_id = f"T{self.next_transaction_id:05d}"
        self.transactions.append(
            {"id": transaction_id, "kind": kind, "account": account, "amount": amount, "counterpart": counterpart}
        )
        self.next_transaction_id += 1
        return transaction_id

    @read_only
    def list_accounts(self) -> list[str]:
        """Return the names of all accounts."""
        return sorted(self.accounts)

    @read_only
    def get_balance(self, account: str) -> float:
        """Return the balance of an account.

        Args:
            account: Account name, such as "checking".
        """
        return self.accounts[self._account(account)]

    def deposit(self, account: str, amount: float) -> float:
        """Deposit money into an account and return the new balance.

        Args:
            account: Account name.
            amount: Positive amount to deposit.
        """
        amount = self._positive(amount)
        self.accounts[self._account(account)] = round(self.accounts[account] + amount, 2)
        self._log("deposit", account, amount)
        return self.accounts[account]

    def withdraw(self, account: str, amount: float) -> float:
        """Withdraw money from an account and return the new balance.

        Args:
            account: Account name.
            amount: Positive amount, at most the balance.
        """
        amount = self._positive(amount)
        if self.accounts[self._account(account)] < amount:
            raise ToolError(f"insufficient funds in {account!r}")
        self.accounts[account] = round(self.accounts[account] - amount, 2)
        self._log("withdrawal", account, amount)
        return self.accounts[account]

    def transfer(self, source: str, target: str, amount: float) -> str:
        """Move money from one account to another and return the transaction id.

        Args:
            source: Account to take the money from.
            target: Account to put the money into; different from source.
            amount: Positive amount, at most the source balance.
        """
        amount = self._positive(amount)
        self._account(source), self._account(target)
        if source == target:
            raise ToolError("source and target must differ")
        if self.accounts[source] < amount:
            raise ToolError(f"insufficient funds in {source!r}")
        self.accounts[source] = round(self.accounts[source] - amount, 2)
        self.accounts[target] = round(self.accounts[target] + amount, 2)
        return self._log("transfer", source, amount, counterpart=target)

    @read_only
    def list_transactions(self, account: str, limit: int = 10) -> list[dict[str, Any]]:
        """Return the most recent transactions of an account, newest first.

        Args:
            account: Account name.
            limit: Maximum number of transactions to return, from 1 to 1000.
        """
        self._account(account)
        if not 1 <= limit <= 1000:
            raise ToolError("limit must be between 1 and 1000")
        mine = [dict(t) for t in self.transactions if account in (t["account"], t["counterpart"])]
        return mine[::-1][:limit]


# ---- initial states and task templates (drawn by envs.text.tasks) ----------------------------

ACCOUNTS = ["checking", "savings", "travel", "emergency", "groceries"]


def initial_config(rng: random.Random, long: bool) -> dict[str, Any]:
    """A task's initial state (``long``: the long-context variant's larger one)."""
    names = rng.sample(ACCOUNTS, rng.randint(3, 4))
    balances = sorted({money(rng, 300, 9000) for _ in range(len(names) + 2)})  # distinct balances
    rng.shuffle(balances)
    accounts = dict(zip(names, balances))
    count = 800 if long else rng.randint(2, 5)
    transactions = [
        {
            "id": f"T{i + 1:05d}",
            "kind": rng.choice(["deposit", "withdrawal"]),
            "account": rng.choice(names),
            "amount": money(rng, 5, 400),
            "counterpart": None,
        }
        for i in range(count)
    ]
    return {"accounts": accounts, "transactions": transactions, "next_transaction_id": count + 1}


def bank_of(world: World) -> Any:
    return world.suites["bank"]


def bank_balance(rng: random.Random, world: World) -> Draft:
    account = rng.choice(sorted(bank_of(world).accounts))
    return Draft(f"What's the balance of my {account} account?", [C("get_balance", account=account)])


def bank_transfer(rng: random.Random, world: World) -> Draft:
    source, target = rng.sample(sorted(bank_of(world).accounts), 2)
    amount = round(rng.uniform(10, bank_of(world).accounts[source] / 2), 2)
    return Draft(
        f"Transfer {amount} from {source} to {target}.",
        [C("transfer", source=source, target=target, amount=amount)],
        vague=f"Transfer some money from {source} to {target}.",
        clarification=f"Transfer {amount}.",
    )


def bank_deposit(rng: random.Random, world: World) -> Draft:
    account, amount = rng.choice(sorted(bank_of(world).accounts)), money(rng, 20, 900)
    return Draft(
        f"Deposit {amount} into my {account} account and tell me the new balance.",
        [C("deposit", account=account, amount=amount)],
        vague="Deposit my paycheck into my account.",
        clarification=f"It's {amount}, into {account}.",
    )


def bank_withdraw(rng: random.Random, world: World) -> Draft:
    account = rng.choice(sorted(bank_of(world).accounts))
    amount = round(rng.uniform(5, bank_of(world).accounts[account] / 3), 2)
    return Draft(f"Withdraw {amount} from {account}.", [C("withdraw", account=account, amount=amount)])


def bank_history(rng: random.Random, world: World) -> Draft:
    account = rng.choice(sorted(bank_of(world).accounts))
    return Draft(
        f"Show me the last 200 transactions of my {account} account.",
        [C("list_transactions", account=account, limit=200)],
        long_output=True,
    )


def distractor(config: dict[str, Any]) -> ToolCall:
    """A call that always succeeds and always changes the state (the noisy policy's "extra call")."""
    return ToolCall("deposit", {"account": sorted(config["accounts"])[0], "amount": 1.0})


SUITE = SuiteDefinition(
    tools=Bank,
    initial_config=initial_config,
    templates=(
        bank_balance,
        bank_transfer,
        bank_deposit,
        bank_withdraw,
    ),
    long_templates=(bank_history,),
    distractor=distractor,
)
