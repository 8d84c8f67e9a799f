"""Task families' splits: the hashed split, and python-math with whole problem kinds held out; the
sibling kinds of python-math-siblings."""

from __future__ import annotations

import math
import re

import pytest

from envs.text.families import make_task_family
from envs.text.tasks import split_of
from envs.text.tir_env import ALL_KINDS, PROBLEM_KINDS, problem_kind


def test_the_default_split_is_the_hash_of_each_id_and_covers_every_id():
    family = make_task_family("python-math", num_tasks=140)
    assert sorted(family.train_ids + family.test_ids) == list(range(140))
    assert all(split_of(i) == "test" for i in family.test_ids) and all(split_of(i) == "train" for i in family.train_ids)
    assert {problem_kind(i) for i in family.test_ids} == set(range(len(PROBLEM_KINDS)))  # every kind in both


def test_held_out_kinds_form_the_whole_test_split():
    family = make_task_family("python-math", num_tasks=140, test_kinds=(5, 6))
    assert sorted(family.train_ids + family.test_ids) == list(range(140))
    assert {problem_kind(i) for i in family.test_ids} == {5, 6} and len(family.test_ids) == 40
    assert {problem_kind(i) for i in family.train_ids} == {0, 1, 2, 3, 4}
    env = family.make_env()
    _, info = env.reset(options=family.reset_options(family.test_ids[0]))
    assert "compound" in info["problem"].question or "items" in info["problem"].question


@pytest.mark.parametrize("kinds", [(7,), (-1,), tuple(range(7))])
def test_held_out_kinds_must_be_some_but_not_all_of_the_kinds(kinds):
    with pytest.raises(ValueError, match="give some but not all of 0-6"):
        make_task_family("python-math", num_tasks=70, test_kinds=kinds)


def test_kept_kinds_filter_both_splits_and_keep_the_hashed_split_of_each_id():
    family = make_task_family("python-math", num_tasks=700, kinds=(6, 4))
    kept = [i for i in range(700) if i % 7 in (4, 6)]
    assert family.train_ids == [i for i in kept if split_of(i) == "train"]
    assert family.test_ids == [i for i in kept if split_of(i) == "test"]
    assert {problem_kind(i) for i in family.test_ids} == {4, 6}
    # the same id is the same problem, and in the same split, with or without the filter
    every = make_task_family("python-math", num_tasks=700)
    assert set(family.test_ids) == {i for i in every.test_ids if i % 7 in (4, 6)}
    # whole kinds held out among the kinds kept
    family = make_task_family("python-math", num_tasks=70, kinds=(4, 6), test_kinds=(6,))
    assert {problem_kind(i) for i in family.train_ids} == {4} and {problem_kind(i) for i in family.test_ids} == {6}


@pytest.mark.parametrize(
    ("kinds", "test_kinds", "message"),
    [
        ((7,), (), r"kinds \[7\]: give kinds among 0-6 \(0 prime sum"),
        ((4, -1), (), r"kinds \[-1, 4\]: give kinds among 0-6"),
        ((4, 6), (4, 6), r"test kinds \[4, 6\]: give some but not all of the kinds kept, \[4, 6\]"),
        ((4, 6), (5,), r"test kinds \[5\]: give some but not all of the kinds kept, \[4, 6\]"),
    ],
)
def test_bad_kept_kinds_are_refused_with_the_kinds_that_exist(kinds, test_kinds, message):
    with pytest.raises(ValueError, match=message):
        make_task_family("python-math", num_tasks=70, kinds=kinds, test_kinds=test_kinds)


def test_kept_kinds_are_refused_for_the_tool_suites():
    with pytest.raises(
        ValueError, match=r"kinds \(the problem kinds kept\) exist for python-math and python-math-siblings only"
    ):
        make_task_family("tools:bank", num_tasks=20, kinds=(1,))


def test_held_out_kinds_are_refused_for_the_tool_suites():
    with pytest.raises(ValueError, match="exist for python-math and python-math-siblings only"):
        make_task_family("tools:bank", num_tasks=20, test_kinds=(1,))


