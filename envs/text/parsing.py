"""Tool calls inside an assistant message, in the format chat templates use.

A message may hold any number of calls, each a JSON object between tags::

    Let me check both accounts.
    <tool_call>{"name": "get_balance", "arguments": {"account": "checking"}}</tool_call>
    <tool_call>{"name": "get_balance", "arguments": {"account": "savings"}}</tool_call>

A message with no ``<tool_call>`` tag at all is a plain reply, which ends the user's turn.
A tag that cannot be decoded is not silently dropped: it becomes a :class:`CallParseError`, so
the environment can answer it with an error message and count it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
# Non-greedy body; an unclosed last tag runs to the end of the message (models often stop early).
_CALL_PATTERN = re.compile(re.escape(CALL_OPEN) + r"(.*?)(?:" + re.escape(CALL_CLOSE) + r"|\Z)", re.DOTALL)
MAX_CALLS_PER_MESSAGE = 32  # a runaway generation should not make thousands of tool executions


@dataclass(frozen=True)
class ToolCall:
    """One decoded call: a tool name and its JSON-object arguments."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}

    def to_text(self) -> str:
        """The call as the model should write it (compact JSON inside the tags)."""
        return f"{CALL_OPEN}{json.dumps(self.to_dict(), ensure_ascii=False)}{CALL_CLOSE}"


@dataclass(frozen=True)
class CallParseError:
    """A ``<tool_call>`` tag whose content is not a valid call; ``reason`` is shown to the model."""

    raw: str
    reason: str


ParsedItem = ToolCall | CallParseError


def has_tool_call(message: str) -> bool:
    """Whether the message tries to call a tool (even malformed): if not, it ends the turn."""
    return CALL_OPEN in message


def _decode_call(body: str) -> ParsedItem:
    body = body.strip()
    # Some models wrap the JSON in a markdown fence inside the tags.
    if body.startswith("```"):
        body = re.sub(r"^```(?:json)?\s*|\s*```$", "", body)
    try:
        obj = json.loads(body)
    except (json.JSONDecodeError, ValueError, RecursionError) as exc:
        return CallParseError(raw=body[:200], reason=f"invalid JSON in tool call: {exc}")
    if not isinstance(obj, dict):
        return CallParseError(raw=body[:200], reason="a tool call must be a JSON object")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return CallParseError(raw=body[:200], reason='a tool call needs a string "name"')
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):  # some templates emit arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except (json.JSONDecodeError, ValueError, RecursionError):
            return CallParseError(raw=body[:200], reason='"arguments" is a string that is not JSON')
    if not isinstance(arguments, dict):
        return CallParseError(raw=body[:200], reason='"arguments" must be a JSON object')
    return ToolCall(name=name, arguments=arguments)


def parse_tool_calls(message: str) -> list[ParsedItem]:
    """All calls in a message, in order; malformed ones as :class:`CallParseError`.

    Returns an empty list for a plain reply. At most ``MAX_CALLS_PER_MESSAGE`` items are
    returned; extra tags become one trailing error.
    """
    if not isinstance(message, str):
        return [CallParseError(raw=repr(message)[:200], reason="the action must be a string")]
    bodies = _CALL_PATTERN.findall(message)
    items: list[ParsedItem] = [_decode_call(b) for b in bodies[:MAX_CALLS_PER_MESSAGE]]
    if len(bodies) > MAX_CALLS_PER_MESSAGE:
        items.append(
            CallParseError(raw="", reason=f"more than {MAX_CALLS_PER_MESSAGE} calls in one message; the rest were ignored")
        )
    return items


def format_calls(calls: list[ToolCall], text: str = "") -> str:
    """An assistant message making ``calls`` (one tag per line), optionally after some text."""
    parts = [text] if text else []
    parts += [c.to_text() for c in calls]
    return "\n".join(parts)
