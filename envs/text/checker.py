"""Per-turn verification in the BFCL multi-turn model (docs/algorithms.md#multi-turn-tool-environments).

At the end of each user turn the gold calls of that turn are replayed on a separate gold world
(which carries over from turn to turn), then:

- state check: every public attribute of every suite equals the gold world's;
- response check: the gold results, as a multiset, are contained in the results of the model's
  successful calls in this turn (extra reads are fine, a missing one is not);
- empty-turn check: when the gold answer is empty (ask the user, or the tool is missing), the
  model must make no call at all.

A turn passes when every check passes and the turn was not cut by the step limit; the episode
reward is 1 only when every turn passes. ``calls_match`` (each gold call made with the same name
and arguments; extra calls allowed) is always reported, and with ``require_gold_calls`` it is a
check too (``"calls"``): RC-GRPO defines success that way, and it fails a call with wrong
arguments that happens to reach the gold state and responses (a transfer of 100.004 rounds to
the gold 100.00).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from envs.text.parsing import ToolCall
from envs.text.suites import World
from envs.text.tasks import Task


def canonical(value: Any) -> Any:
    """A hashable form of a JSON-like value for multiset comparisons: dicts become sorted item
    tuples, lists tuples. Numbers stay numbers, so ``100`` and ``100.0`` count as the same."""
    if isinstance(value, dict):
        return ("dict", tuple(sorted((str(k), canonical(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(canonical(v) for v in value))
    if isinstance(value, set):
        return ("set", tuple(sorted(map(repr, value))))
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


@dataclass
class TurnResult:
    """The verdict on one turn; ``failed_checks`` names the checks that failed."""

    turn_index: int
    passed: bool
    state_ok: bool
    response_ok: bool
    empty_turn_ok: bool
    calls_match: bool
    truncated: bool
    num_model_calls: int
    failed_checks: list[str] = field(default_factory=list)
    state_diff: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def state_differences(model: World, gold: World) -> list[str]:
    """``suite.attribute`` names whose values differ between two worlds."""
    model_state, gold_state = model.public_state(), gold.public_state()
    return [
        f"{suite}.{key}"
        for suite in gold_state
        for key in gold_state[suite]
        if model_state.get(suite, {}).get(key) != gold_state[suite][key]
    ]


class TurnChecker:
    """Holds the gold world of one episode and judges each turn as it ends."""

    def __init__(self, task: Task, require_gold_calls: bool = False) -> None:
        self.task = task
        self.require_gold_calls = require_gold_calls
        self.gold_world = task.build_world()
        self.results: list[TurnResult] = []

    def check_turn(
        self,
        turn_index: int,
        model_world: World,
        model_calls: list[ToolCall],
        model_results: list[Any],
        truncated: bool = False,
    ) -> TurnResult:
        """Judge turn ``turn_index``.

        Args:
            model_world: The world the model's calls acted on.
            model_calls: Every call the model made this turn that named a tool (valid or not).
            model_results: Results of the model's successful calls this turn.
            truncated: Whether the turn was cut by the step limit.
        """
        gold_calls = self.task.turns[turn_index].gold_calls
        gold_results = [self.gold_world.execute(call) for call in gold_calls]  # gold calls never fail
        diff = state_differences(model_world, self.gold_world)
        state_ok = not diff
        response_ok = not (Counter(map(canonical, gold_results)) - Counter(map(canonical, model_results)))
        empty_turn_ok = bool(gold_calls) or not model_calls
        made = Counter(canonical(c.to_dict()) for c in model_calls)
        calls_match = not (Counter(canonical(c.to_dict()) for c in gold_calls) - made)
        failed = [
            name
            for name, ok in (
                ("state", state_ok),
                ("response", response_ok),
                ("empty_turn", empty_turn_ok),
                ("step_limit", not truncated),
                ("calls", calls_match or not self.require_gold_calls),
            )
            if not ok
        ]
        result = TurnResult(
            turn_index=turn_index,
            passed=not failed,
            state_ok=state_ok,
            response_ok=response_ok,
            empty_turn_ok=empty_turn_ok,
            calls_match=calls_match,
            truncated=truncated,
            num_model_calls=len(model_calls),
            failed_checks=failed,
            state_diff=diff,
        )
        self.results.append(result)
        return result
