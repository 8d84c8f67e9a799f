"""benchmarks/reward_token_steering.py: the paired difference against hand counts, and bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import reward_token_steering as steering  # noqa: E402


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
