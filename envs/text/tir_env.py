"""``PythonReasoningEnv``: tool-integrated reasoning on problems with verifiable numeric answers.

The model may run Python through one tool, ``python``, executed in :class:`PythonSandbox`; it
ends the episode with a message without tool calls that contains its answer as
``\\boxed{...}`` (or ``<answer>...</answer>``). Reward 1 when the answer equals the known one
(relative tolerance 1e-6), else 0. ``max_tool_turns`` call-making messages truncate the episode.

Observations and actions are chat messages and strings, as in :class:`envs.text.env.ToolUseEnv`.
"""

from __future__ import annotations

import json
import math
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from envs.text.env import ConversationSpace, Message, MessageSpace, render_tools, tool_message
from envs.text.parsing import CallParseError, has_tool_call, parse_tool_calls
from envs.text.sandbox import PythonSandbox, SandboxLimits
from envs.text.schema import function_schema, validate_arguments
from envs.text.tasks import split_of


def python(code: str) -> str:
    """Run a Python script in a sandbox and return what it prints (stdout and stderr).

    Args:
        code: The complete script; use print() to see results. No network, no subprocesses,
            only the current directory is writable, a few seconds of CPU.
    """
    raise NotImplementedError("executed by the environment's sandbox")  # only its schema is used


PYTHON_TOOL = function_schema(python)

TIR_SYSTEM_PROMPT = """You are a careful mathematician. You may run Python to compute things.

Tools (JSON schemas):
<tools>
{tools}
</tools>

To run code, write <tool_call>{{"name": "python", "arguments": {{"code": "print(1 + 1)"}}}}</tool_call>
and the printed output comes back in a tool message. When you know the answer, reply without any
tool call and put the final number in \\boxed{{...}}."""


@dataclass(frozen=True)
class Problem:
    """A question with a numeric answer and a reference program that prints it."""

    problem_id: int
    question: str
    answer: float
    solution_code: str

    @property
    def split(self) -> str:
        return split_of(self.problem_id)


PROBLEM_KINDS = (
    "prime sum",
    "divisor count",
    "Fibonacci modulo m",
    "digit sum of a power",
    "multiples of a or b",
    "compound interest",
    "binomial coefficient",
)
"""the kind of problem ``i`` is ``PROBLEM_KINDS[i % 7]``"""

SIBLING_KINDS = (
    "prime count",
    "divisor sum",
    "Lucas modulo m",
    "digit count of a power",
    "multiples of a and b",
    "simple interest",
    "permutations",
)
"""With ``siblings=True`` a problem set has 14 kinds: kind ``7 + k`` asks the question next to kind
``k`` (the same inputs, a changed word or two), and its reference program is kind ``k``'s with one
edit. Held out whole, a sibling kind is new to a model trained on kind ``k``, yet within reach of
one that reads the question."""

ALL_KINDS = PROBLEM_KINDS + SIBLING_KINDS


def problem_kind(problem_id: int, siblings: bool = False) -> int:
    """The kind (index into ``ALL_KINDS``) of problem ``problem_id``: ``id % 7``, or ``id % 14`` with siblings."""
    return problem_id % (len(ALL_KINDS) if siblings else len(PROBLEM_KINDS))


