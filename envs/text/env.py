"""``ToolUseEnv``: a multi-turn conversation in which a language model calls stateful tools.

Observation: the conversation so far, a list of chat messages ``{"role": ..., "content": ...}``
(roles ``system``, ``user``, ``assistant``, ``tool``; tool messages also carry ``"name"``),
ready for ``tokenizer.apply_chat_template``. Action: the assistant's next message, a string.

    env = ToolUseEnv(split="train", seed=0)
    messages, info = env.reset(seed=1)
    messages, reward, terminated, truncated, info = env.step('<tool_call>{"name": "pwd", "arguments": {}}</tool_call>')

Episode: each message with ``<tool_call>`` tags runs the calls and appends one tool message per
call; a message without tags ends the user's turn, which is then checked (``envs.text.checker``)
and the next user turn is appended. After the last turn the episode terminates with reward 1 if
every turn passed, else 0 (reward is 0 on all other steps). ``max_steps_per_turn`` call-making
messages in one turn truncate the episode (reward 0).

Bad input never raises: malformed calls, unknown or withheld tools, invalid arguments and tools
refusing a call all produce an error tool message, and ``info["errors"]`` counts them by kind. A
message longer than ``action_space.max_length`` characters is cut to that length before it is read
or stored (counted as ``too_long``): a call past the cut is not seen.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from envs.text.checker import TurnChecker
from envs.text.parsing import CallParseError, ToolCall, has_tool_call, parse_tool_calls
from envs.text.suites import CallFailed, ToolSuite, World
from envs.text.tasks import DEFAULT_SUITE_GROUPS, VARIANTS, Task, TaskSet

Message = dict[str, str]

SYSTEM_PROMPT = """You are a helpful assistant with access to tools.

You may call these tools (JSON schemas):
<tools>
{tools}
</tools>

