"""Scripted policies and trajectory export.

- ``ExpertPolicy`` replays each turn's gold calls in one message, then replies in plain text;
  it earns reward 1 on every task.
- ``NoisyPolicy`` acts like the expert but, in a fraction of episodes, makes one realistic
  mistake in one turn: a wrong argument, a missing call or an extra (state-changing) call
  (``every_turn``: one in each turn that has gold calls); asked for by name (``GAP_CALL``), it
  also calls tools in a gap turn where it should say no tool can do it or ask for a value.
  Mixed with expert episodes this gives the successful/failed trajectory mix RC-GRPO's first
  stage trains on.

A policy maps ``(observation, info)`` to the assistant's message; it reads the gold answer from
``info["task"]``, which only scripted policies use. ``rollout`` runs one episode and returns a
``Trajectory``: the chat messages plus the reward and the per-turn verdicts, ready for JSONL.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from envs.text.parsing import ToolCall, format_calls
from envs.text.suites import SUITE_DEFINITIONS, SUITES
from envs.text.tasks import Task, Turn

MISTAKE_KINDS = ("wrong_argument", "missing_call", "extra_call")
GAP_CALL = "gap_call"
"""A mistake the noisy policy makes only when asked for by name (not among the default ``MISTAKE_KINDS``):
in the gap turn of a ``missing_function`` or ``missing_parameter`` task it calls the tools anyway
(the follow-up turn's gold calls; for a missing parameter with one argument guessed wrong) instead
of saying that no tool can do it or asking for the value, which the turn's empty-turn check fails."""
GAP_KINDS = ("missing_function", "missing_parameter")
NOISY_KINDS = (*MISTAKE_KINDS, GAP_CALL)
"""Every kind ``NoisyPolicy`` accepts."""
_TOOL_SUITE = {tool: name for name, cls in SUITES.items() for tool in cls.tool_names()}


class Policy(Protocol):
    def act(self, observation: list[dict[str, str]], info: dict[str, Any]) -> str: ...


def _is_new_episode(observation: list[dict[str, str]]) -> bool:
    return len(observation) == 2  # system prompt + first user turn: nothing said yet


def _plain_reply(turn: Turn) -> str:
    if turn.kind == "missing_parameter":
        return "I need one more detail before I can do that. Could you tell me what is missing?"
    if turn.kind == "missing_function":
        return "Sorry, none of the tools I have can do that."
    return "Done."


class ExpertPolicy:
    """Emit the turn's gold calls in one message, then a call-free reply."""

    def calls_for_turn(self, task: Task, turn_index: int) -> list[ToolCall]:
        return list(task.turns[turn_index].gold_calls)

    def act(self, observation: list[dict[str, str]], info: dict[str, Any]) -> str:
        task: Task = info["task"]
        turn = task.turns[info["turn_index"]]
        if info["steps_in_turn"] == 0:
            calls = self.calls_for_turn(task, info["turn_index"])
            if calls:
                return format_calls(calls)
        return _plain_reply(turn)


def perturb_value(value: Any) -> Any:
    """A plausible wrong value: a typo'd name, a neighbouring id, an off-by-one number."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, list) and value:
        return [perturb_value(value[0])] + value[1:]
    if isinstance(value, str):
        if value and value[-1].isdigit():  # ids and dates: the neighbouring one
            return value[:-1] + str((int(value[-1]) + 1) % 10)
        if value.startswith("/"):  # a path: a near-miss file name
            head, _, tail = value.rpartition("/")
            stem, dot, ext = tail.partition(".")
            return f"{head}/{stem[:-1] or 'x'}{dot}{ext}"
        return value + "s"
    return value


@dataclass
class Mistake:
    """What the noisy policy did wrong, and which check should catch it."""

    turn_index: int
    kind: str
    call: dict[str, Any]
    expected_check: str


class NoisyPolicy(ExpertPolicy):
    """The expert with one realistic mistake in a fraction of episodes.

    Args:
        mistake_prob: Probability that an episode contains a mistake (0.5 gives a 1:1 mix).
        kinds: Mistake kinds to draw from (subset of ``MISTAKE_KINDS`` plus ``GAP_CALL``). With
            ``GAP_CALL`` among them, a mistaken episode of a task with a gap turn errs in that turn
            (and, with ``every_turn``, also in each turn with gold calls, by the other kinds); other
            tasks draw from the other kinds, and make no mistake when there are none.
        seed: Seed of the policy's own random stream.
        every_turn: A mistaken episode errs in every turn that has gold calls, each turn's kind
            drawn on its own, instead of in one of them: the mistake is then the usual behaviour
            of such an episode at each of its turns, not an exception in one.
    """

    def __init__(
        self, mistake_prob: float = 0.5, kinds: Iterable[str] = MISTAKE_KINDS, seed: int = 0, every_turn: bool = False
    ) -> None:
        self.kinds = tuple(kinds)
        if not self.kinds or set(self.kinds) - set(NOISY_KINDS):
            raise ValueError(f"kinds must be a non-empty subset of {NOISY_KINDS}, got {self.kinds}")
        if not 0.0 <= mistake_prob <= 1.0:
            raise ValueError(f"mistake_prob must be in [0, 1], got {mistake_prob}")
        self.mistake_prob = mistake_prob
        self.every_turn = every_turn
        self.rng = random.Random(seed)
        self.mistakes: list[Mistake] = []  # of the current episode
        self._plan: dict[int, str] = {}  # turn index -> mistake kind

    def _plan_episode(self, task: Task) -> None:
        self.mistakes = []
        self._plan = {}
        call_kinds = [k for k in self.kinds if k != GAP_CALL]
        candidates = [i for i, t in enumerate(task.turns) if t.gold_calls] if call_kinds else []
        gaps = [i for i, t in enumerate(task.turns) if t.kind in GAP_KINDS] if GAP_CALL in self.kinds else []
        if gaps and self.rng.random() < self.mistake_prob:  # the gap is this task's characteristic slip
            self._plan = dict.fromkeys(gaps, GAP_CALL)
            if self.every_turn:
                self._plan |= {turn: self.rng.choice(call_kinds) for turn in candidates}
        elif not gaps and candidates and self.rng.random() < self.mistake_prob:
            turns = candidates if self.every_turn else [self.rng.choice(candidates)]
            self._plan = {turn: self.rng.choice(call_kinds) for turn in turns}

    def calls_for_turn(self, task: Task, turn_index: int) -> list[ToolCall]:
        calls = super().calls_for_turn(task, turn_index)
        if turn_index not in self._plan:
            return calls
        kind = self._plan[turn_index]
        if kind == GAP_CALL:
            return self._gap_calls(task, turn_index)
        with_args = [j for j, c in enumerate(calls) if c.arguments]
        if kind == "wrong_argument" and not with_args:
            # Nothing to get wrong: forget a call instead (or add one, where forgetting is not a kind asked for).
            kind = "missing_call" if "missing_call" in self.kinds else "extra_call"
        if kind == "extra_call":
            suite = _TOOL_SUITE[self.rng.choice(calls).name]
            extra = SUITE_DEFINITIONS[suite].distractor(task.initial_config[suite])
            calls.append(extra)  # last, so no gold call can overwrite its effect (memory_store after memory_add)
            self.mistakes.append(Mistake(turn_index, kind, extra.to_dict(), "state"))
            return calls
        j = self.rng.choice(with_args) if kind == "wrong_argument" else self.rng.randrange(len(calls))
        call = calls[j]
        expected = "response" if SUITES[_TOOL_SUITE[call.name]].is_read_only(call.name) else "state"
        if kind == "missing_call":
            del calls[j]
        else:
            # Names, ids and paths are the usual slips; change a string argument when there is one.
            strings = [k for k, v in call.arguments.items() if isinstance(v, str)]
            key = self.rng.choice(strings) if strings else self.rng.choice(sorted(call.arguments))
            calls[j] = ToolCall(call.name, {**call.arguments, key: perturb_value(call.arguments[key])})
        self.mistakes.append(Mistake(turn_index, kind, call.to_dict(), expected))
        return calls

    def _gap_calls(self, task: Task, turn_index: int) -> list[ToolCall]:
        """The follow-up turn's gold calls, made in the gap turn; a missing parameter is guessed."""
        calls = list(task.turns[turn_index + 1].gold_calls)
        if not calls:
            return calls
        if task.turns[turn_index].kind == "missing_parameter":
            j = self.rng.randrange(len(calls))
            if calls[j].arguments:
                key = self.rng.choice(sorted(calls[j].arguments))
                calls[j] = ToolCall(calls[j].name, {**calls[j].arguments, key: perturb_value(calls[j].arguments[key])})
        self.mistakes.append(Mistake(turn_index, GAP_CALL, calls[0].to_dict(), "empty_turn"))
        return calls

    def act(self, observation: list[dict[str, str]], info: dict[str, Any]) -> str:
        if _is_new_episode(observation):
            self._plan_episode(info["task"])
        if info["steps_in_turn"] > 0 and self._plan.get(info["turn_index"]) == GAP_CALL:
            return "Done."  # as if the calls had done what was asked
        return super().act(observation, info)


@dataclass
class Trajectory:
    """One finished episode, for training data.

    Attributes:
        messages: The whole conversation (system, user, assistant, tool messages).
        reward: Episode reward (1.0 when every turn passed).
        turn_results: Per-turn verdicts (``TurnResult.to_dict()``), for turn-level credit.
        mistakes: For the noisy policy, what it did wrong (empty otherwise).
    """

    task_id: int
    variant: str
    suites: list[str]
    messages: list[dict[str, str]]
    reward: float
    truncated: bool
    turn_results: list[dict[str, Any]]
    errors: dict[str, int]
    mistakes: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rollout(
    env: Any, policy: Policy, *, seed: int | None = None, options: dict[str, Any] | None = None, max_messages: int = 1000
) -> Trajectory:
    """Run one episode of ``env`` (``ToolUseEnv`` or ``PythonReasoningEnv``) with ``policy``; return it."""
    observation, info = env.reset(seed=seed, options=options)
    reward, terminated, truncated = 0.0, False, False
    for _ in range(max_messages):
        observation, reward, terminated, truncated, info = env.step(policy.act(observation, info))
        if terminated or truncated:
            break
    task: Task | None = info.get("task")
    return Trajectory(
        task_id=task.task_id if task else int(info.get("problem_id", -1)),
        variant=task.variant if task else "python_reasoning",
        suites=list(task.suites) if task else ["python"],
        messages=observation,
        reward=float(reward),
        truncated=bool(truncated),
        turn_results=info.get("turn_results", []),
        errors=info["errors"],
        mistakes=[asdict(m) for m in getattr(policy, "mistakes", [])],
    )


def save_jsonl(trajectories: Iterable[Trajectory], path: str | Path) -> int:
    """Write one JSON object per line; returns the number written."""
    count = 0
    with open(path, "w", encoding="utf-8") as f:
        for trajectory in trajectories:
            f.write(json.dumps(trajectory.to_dict(), ensure_ascii=False) + "\n")
            count += 1
    return count


def load_jsonl(path: str | Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