def _problem(problem_id: int, seed: int, siblings: bool = False) -> Problem:
    """One problem, a pure function of (problem_id, seed, siblings); the answer is computed by running
    the same reference code in this process (trusted, short). A sibling kind (7 + k) draws kind k's
    inputs from the same ranges and changes a word of its question and one edit of its program."""
    rng = random.Random(f"tir/{seed}/{problem_id}")
    kind = problem_kind(problem_id, siblings)
    sibling, k = kind >= len(PROBLEM_KINDS), kind % len(PROBLEM_KINDS)
    if k == 0:
        n = rng.randint(1000, 20000)
        question = (
            f"How many prime numbers are there below {n}?" if sibling else f"What is the sum of all prime numbers below {n}?"
        )
        code = (
            f"n = {n}\nsieve = [True] * n\nsieve[0:2] = [False, False]\n"
            "for i in range(2, int(n ** 0.5) + 1):\n    if sieve[i]:\n        sieve[i*i::i] = [False] * len(sieve[i*i::i])\n"
            f"print(sum({'1' if sibling else 'i'} for i in range(n) if sieve[i]))"
        )
    elif k == 1:
        n = rng.randint(10_000, 2_000_000)
        question = (
            f"What is the sum of all positive divisors of {n}?" if sibling else f"How many positive divisors does {n} have?"
        )
        code = f"n = {n}\nprint(sum({'d' if sibling else '1'} for d in range(1, n + 1) if n % d == 0))"
    elif k == 2:
        j, m = rng.randint(100, 5000), rng.choice([997, 1009, 10007, 65537])
        name, second = ("L", 3) if sibling else ("F", 1)
        start = f"{name}(1) = 1, {name}(2) = 3 and" if sibling else f"{name}(1) = {name}(2) = 1 and"
        question = f"With {start} {name}(n) = {name}(n-1) + {name}(n-2), what is {name}({j}) modulo {m}?"
        code = f"a, b = 1, {second}\nfor _ in range({j} - 2):\n    a, b = b, (a + b) % {m}\nprint(b % {m})"
    elif k == 3:
        a, b = rng.randint(2, 9), rng.randint(50, 400)
        if sibling:
            question, code = f"How many decimal digits does {a}^{b} have?", f"print(len(str({a} ** {b})))"
        else:
            question, code = (
                f"What is the sum of the decimal digits of {a}^{b}?",
                f"print(sum(int(c) for c in str({a} ** {b})))",
            )
    elif k == 4:
        n, a, b = rng.randint(1000, 10**6), rng.randint(3, 20), rng.randint(3, 20)
        divisible = f"both {a} and {b}" if sibling else f"{a} or by {b}"
        question = f"How many integers from 1 to {n} inclusive are divisible by {divisible}?"
        code = f"print(sum(1 for i in range(1, {n} + 1) if i % {a} == 0 {'and' if sibling else 'or'} i % {b} == 0))"
    elif k == 5:
        p, r, y = rng.randint(1000, 50000), rng.choice([1.5, 2.5, 3.0, 4.25, 5.0, 7.5]), rng.randint(3, 30)
        question = (
            f"{p} dollars are invested at {r}% per year, {'simple interest' if sibling else 'compounded annually'}. "
            f"What are they worth after {y} years, rounded to cents?"
        )
        growth = f"(1 + {r} / 100 * {y})" if sibling else f"(1 + {r} / 100) ** {y}"
        code = f"print(round({p} * {growth}, 2))"
    else:
        n, j = rng.randint(20, 60), rng.randint(3, 10)
        if sibling:
            question = f"In how many ways can {j} of {n} distinct items be lined up in order?"
        else:
            question = f"In how many ways can {j} items be chosen from {n} distinct items, if order does not matter?"
        code = f"import math\nprint(math.{'perm' if sibling else 'comb'}({n}, {j}))"
    return _checked_problem(problem_id, question, code)


def _checked_problem(problem_id: int, question: str, code: str) -> Problem:
    """The problem with the answer its reference program prints, run here (our own short code)."""
    printed: list[str] = []
    exec(code.replace("print(", "_print("), {"_print": lambda v: printed.append(str(v))})  # noqa: S102  (our own code)
    return Problem(problem_id=problem_id, question=question, answer=float(printed[-1]), solution_code=code)


class ProblemSet:
    """Problems ``0 .. num_problems-1`` for a seed, optionally one split only; ``siblings``: the 14
    kinds of ``ALL_KINDS`` instead of the 7 of ``PROBLEM_KINDS``."""

    def __init__(self, num_problems: int = 700, seed: int = 0, split: str | None = None, siblings: bool = False) -> None:
        if split not in (None, "train", "test"):
            raise ValueError(f"split must be 'train', 'test' or None, got {split!r}")
        self.seed = seed
        self.siblings = siblings
        self.problem_ids = [i for i in range(num_problems) if split is None or split_of(i) == split]
        if not self.problem_ids:
            raise ValueError("no problems in this split")
        self._cache: dict[int, Problem] = {}

    def __len__(self) -> int:
        return len(self.problem_ids)

    def get(self, problem_id: int) -> Problem:
        if problem_id not in self._cache:
            self._cache[problem_id] = _problem(problem_id, self.seed, self.siblings)
        return self._cache[problem_id]

    def __iter__(self):
        return (self.get(i) for i in self.problem_ids)


_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"


def _answer_tags(message: str) -> list[str]:
    """Bodies of ``<answer>...</answer>`` pairs, each from an opening tag to the next closing tag.

    A scan with ``str.find``, linear in the message: a lazy regex would rescan the rest of the
    message from every unclosed opening tag (quadratic; a minute for 200 kB of ``<answer>``).
    """
    bodies = []
    position = 0
    while (start := message.find(ANSWER_OPEN, position)) >= 0:
        end = message.find(ANSWER_CLOSE, start + len(ANSWER_OPEN))
        if end < 0:
            break  # no closing tag after this one, hence none after any later one either
        bodies.append(message[start + len(ANSWER_OPEN) : end])
        position = end + len(ANSWER_CLOSE)
    return bodies


