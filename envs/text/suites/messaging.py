"""A messaging app: contacts and a message log for one logged-in user."""

from __future__ import annotations

from typing import Any

from envs.text.suites.base import ToolError, ToolSuite, read_only


class Messaging(ToolSuite):
    """``contacts`` maps a name to a user id; ``messages`` is the log, oldest first."""

    name = "messaging"
    description = "send, search and delete messages"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"user": "me", "contacts": {}, "messages": [], "next_message_id": 1}

    def _load(self, config: dict[str, Any]) -> None:
        self.user: str = str(config["user"])
        self.contacts: dict[str, str] = dict(config["contacts"])
        self.messages: list[dict[str, str]] = [dict(m) for m in config["messages"]]
        self.next_message_id: int = int(config["next_message_id"])

    def _user_id(self, contact: str) -> str:
        if contact not in self.contacts:
            raise ToolError(f"unknown contact {contact!r}; contacts: {sorted(self.contacts)}")
        return self.contacts[contact]

    @read_only
    def list_contacts(self) -> dict[str, str]:
        """Return all contacts as a mapping from name to user id."""
        return dict(self.contacts)

    def add_contact(self, name: str, user_id: str) -> str:
        """Add a contact and return its name.

        Args:
            name: Name to save the contact under; must be new.
            user_id: The contact's user id, such as "U042".
        """
        if name in self.contacts:
            raise ToolError(f"contact {name!r} already exists")
        self.contacts[name] = user_id
        return name

    def send_message(self, contact: str, text: str) -> str:
        """Send a text message to a contact and return the new message id.

        Args:
            contact: Name of the recipient, one of the contacts.
            text: The message text.
        """
        message_id = f"M{self.next_message_id:04d}"
        self.messages.append({"id": message_id, "from": self.user, "to": self._user_id(contact), "text": text})
        self.next_message_id += 1
        return message_id

    @read_only
    def list_messages(self, contact: str | None = None) -> list[dict[str, str]]:
        """Return the message log, optionally only messages exchanged with one contact.

        Args:
            contact: Name of a contact to filter by; omit for all messages.
        """
        if contact is None:
            return [dict(m) for m in self.messages]
        user_id = self._user_id(contact)
        return [dict(m) for m in self.messages if user_id in (m["from"], m["to"])]

    @read_only
    def search_messages(self, keyword: str) -> list[dict[str, str]]:
        """Return the messages whose text contains a keyword (case-insensitive).

        Args:
            keyword: Text to look for.
        """
        return [dict(m) for m in self.messages if keyword.lower() in m["text"].lower()]

    def delete_message(self, message_id: str) -> str:
        """Delete a message by id and return the id.

        Args:
            message_id: Id of the message, such as "M0003".
        """
        for i, message in enumerate(self.messages):
            if message["id"] == message_id:
                del self.messages[i]
                return message_id
        raise ToolError(f"no message with id {message_id!r}")
