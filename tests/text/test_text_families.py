"""Task families' splits: the hashed split, and python-math with whole problem kinds held out."""

from __future__ import annotations

import pytest

from envs.text.families import make_task_family
from envs.text.tasks import split_of
from envs.text.tir_env import PROBLEM_KINDS, problem_kind


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


def test_held_out_kinds_are_refused_for_the_tool_suites():
    with pytest.raises(ValueError, match="exist for python-math only"):
        make_task_family("tools:bank", num_tasks=20, test_kinds=(1,))
