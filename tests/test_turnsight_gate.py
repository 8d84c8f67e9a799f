"""benchmarks/turnsight_auroc.py: the AUROC against hand counts, and the turn labels."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import turnsight_auroc as gate  # noqa: E402


def test_auroc_counts_wins_and_half_ties():
    assert gate.auroc([3.0, 1.0], [2.0, 0.0]) == 0.75  # (3>2, 3>0, 1<2, 1>0) = 3 of 4
    assert gate.auroc([1.0], [1.0, 0.0]) == 0.75  # a tie counts half
    assert gate.auroc([0.0], [1.0]) == 0.0
    assert gate.auroc([], [1.0]) != gate.auroc([], [1.0])  # NaN without both kinds


def test_within_episode_auroc_only_pairs_turns_of_one_episode():
    rows = [
        {"episode": 0, "good": True, "score": 1.0},
        {"episode": 0, "good": False, "score": 0.0},
        {"episode": 1, "good": True, "score": -5.0},
        {"episode": 1, "good": False, "score": -6.0},
        {"episode": 2, "good": False, "score": 10.0},  # no good turn to pair with
    ]
    assert gate.within_episode_auroc(rows) == 1.0  # pooled over episodes it would be 0.5 or less
    assert gate.auroc([1.0, -5.0], [0.0, -6.0, 10.0]) == pytest.approx(3 / 6)
    low, high = gate.bootstrap(rows, gate.within_episode_auroc, resamples=200)
    assert low == high == 1.0


def test_rank_correlation_is_spearmans_rho_with_mean_ranks_for_ties():
    assert gate.rank_correlation([1.0, 2.0, 3.0], [30.0, 20.0, 10.0]) == pytest.approx(-1.0)
    assert gate.rank_correlation([1.0, 5.0, 2.0], [0.1, 0.9, 0.3]) == pytest.approx(1.0)  # ranks, not values
    # x ranks 1, 2.5, 2.5, 4 (a tie); y ranks 1, 2, 3, 4: Pearson of the ranks = 4.5 / sqrt(4.5 * 5)
    assert gate.rank_correlation([0.0, 1.0, 1.0, 2.0], [0.0, 1.0, 2.0, 3.0]) == pytest.approx(4.5 / (4.5 * 5) ** 0.5)


def turn(content: str, outputs: list[str]):
    return SimpleNamespace(content=content, tool_outputs=outputs)


CALL = '<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>'


@pytest.mark.parametrize(
    "outputs,good",
    [
        (["42"], True),
        (["Traceback ...\nNameError: name 'pritn' is not defined\n[exit code 1]"], False),
        (["[killed: wall time]"], False),
        (["[no output]"], False),
        (['{"name": "python", "error": "missing code"}'], False),
        ([], False),
    ],
)
def test_a_call_turn_is_good_when_every_call_ran_and_printed(outputs, good):
    rollout = SimpleNamespace(turns=[turn(CALL, outputs)], reward=0.0)
    assert gate.turn_label(rollout, 0) is good


@pytest.mark.parametrize("reward,good", [(1.0, True), (0.0, False)])
def test_the_answer_turn_is_good_when_the_episode_succeeded(reward, good):
    rollout = SimpleNamespace(turns=[turn(CALL, ["42"]), turn("The answer is \\boxed{42}.", [])], reward=reward)
    assert gate.turn_label(rollout, 1) is good and gate.turn_label(rollout, 0) is True