def extract_answer(message: str) -> float | None:
    """The last ``\\boxed{...}`` or ``<answer>...</answer>`` value as a number, else None."""
    found = _BOXED.findall(message) + _answer_tags(message)
    if not found:
        return None
    text = found[-1].strip().replace(",", "").replace("$", "").replace(" ", "")
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def is_correct(predicted: float | None, answer: float) -> bool:
    return predicted is not None and math.isclose(predicted, answer, rel_tol=1e-6, abs_tol=1e-6)


class PythonReasoningEnv(gym.Env):
    """Numeric problems with a sandboxed ``python`` tool.

    Args:
        problems: A ``ProblemSet`` or list of ``Problem``; built from the arguments below if None.
        split, num_problems, seed: Used to build the problem set.
        max_tool_turns: Call-making messages allowed before truncation.
        limits: Sandbox limits (CPU, wall, memory, output size) of each call.
        message_seconds: Wall-clock budget of one assistant message, shared by all its python
            calls: each call gets what is left (at most ``limits.wall_seconds``), and calls made
            once it is spent are answered with an error without running. This bounds one
            ``step`` however many calls the message holds.

    A message longer than ``action_space.max_length`` characters (``MessageSpace``, 100,000 by
    default) is cut to that length before it is read or stored, and counted in
    ``info["errors"]`` as ``too_long``; a tool call or answer past the cut is not seen.
    """

    metadata = {"render_modes": []}
    action_space: MessageSpace

    def __init__(
        self,
        problems: ProblemSet | Sequence[Problem] | None = None,
        *,
        split: str | None = "train",
        num_problems: int = 700,
        seed: int = 0,
        max_tool_turns: int = 8,
        limits: SandboxLimits | None = None,
        system_prompt: str = TIR_SYSTEM_PROMPT,
        message_seconds: float = 20.0,
    ) -> None:
        if max_tool_turns < 1:
            raise ValueError(f"max_tool_turns must be >= 1, got {max_tool_turns}")
        if not message_seconds > 0:
            raise ValueError(f"message_seconds must be > 0, got {message_seconds}")
        self.message_seconds = message_seconds
        self.problems = problems if problems is not None else ProblemSet(num_problems, seed, split)
        self.max_tool_turns = max_tool_turns
        self.sandbox = PythonSandbox(limits)
        self.system_prompt = system_prompt
        self.observation_space = ConversationSpace()
        self.action_space = MessageSpace()
        self.problem: Problem | None = None
        self.tools = [PYTHON_TOOL]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list[Message], dict[str, Any]]:
        """Start an episode; ``options``: ``{"problem_id": int}`` or ``{"problem": Problem}``."""
        super().reset(seed=seed)
        options = options or {}
        if "problem" in options:
            self.problem = options["problem"]
        elif "problem_id" in options:
            self.problem = (
                self.problems.get(int(options["problem_id"]))
                if isinstance(self.problems, ProblemSet)
                else next(p for p in self.problems if p.problem_id == int(options["problem_id"]))
            )
        else:
            pool = self.problems.problem_ids if isinstance(self.problems, ProblemSet) else list(range(len(self.problems)))
            pick = pool[int(self.np_random.integers(len(pool)))]
            self.problem = self.problems.get(pick) if isinstance(self.problems, ProblemSet) else self.problems[pick]
        self.messages: list[Message] = [
            {"role": "system", "content": self.system_prompt.format(tools=render_tools(self.tools))},
            {"role": "user", "content": self.problem.question},
        ]
        self.tool_turns = 0
        self.errors: dict[str, int] = {}
        self.sandbox_runs = 0
        self.sandbox_kills = 0
        self.done = False
        return list(self.messages), self._info()

    def _info(self) -> dict[str, Any]:
        assert self.problem is not None
        return {
            "problem": self.problem,
            "problem_id": self.problem.problem_id,
            "tool_turns": self.tool_turns,
            "errors": dict(self.errors),
            "num_errors": sum(self.errors.values()),
            "sandbox_runs": self.sandbox_runs,
            "sandbox_kills": self.sandbox_kills,
        }

    def _count(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def _run_calls(self, action: str) -> None:
        deadline = time.monotonic() + self.message_seconds
        for item in parse_tool_calls(action):
            if isinstance(item, CallParseError):
                self._count("parse")
                self.messages.append(tool_message("error", {"error": item.reason}, 20_000))
                continue
            if item.name != "python":
                self._count("unknown_tool")
                self.messages.append(
                    tool_message(
                        item.name,
                        {"name": item.name, "error": f"unknown tool {item.name!r}; the only tool is 'python'"},
                        20_000,
                    )
                )
                continue
            problem = validate_arguments(python, item.arguments)
            if problem:
                self._count("bad_arguments")
                self.messages.append(tool_message("python", {"name": "python", "error": problem}, 20_000))
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._count("time_budget")
                self.messages.append(
                    tool_message(
                        "python",
                        {
                            "name": "python",
                            "error": f"not run: this message's {self.message_seconds:g} s for python calls are spent; "
                            "do the work in fewer, shorter calls",
                        },
                        20_000,
                    )
                )
                continue
            result = self.sandbox.run(item.arguments["code"], wall_seconds=remaining)
            self.sandbox_runs += 1
            if result.killed_reason:
                self.sandbox_kills += 1
            if not result.ok:
                self._count("tool_error")
            self.messages.append({"role": "tool", "name": "python", "content": result.to_text()})

    def step(self, action: str) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        if self.problem is None:
            raise RuntimeError("call reset() before step()")
        if self.done:
            raise RuntimeError("the episode is over; call reset()")
        if not isinstance(action, str):
            action = str(action)
        if len(action) > self.action_space.max_length:
            # Cut before anything reads it, as a generation limit would; counted, not raised.
            action = action[: self.action_space.max_length]
            self._count("too_long")
        self.messages.append({"role": "assistant", "content": action})
        if has_tool_call(action):
            self._run_calls(action)
            self.tool_turns += 1
            truncated = self.tool_turns >= self.max_tool_turns
            self.done = truncated
            info = self._info() | ({"success": False} if truncated else {})
            return list(self.messages), 0.0, False, truncated, info
        predicted = extract_answer(action)
        correct = is_correct(predicted, self.problem.answer)
        self.done = True
        return list(self.messages), float(correct), True, False, self._info() | {"predicted": predicted, "success": correct}


def _call(text: str, code: str) -> str:
    return text + "\n<tool_call>" + json.dumps({"name": "python", "arguments": {"code": code}}) + "</tool_call>"


def crashing_version(code: str) -> str:
    """The reference program with its last ``print(`` misspelled: it runs and fails with a NameError."""
    at = code.rfind("print(")
    return code[:at] + "pritn(" + code[at + len("print(") :]


def wrong_output_version(code: str) -> str:
    """The reference program printing 2x + 1 for its answer x: it runs and prints a wrong number (a
    silent mistake, wrong at any size, unlike x + 1 against the relative tolerance). Every
    reference program ends with one ``print(...)`` line."""
    head, _, last = code.rpartition("\n")
    if not (last.startswith("print(") and last.endswith(")")):
        raise ValueError(f"the program's last line is not a print(...) call: {last!r}")
    return (head + "\n" if head else "") + f"print(2 * ({last[len('print(') : -1]}) + 1)"


class PythonReasoningExpert:
    """Runs the reference program, then boxes the number it printed (reward 1 when the sandbox works).

    With ``crash_first`` (a probability), its first call is the program with a misspelled ``print``;
    it reads the error and calls the right program in the next message (three messages, the first
    one bad). With ``silent_mistake`` (a probability), the program it runs prints 2x + 1 for the
    answer x, and it boxes that wrong number (reward 0). Both are drawn from ``seed`` once per
    episode, so the traces hold turns of differing quality (TurnSight's warm-start data).
    """

    def __init__(self, crash_first: float = 0.0, silent_mistake: float = 0.0, seed: int = 0) -> None:
        for name, value in (("crash_first", crash_first), ("silent_mistake", silent_mistake)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} is a probability and must be in [0, 1], got {value}")
        self.crash_first, self.silent_mistake = crash_first, silent_mistake
        self.rng = random.Random(seed)
        self.plan: tuple[bool, bool] = (False, False)

    def act(self, observation: list[Message], info: dict[str, Any]) -> str:
        code = info["problem"].solution_code
        if info["tool_turns"] == 0:
            self.plan = (self.rng.random() < self.crash_first, self.rng.random() < self.silent_mistake)
        crash, silent = self.plan
        if silent:
            code = wrong_output_version(code)
        if info["tool_turns"] == 0 and crash:
            return _call("Let me compute it.", crashing_version(code))
        if info["tool_turns"] == int(crash):
            return _call("That call failed: print was misspelled. Fixed:" if crash else "Let me compute it.", code)
        last_output = observation[-1]["content"].strip().splitlines()
        return f"The answer is \\boxed{{{last_output[-1] if last_output else ''}}}."
