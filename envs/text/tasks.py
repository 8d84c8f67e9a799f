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
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from envs.text.parsing import ToolCall
from envs.text.suites import SUITE_DEFINITIONS, SUITES, World
from envs.text.suites.base import Draft, Template, copy_plain_data
from envs.text.suites.cross import CROSS_TEMPLATES

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
# The generator
# ---------------------------------------------------------------------------------------------


class TaskGenerationError(RuntimeError):
    """A template produced a gold call that fails: a bug in the templates, never the model's fault."""


def _templates_for(suites: Sequence[str]) -> list[Template]:
    pool = [t for s in suites for t in SUITE_DEFINITIONS[s].templates]
    for pair, templates in CROSS_TEMPLATES.items():
        if pair <= set(suites):
            pool += templates * 2  # cross-suite turns are the point of multi-suite tasks
    return pool


def _draft_turns(rng: random.Random, suites: Sequence[str], world: World, num_turns: int, long: bool) -> list[Draft]:
    pool = _templates_for(suites)
    drafts: list[Draft] = []
    for turn_index in range(num_turns):
        if long and turn_index == 0:
            candidates = [t for s in suites for t in SUITE_DEFINITIONS[s].long_templates]
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
    config = {s: SUITE_DEFINITIONS[s].initial_config(rng, long) for s in suites}
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
        first_uses: list[tuple[int, str]] = []
        for i, turn in enumerate(turns):
            earlier = {c.name for t in turns[:i] for c in t.gold_calls}
            first_uses += [(i, c.name) for c in turn.gold_calls if c.name not in earlier]
        i, tool = rng.choice(first_uses)  # turn 0 always qualifies, so first_uses is never empty
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
