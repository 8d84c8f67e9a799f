"""A messaging app: contacts and a message log for one logged-in user."""

from __future__ import annotations

import random
from typing import Any, cast

from envs.text.parsing import ToolCall
from envs.text.suites.base import C, Draft, SuiteDefinition, ToolError, ToolSuite, World, read_only
from envs.text.suites.words import PEOPLE, WORDS, sentence


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


# ---- initial states and task templates (drawn by envs.text.tasks) ----------------------------


def messaging_of(world: World) -> Messaging:
    """The world's messaging suite, typed (``world.suites`` holds ``ToolSuite``)."""
    return cast(Messaging, world.suites["messaging"])


def initial_config(rng: random.Random, long: bool) -> dict[str, Any]:
    """A task's initial state (``long``: the long-context variant's larger one)."""
    names = rng.sample(PEOPLE, 5)
    contacts = {name: f"U{rng.randint(100, 999)}{i}" for i, name in enumerate(names)}
    count = 300 if long else rng.randint(3, 6)
    messages = []
    for i in range(count):
        other = contacts[rng.choice(names)]
        sender, receiver = (other, "U0001") if rng.random() < 0.5 else ("U0001", other)
        messages.append({"id": f"M{i + 1:04d}", "from": sender, "to": receiver, "text": sentence(rng)})
    return {"user": "U0001", "contacts": contacts, "messages": messages, "next_message_id": count + 1}


def msg_send(rng: random.Random, world: World) -> Draft:
    contact = rng.choice(sorted(messaging_of(world).contacts))
    text = sentence(rng)
    return Draft(
        f'Send {contact} a message saying "{text}".',
        [C("send_message", contact=contact, text=text)],
        vague=f"Send {contact} a message.",
        clarification=f'Say: "{text}"',
    )


def msg_search(rng: random.Random, world: World) -> Draft:
    texts = " ".join(m["text"] for m in messaging_of(world).messages).lower()
    keyword = rng.choice([w for w in WORDS if w in texts] or WORDS)  # usually one with matches
    return Draft(f'Find my messages that mention "{keyword}".', [C("search_messages", keyword=keyword)])


def msg_conversation(rng: random.Random, world: World) -> Draft:
    contact = rng.choice(sorted(messaging_of(world).contacts))
    return Draft(
        f"Show me my conversation with {contact}.",
        [C("list_messages", contact=contact)],
        vague="Show me my conversation with one of my contacts.",
        clarification=f"With {contact}.",
    )


def msg_add_and_send(rng: random.Random, world: World) -> Draft | None:
    free = sorted(set(PEOPLE) - set(messaging_of(world).contacts))
    if not free:
        return None
    name, user_id, text = rng.choice(free), f"U{rng.randint(1000, 9999)}", sentence(rng)
    return Draft(
        f'Add {name} to my contacts with user id {user_id}, then send them "{text}".',
        [C("add_contact", name=name, user_id=user_id), C("send_message", contact=name, text=text)],
    )


def msg_delete(rng: random.Random, world: World) -> Draft | None:
    messages = messaging_of(world).messages
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


def distractor(config: dict[str, Any]) -> ToolCall:
    """A call that always succeeds and always changes the state (the noisy policy's "extra call")."""
    return ToolCall("send_message", {"contact": sorted(config["contacts"])[0], "text": "ok"})


SUITE = SuiteDefinition(
    tools=Messaging,
    initial_config=initial_config,
    templates=(
        msg_send,
        msg_search,
        msg_conversation,
        msg_add_and_send,
        msg_delete,
    ),
    long_templates=(msg_list_all,),
    distractor=distractor,
)
