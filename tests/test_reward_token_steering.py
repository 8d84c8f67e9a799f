"""benchmarks/reward_token_steering.py: the paired difference against hand counts, sampled episodes
when asked for them, and bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import reward_token_steering as steering  # noqa: E402
from llm_tiny_model import build_tiny_model, build_tokenizer  # noqa: E402

from cleanrl_style.llm.generation import Sampling  # noqa: E402
from cleanrl_style.llm.rollout import EpisodeLimits, RolloutSettings  # noqa: E402
from envs.text.families import make_task_family  # noqa: E402


def test_paired_difference_is_the_mean_over_shared_tasks_with_an_interval_around_it():
    high = {0: 1.0, 1: 1.0, 2: 0.0, 3: 1.0, 9: 1.0}  # task 9 has no low episode: left out
    low = {0: 1.0, 1: 0.0, 2: 0.0, 3: 0.0}
    mean, lo, hi = steering.paired_difference(high, low)
    assert mean == 0.5  # differences 0, 1, 0, 1
    assert 0.0 <= lo <= mean <= hi <= 1.0 and lo < hi
    assert steering.paired_difference({0: 1.0, 1: 0.0}, {0: 1.0, 1: 0.0}) == (0.0, 0.0, 0.0)


def test_paired_difference_without_shared_tasks_says_so():
    with pytest.raises(ValueError, match="no task was played under both tokens"):
        steering.paired_difference({0: 1.0}, {1: 0.0})


def test_a_run_folder_without_an_exported_model_is_refused(tmp_path):
    (tmp_path / "args.json").write_text("{}")
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "reward_token_steering.py"), "--run", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "model is missing" in result.stderr and "finished rc_grpo.py run" in result.stderr


def test_play_samples_unless_greedy_and_records_each_task(tmp_path):
    """Sampled settings stay sampled (two seeds, different tokens; one seed, the same ones), greedy
    ones give the same tokens under any seed, and each task's outcome is recorded at its step."""
    tokenizer = build_tokenizer()
    model = build_tiny_model(tokenizer).eval()  # position- and content-dependent logits
    family = make_task_family("tools:bank", num_tasks=40, variants=("base",))
    out = tmp_path / "episodes.csv"

    def tokens(greedy: bool, seed: int, step: int = 0) -> list[list[int]]:
        settings = RolloutSettings(Sampling(max_new_tokens=12, greedy=greedy), EpisodeLimits(2, 4096))
        return [r.tokens for r in steering.play(model, tokenizer, family, settings, 3, " <x>", seed, out, step)]

    assert tokens(False, 1) != tokens(False, 2)
    assert tokens(False, 1) == tokens(False, 1)
    assert tokens(True, 1) == tokens(True, 2)
    rows = out.read_text().splitlines()
    assert rows[0] == "step,suffix,task_id,reward,turns,cut" and len(rows) == 1 + 6 * 3
    assert {row.split(",")[1] for row in rows[1:]} == {"<x>"}