To call a tool, write a JSON object with its name and arguments between tags, like this:
<tool_call>{{"name": "tool_name", "arguments": {{"arg": "value"}}}}</tool_call>
You may make several calls in one message. Each result comes back in a tool message.
When the request is done, when you need more information from the user, or when no tool can do
what is asked, reply in plain text without any tool call: that ends your turn."""


class MessageSpace(gym.Space):
    """A string of at most ``max_length`` characters (an assistant message)."""

    def __init__(self, max_length: int = 100_000) -> None:
        super().__init__(shape=None, dtype=None)
        self.max_length = max_length

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return "".join(self.np_random.choice(list('abc <>{}"')) for _ in range(int(self.np_random.integers(0, 40))))


class ConversationSpace(gym.Space):
    """A list of chat messages, each a dict with string ``role`` and ``content``."""

    def __init__(self) -> None:
        super().__init__(shape=None, dtype=None)

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in x
        )

    def sample(self, mask: Any = None, probability: Any = None) -> list[Message]:
        return [{"role": "user", "content": "hello"}]


def render_tools(schemas: list[dict[str, Any]]) -> str:
    """One JSON schema per line, in the ``{"type": "function", "function": ...}`` layout."""
    return "\n".join(json.dumps({"type": "function", "function": s}, ensure_ascii=False) for s in schemas)


@functools.lru_cache(maxsize=4096)
def _system_prompt(template: str, suite_types: tuple[type[ToolSuite], ...], available: frozenset[str]) -> str:
    """The system prompt for a set of suites and available tools (cached: resets are frequent)."""
    schemas = [s for t in suite_types for s in t.tool_schemas() if s["name"] in available]
    return template.format(tools=render_tools(schemas))


def tool_message(name: str, payload: dict[str, Any], max_chars: int) -> Message:
    """A tool message whose content is JSON; over-long content is cut (and says so)."""
    content = json.dumps(payload, ensure_ascii=False, default=repr)
    if len(content) > max_chars:
        content = content[:max_chars] + f"... [truncated {len(content) - max_chars} characters]"
    return {"role": "tool", "name": name, "content": content}


class ToolUseEnv(gym.Env):
    """Multi-turn tool use with verifiable per-turn checks.

    Args:
        tasks: A ``TaskSet`` or a list of ``Task``; if None, one is built from the arguments below.
        split: ``"train"``, ``"test"`` or None, when building the task set.
        num_tasks: Number of task ids, when building the task set.
        seed: Seed of the task family, when building the task set.
        suite_groups: Suite combinations, when building the task set.
        variants: Variants, when building the task set.
        max_steps_per_turn: Call-making assistant messages allowed per user turn (BFCL uses 20).
        max_tool_result_chars: Safety cap on one tool message (long-context outputs stay below it).
        system_prompt: Template with a ``{tools}`` field; the default explains the call format.
        require_gold_calls: A turn passes only if every gold call was also made with the same name
            and arguments (RC-GRPO's success), besides the state, response and empty-turn checks.
    """

    metadata = {"render_modes": ["ansi"]}
    action_space: MessageSpace

    def __init__(
        self,
        tasks: TaskSet | Sequence[Task] | None = None,
        *,
        split: str | None = "train",
        num_tasks: int = 1000,
        seed: int = 0,
        suite_groups: Sequence[Sequence[str]] = DEFAULT_SUITE_GROUPS,
        variants: Sequence[str] = VARIANTS,
        max_steps_per_turn: int = 20,
        max_tool_result_chars: int = 200_000,
        system_prompt: str = SYSTEM_PROMPT,
        render_mode: str | None = None,
        require_gold_calls: bool = False,
    ) -> None:
        if max_steps_per_turn < 1:
            raise ValueError(f"max_steps_per_turn must be >= 1, got {max_steps_per_turn}")
        if "{tools}" not in system_prompt:
            raise ValueError("system_prompt must contain a {tools} field")
        self.tasks: TaskSet | list[Task] = (
            tasks
            if isinstance(tasks, TaskSet)
            else (
                list(tasks)
                if tasks is not None
                else TaskSet(num_tasks=num_tasks, seed=seed, suite_groups=suite_groups, variants=variants, split=split)
            )
        )
        if len(self.tasks) == 0:
            raise ValueError("no tasks")
        self.max_steps_per_turn = max_steps_per_turn
        self.max_tool_result_chars = max_tool_result_chars
        self.system_prompt = system_prompt
        self.render_mode = render_mode
        self.require_gold_calls = require_gold_calls
        self.observation_space = ConversationSpace()
        self.action_space = MessageSpace()
        self.task: Task | None = None
        self.messages: list[Message] = []

    # ---- episode bookkeeping ----
    def _pick_task(self, options: dict[str, Any] | None) -> Task:
        options = options or {}
        if "task" in options:
            return options["task"]
        if "task_id" in options:
            task_id = int(options["task_id"])
            if isinstance(self.tasks, TaskSet):
                return self.tasks.get(task_id)
            for task in self.tasks:
                if task.task_id == task_id:
                    return task
            raise KeyError(f"no task with id {task_id}")
        if isinstance(self.tasks, TaskSet):
            return self.tasks.sample(self.np_random)
        return self.tasks[int(self.np_random.integers(len(self.tasks)))]

    @property
    def tools(self) -> list[dict[str, Any]]:
        """Schemas of the tools callable now (for ``apply_chat_template(..., tools=...)``)."""
        return self.world.schemas(self.available)

    def _user_message(self, turn_index: int) -> Message:
        assert self.task is not None
        turn = self.task.turns[turn_index]
        content = turn.user
        if turn.released_tools:
            schemas = [s for s in self.world.schemas() if s["name"] in turn.released_tools]
            content += f"\n\n(New tool available:\n<tools>\n{render_tools(schemas)}\n</tools>)"
        return {"role": "user", "content": content}

    def _start_turn(self, turn_index: int) -> None:
        assert self.task is not None
        self.turn_index = turn_index
        self.steps_in_turn = 0
        self.turn_calls: list[ToolCall] = []
        self.turn_results: list[Any] = []
        self.available = self.task.available_tools(turn_index, self.world)
        self.messages.append(self._user_message(turn_index))

    def _info(self) -> dict[str, Any]:
        assert self.task is not None
        return {
            "task": self.task,
            "task_id": self.task.task_id,
            "variant": self.task.variant,
            "turn_index": self.turn_index,
            "num_turns": len(self.task.turns),
            "steps_in_turn": self.steps_in_turn,
            "errors": dict(self.errors),
            "num_errors": sum(self.errors.values()),
            "num_tool_calls": self.num_tool_calls,
            "turn_results": list(self.turn_verdicts),
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list[Message], dict[str, Any]]:
        """Start an episode. ``options``: ``{"task_id": int}`` or ``{"task": Task}``; else a random task."""
        super().reset(seed=seed)
        self.task = self._pick_task(options)
        self.world: World = self.task.build_world()
        self.checker = TurnChecker(self.task, self.require_gold_calls)
        self.turn_verdicts: list[dict[str, Any]] = []  # TurnResult.to_dict() of each finished turn
        self.errors: Counter[str] = Counter()
        self.num_tool_calls = 0
        self.done = False
        first_available = self.task.available_tools(0, self.world)
        suite_types = tuple(type(suite) for suite in self.world.suites.values())
        self.messages = [
            {"role": "system", "content": _system_prompt(self.system_prompt, suite_types, frozenset(first_available))}
        ]
        self._start_turn(0)
        return list(self.messages), self._info()

    # ---- one assistant message ----
    def _run_calls(self, action: str) -> None:
        for item in parse_tool_calls(action):
            if isinstance(item, CallParseError):
                self.errors["parse"] += 1
                self.messages.append(tool_message("error", {"error": item.reason}, self.max_tool_result_chars))
                continue
            self.num_tool_calls += 1
            self.turn_calls.append(item)
            try:
                result = self.world.execute(item, self.available)
            except CallFailed as failure:
                self.errors[failure.kind] += 1
                self.messages.append(
                    tool_message(item.name, {"name": item.name, "error": str(failure)}, self.max_tool_result_chars)
                )
                continue
            self.turn_results.append(result)
            self.messages.append(tool_message(item.name, {"name": item.name, "result": result}, self.max_tool_result_chars))

    def step(self, action: str) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        if self.done:
            raise RuntimeError("the episode is over; call reset()")
        if not isinstance(action, str):  # still no crash for a wrong type: treat it as text
            action = str(action)
        if len(action) > self.action_space.max_length:
            # Cut before anything reads it, as a generation limit would; counted, not raised.
            action = action[: self.action_space.max_length]
            self.errors["too_long"] += 1
        self.messages.append({"role": "assistant", "content": action})
        info_extra: dict[str, Any] = {}
        terminated = truncated = False
        reward = 0.0
        if has_tool_call(action):
            self._run_calls(action)
            self.steps_in_turn += 1
            if self.steps_in_turn >= self.max_steps_per_turn:
                result = self.checker.check_turn(
                    self.turn_index, self.world, self.turn_calls, self.turn_results, truncated=True
                )
                self.turn_verdicts.append(result.to_dict())
                info_extra["turn_result"] = self.turn_verdicts[-1]
                truncated = True
        else:
            result = self.checker.check_turn(self.turn_index, self.world, self.turn_calls, self.turn_results)
            self.turn_verdicts.append(result.to_dict())
            info_extra["turn_result"] = self.turn_verdicts[-1]
            if self.turn_index + 1 < len(self.task.turns):
                self._start_turn(self.turn_index + 1)
            else:
                terminated = True
                reward = float(all(r.passed for r in self.checker.results))
        self.done = terminated or truncated
        info = self._info() | info_extra
        if self.done:
            info["success"] = reward == 1.0
        return list(self.messages), reward, terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return "\n".join(f"[{m['role']}] {m['content']}" for m in self.messages)
