"""``PythonReasoningEnv``'s handling of the assistant message: answer extraction in linear time, and
``MessageSpace.max_length`` enforced by ``step``."""

import time

import pytest

from envs.text.sandbox import SandboxLimits
from envs.text.tir_env import ProblemSet, PythonReasoningEnv, extract_answer


def _seconds(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def test_answer_extraction_is_linear_in_the_message_length():
    # 200 kB of unclosed tags: a backtracking regex rescans the rest of the message from every tag
    # (about a minute on a 2-core machine); a linear scan takes about as long as reading a plain message of that size.
    hostile = "<answer>" * 25_000
    baseline = min(_seconds(extract_answer, "x" * len(hostile)) for _ in range(3))
    elapsed = _seconds(extract_answer, hostile)
    assert elapsed < max(1.0, 100 * baseline), f"{elapsed:.2f} s against {baseline:.4f} s for plain text"
    assert extract_answer(hostile) is None


@pytest.mark.parametrize(
    "message, expected",
    [
        ("<answer>1</answer> then <answer> 2 </answer>", 2.0),
        ("<answer>1</answer><answer>2", 1.0),  # an unclosed last tag is not an answer
        ("<answer><answer>3</answer>", None),  # the body runs from the first tag: "<answer>3"
        ("\\boxed{4} and <answer>5</answer>", 5.0),  # a tag wins over a box
        ("<answer>\n6\n</answer>", 6.0),
        ("</answer><answer>7</answer>", 7.0),
    ],
)
def test_answer_tags_are_read_as_before(message, expected):
    assert extract_answer(message) == expected


@pytest.fixture(scope="module")
def env():
    return PythonReasoningEnv(ProblemSet(7), limits=SandboxLimits(preload=()))


def test_a_message_longer_than_the_action_space_allows_is_cut_and_counted(env):
    limit = env.action_space.max_length
    env.reset(options={"problem_id": 0})
    answer = int(env.problem.answer)
    # The answer sits past the limit: the env reads only the first max_length characters.
    messages, reward, terminated, _, info = env.step("x" * limit + f"\\boxed{{{answer}}}")
    assert terminated and reward == 0.0 and info["predicted"] is None
    assert len(messages[-1]["content"]) == limit and env.action_space.contains(messages[-1]["content"])
    assert info["errors"] == {"too_long": 1}
    env.reset(options={"problem_id": 0})
    _, reward, _, _, info = env.step(f"\\boxed{{{answer}}}" + "x" * limit)
    assert reward == 1.0 and info["errors"] == {"too_long": 1}
    env.reset(options={"problem_id": 0})
    _, reward, _, _, info = env.step(f"\\boxed{{{answer}}}".ljust(limit))
    assert reward == 1.0 and info["errors"] == {}
