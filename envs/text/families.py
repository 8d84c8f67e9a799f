"""Named families of text tasks: what the language-model agents take as ``--env``.

    tools:bank              the bank suite's tasks
    tools:bank+travel       tasks that use the bank and travel suites together (with cross-suite turns)
    tools:bank,travel       two groups: bank tasks and travel tasks, alternating by task id
    tools:all               the nine default groups (each suite alone and four pairs)
    python-math             numeric problems solved with a sandboxed python tool (PythonReasoningEnv)
    python-math-siblings    the same with 14 kinds: each of the 7 beside a sibling (kind 7 + k: the
                            question next to kind k's, one edit of its program), for holding out
                            kinds a model can reach from the kinds it trained on

    family = make_task_family("tools:bank", num_tasks=1000, variants=("base",))
    vec = family.vector_env(8)                                   # a TextVectorEnv of the family's env
    vec.reset(seed=0, options=[family.reset_options(family.train_ids[0])] * 8)   # one GRPO group

A family holds every task id of both splits (the split is a fixed hash of the id,
``envs.text.tasks.split_of``): ``train_ids`` for training, ``test_ids`` for held-out evaluation.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from envs.text.suites import SUITES
from envs.text.tasks import DEFAULT_SUITE_GROUPS, VARIANTS, TaskSet, split_of
from envs.text.vector import TextVectorEnv

TOOLS_PREFIX = "tools:"
PYTHON_MATH = "python-math"
PYTHON_MATH_SIBLINGS = "python-math-siblings"
EXAMPLES = ("tools:bank", "tools:bank+travel", "tools:bank,travel", "tools:all", PYTHON_MATH, PYTHON_MATH_SIBLINGS)


@dataclass
class TaskFamily:
    """The tasks behind one ``--env`` name and how to make environments over them.

    Attributes:
        name: The name it was made from.
        kind: ``tools`` (``ToolUseEnv``) or ``python-math`` (``PythonReasoningEnv``).
        train_ids, test_ids: Task ids of each split.
        make_env: A fresh environment that can reset to any of the family's ids.
        id_option: The ``reset`` option that selects a task (``task_id`` or ``problem_id``).
        step_threads: Threads a vector env steps its envs with (sandboxed code waits on processes).
        variant_of: The tool suites' task variant of an id (``base``, ``missing_function``, ...);
            None for families without variants.
    """

    name: str
    kind: str
    train_ids: list[int]
    test_ids: list[int]
    make_env: Callable[[], gym.Env]
    id_option: str
    step_threads: int = 1
    variant_of: Callable[[int], str] | None = None

    def reset_options(self, task_id: int) -> dict[str, Any]:
        """The ``reset`` options that start task ``task_id``."""
        return {self.id_option: int(task_id)}

    def vector_env(self, num_envs: int) -> TextVectorEnv:
        """``num_envs`` environments stepped together, finished ones left alone until the next reset."""
        return TextVectorEnv([self.make_env] * num_envs, autoreset=False, num_threads=min(self.step_threads, max(num_envs, 1)))


def parse_suite_groups(spec: str) -> list[tuple[str, ...]]:
    """``bank+travel,calculator`` -> ``[("bank", "travel"), ("calculator",)]``; ``all`` -> the default groups.

    Raises:
        ValueError: an empty group or an unknown suite, naming the known ones.
    """
    if spec == "all":
        return [tuple(g) for g in DEFAULT_SUITE_GROUPS]
    groups = []
    for part in spec.split(","):
        suites = tuple(s.strip() for s in part.split("+"))
        if not all(suites):
            raise ValueError(f"empty suite name in {TOOLS_PREFIX}{spec!r}; write e.g. tools:bank or tools:bank+travel")
        for suite in suites:
            if suite not in SUITES:
                close = difflib.get_close_matches(suite, list(SUITES), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"unknown tool suite {suite!r}{hint}; suites: {', '.join(SUITES)}")
        if len(set(suites)) != len(suites):
            raise ValueError(f"suite repeated in group {part!r}")
        groups.append(suites)
    return groups


def make_task_family(
    name: str,
    *,
    num_tasks: int = 1000,
    task_seed: int = 0,
    variants: Sequence[str] = VARIANTS,
    max_steps_per_turn: int = 20,
    require_gold_calls: bool = False,
    sandbox_limits: Any = None,
    test_kinds: Sequence[int] = (),
    kinds: Sequence[int] = (),
) -> TaskFamily:
    """The family a name describes (see the module docstring for the names).

    Args:
        num_tasks: Task ids ``0 .. num_tasks-1`` (about 20% are the test split).
        task_seed: Seed of the task family.
        variants: Tool suites: task variants to cycle over (``envs.text.tasks.VARIANTS``).
        max_steps_per_turn: Call-making assistant messages per user turn before the episode is
            truncated (python-math has one user turn: its ``max_tool_turns``).
        require_gold_calls: Tool suites: a turn passes only if every gold call was made with its
            arguments (RC-GRPO's success), besides the state and response checks.
        sandbox_limits: python-math: the ``SandboxLimits`` of the python tool (default limits if None).
        test_kinds: python-math: problem kinds (``envs.text.tir_env.ALL_KINDS`` indices, 0-6, or 0-13
            for python-math-siblings) held out whole as the test split, so evaluation asks for kinds
            training never saw; empty: the hashed ~20% split of every kind.
        kinds: python-math: the problem kinds the family keeps, train and test split alike (the
            test split is then the hashed ~20% of these kinds, or ``test_kinds`` among them), for
            example the kinds a warm start solves only sometimes, whose groups have reward
            variance; empty: every kind.

    Raises:
        ValueError: an unknown name, with the forms that exist and the closest match.
    """
    if (test_kinds or kinds) and name not in (PYTHON_MATH, PYTHON_MATH_SIBLINGS):
        flag = "test kinds (whole problem kinds held out)" if test_kinds else "kinds (the problem kinds kept)"
        raise ValueError(f"{flag} exist for {PYTHON_MATH} and {PYTHON_MATH_SIBLINGS} only, not {name!r}")
    if name in (PYTHON_MATH, PYTHON_MATH_SIBLINGS):
        from envs.text.tir_env import ALL_KINDS, ProblemSet, PythonReasoningEnv, problem_kind

        siblings = name == PYTHON_MATH_SIBLINGS
        all_kinds = ALL_KINDS if siblings else ALL_KINDS[:7]
        problems = ProblemSet(num_problems=num_tasks, seed=task_seed, split=None, siblings=siblings)
        names = ", ".join(f"{k} {kind}" for k, kind in enumerate(all_kinds))
        kept = set(kinds) or set(range(len(all_kinds)))
        if not kept <= set(range(len(all_kinds))):
            raise ValueError(f"kinds {sorted(set(kinds))}: give kinds among 0-{len(all_kinds) - 1} ({names})")
        ids = [i for i in problems.problem_ids if problem_kind(i, siblings) in kept]
        held_out = set(test_kinds)
        if not held_out <= kept or len(held_out) == len(kept):
            among = f"0-{len(all_kinds) - 1}" if len(kept) == len(all_kinds) else f"the kinds kept, {sorted(kept)}"
            raise ValueError(f"test kinds {sorted(held_out)}: give some but not all of {among} ({names})")
        is_test = (lambda i: problem_kind(i, siblings) in held_out) if held_out else (lambda i: split_of(i) == "test")
        return TaskFamily(
            name=name,
            kind=PYTHON_MATH,
            train_ids=[i for i in ids if not is_test(i)],
            test_ids=[i for i in ids if is_test(i)],
            make_env=lambda: PythonReasoningEnv(problems, max_tool_turns=max_steps_per_turn, limits=sandbox_limits),
            id_option="problem_id",
            step_threads=4,
        )
    if name.startswith(TOOLS_PREFIX):
        from envs.text.env import ToolUseEnv

        groups = parse_suite_groups(name[len(TOOLS_PREFIX) :])
        tasks = TaskSet(num_tasks=num_tasks, seed=task_seed, suite_groups=groups, variants=variants, split=None)
        return TaskFamily(
            name=name,
            kind="tools",
            train_ids=[i for i in tasks.task_ids if split_of(i) == "train"],
            test_ids=[i for i in tasks.task_ids if split_of(i) == "test"],
            make_env=lambda: ToolUseEnv(tasks, max_steps_per_turn=max_steps_per_turn, require_gold_calls=require_gold_calls),
            id_option="task_id",
            variant_of=lambda task_id: tasks.get(task_id).variant,
        )
    close = difflib.get_close_matches(name, list(EXAMPLES), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(
        f"unknown text task family {name!r}.{hint} Names: tools:<suites> (a suite, suites joined by '+' for "
        f"tasks that use them together, groups separated by ','; suites: {', '.join(SUITES)}; or tools:all) "
        f"and {PYTHON_MATH} or {PYTHON_MATH_SIBLINGS}; e.g. {', '.join(EXAMPLES)}"
    )
