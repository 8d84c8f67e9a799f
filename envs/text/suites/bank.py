"""A bank with several named accounts and a transaction log."""

from __future__ import annotations

from typing import Any

from envs.text.suites.base import ToolError, ToolSuite, read_only


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