def test_python_math_siblings_keeps_the_seven_kinds_and_adds_one_beside_each():
    """python-math-siblings has 14 kinds; a problem of one of the first 7 is python-math's own
    problem of that id (same question and answer), and kind 7 + k is asked next to kind k."""
    plain = make_task_family("python-math", num_tasks=56).make_env().problems
    siblings_family = make_task_family("python-math-siblings", num_tasks=56, test_kinds=(7, 10))
    problems = siblings_family.make_env().problems
    assert {problem_kind(i, siblings=True) for i in siblings_family.test_ids} == {7, 10}
    assert len(siblings_family.test_ids) == 8 and len(ALL_KINDS) == 14
    for i in range(56):
        if i % 14 < 7:
            assert problems.get(i) == plain.get(i)
        else:
            assert problems.get(i).question != plain.get(i).question


def hand_answer(kind: int, question: str) -> float:
    """Each sibling kind's answer from the numbers in its question, computed another way."""
    numbers = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", question)]
    if kind == 7:  # primes below n, by trial division
        n = int(numbers[0])
        return sum(1 for m in range(2, n) if all(m % d for d in range(2, math.isqrt(m) + 1)))
    if kind == 8:  # the sum of n's divisors, from its divisor pairs
        n = int(numbers[0])
        return sum(d + (n // d if d * d != n else 0) for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    if kind == 9:  # L(1) = 1, L(2) = 3; numbers: 1, 1, 2, 3, (n-1, n-2,) j, m
        j, m = int(numbers[-2]), int(numbers[-1])
        a, b = 2, 1  # L(0) = 2, L(1) = 1: the Lucas numbers
        for _ in range(j):
            a, b = b, a + b
        return a % m
    if kind == 10:
        a, b = int(numbers[0]), int(numbers[1])
        return math.floor(b * math.log10(a)) + 1
    if kind == 11:
        n, a, b = (int(x) for x in numbers[1:4])  # "from 1 to n ... by both a and b"
        return n // math.lcm(a, b)
    if kind == 12:
        p, r, y = numbers[0], numbers[1], numbers[2]
        return round(p + p * r * y / 100, 2)
    n_items, j = int(numbers[1]), int(numbers[0])
    return math.factorial(n_items) // math.factorial(n_items - j)


@pytest.mark.parametrize("kind", range(7, 14))
def test_each_sibling_kinds_answer_equals_a_hand_computation(kind):
    problems = make_task_family("python-math-siblings", num_tasks=70).make_env().problems
    for problem_id in (kind, kind + 14, kind + 28):
        problem = problems.get(problem_id)
        assert problem.answer == pytest.approx(hand_answer(kind, problem.question), rel=1e-9), problem.question


def test_held_out_sibling_kinds_must_be_some_but_not_all_of_the_fourteen():
    with pytest.raises(ValueError, match="give some but not all of 0-13.*13 permutations"):
        make_task_family("python-math-siblings", num_tasks=70, test_kinds=(14,))


def test_the_python_output_flag_cuts_what_the_model_reads_and_is_refused_where_there_is_no_python_tool():
    """--python-output-chars reaches python-math's sandbox: a call printing 50 digits returns the
    first 12 and says the rest was cut; a bad value, or the flag on a tool suite, is refused."""
    import json

    from cleanrl_style.llm.args import LLMRunArgs

    family = LLMRunArgs(env="python-math", num_tasks=14, python_output_chars=12).task_family()
    env = family.make_env()
    env.reset(options=family.reset_options(family.train_ids[0]))
    call = "<tool_call>" + json.dumps({"name": "python", "arguments": {"code": "print('7' * 50)"}}) + "</tool_call>"
    messages, *_ = env.step(call)
    assert messages[-1]["role"] == "tool" and messages[-1]["content"].startswith("7" * 12)
    assert "7" * 13 not in messages[-1]["content"] and "truncated" in messages[-1]["content"]
    default = LLMRunArgs(env="python-math", num_tasks=14).task_family().make_env()
    assert default.sandbox.limits.output_chars == 8000
    with pytest.raises(ValueError, match="--python-output-chars must be at least 1"):
        LLMRunArgs(env="python-math", python_output_chars=0).task_family()
    with pytest.raises(ValueError, match="only python-math and python-math-siblings have a python tool, not 'tools:bank'"):
        LLMRunArgs(env="tools:bank", python_output_chars=100).task_family()
    LLMRunArgs(env="tools:bank").task_family()  # the default is no request: accepted
