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


def write_record(path: Path, rows: list[tuple[int, str, int, float]]) -> None:
    lines = ["step,suffix,task_id,reward,turns,cut", *(f"{s},{x},{t},{r},3,0" for s, x, t, r in rows)]
    path.write_text("\n".join(lines) + "\n")


def test_read_outcomes_takes_each_tokens_last_step_or_the_one_asked_for(tmp_path):
    high, low = "<|high_reward|>", "<|low_reward|>"
    path = tmp_path / "held_out.csv"
    write_record(path, [(17, high, 1, 1.0), (17, low, 1, 0.0), (34, high, 1, 0.0), (34, low, 1, 1.0), (34, "", 1, 1.0)])
    assert steering.read_outcomes(path, (high, low)) == ({1: 0.0}, {1: 1.0})
    assert steering.read_outcomes(path, (high, low), 17) == ({1: 1.0}, {1: 0.0})
    with pytest.raises(ValueError, match=r"no episode under <\|high_reward\|> at step 5"):
        steering.read_outcomes(path, (high, low), 5)


def test_by_variant_splits_the_paired_comparison_by_each_tasks_variant():
    high = {0: 1.0, 1: 1.0, 2: 0.0, 3: 1.0, 4: 0.0, 5: 1.0}
    low = {0: 0.0, 1: 1.0, 2: 1.0, 3: 0.0, 4: 0.0}  # task 5 has no low episode: left out
    rows = steering.by_variant(high, low, lambda t: "base" if t % 2 == 0 else "missing_function")
    base, missing = rows
    assert (base["variant"], base["tasks"], base["high"], base["low"]) == ("base", 3, 1 / 3, 1 / 3)
    assert (base["only_high"], base["only_low"], base["difference"][0]) == (1, 1, 0.0)
    assert (missing["variant"], missing["tasks"], missing["high"], missing["low"]) == ("missing_function", 2, 1.0, 0.5)
    assert (missing["only_high"], missing["only_low"], missing["difference"][0]) == (1, 0, 0.5)


def test_a_tool_family_names_each_tasks_variant():
    family = make_task_family("tools:bank", num_tasks=40, variants=("base", "missing_function", "missing_parameter"))
    from envs.text.env import ToolUseEnv

    env = family.make_env()
    assert isinstance(env, ToolUseEnv)
    for task_id in family.test_ids[:6]:
        env.reset(options=family.reset_options(task_id))
        assert family.variant_of(task_id) == env.task.variant
    assert {family.variant_of(t) for t in family.test_ids} == {"base", "missing_function", "missing_parameter"}
    assert make_task_family("python-math", num_tasks=40).variant_of is None


def test_record_mode_reads_a_held_out_csv_without_a_model(tmp_path):
    family = make_task_family("tools:bank", num_tasks=40, variants=("base", "missing_function"))
    (tmp_path / "args.json").write_text(
        '{"env": "tools:bank", "num_tasks": 40, "variants": ["base", "missing_function"], "stage": "rctp"}'
    )
    tasks = family.test_ids[:4]
    rows = [(16, "<|high_reward|>", t, 1.0) for t in tasks] + [(16, "<|low_reward|>", t, 0.0) for t in tasks]
    write_record(tmp_path / "held_out.csv", rows)
    script = str(BENCHMARKS / "reward_token_steering.py")
    done = subprocess.run(
        [sys.executable, script, "--run", str(tmp_path), "--record", str(tmp_path / "held_out.csv")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "high - low, paired by task: 1.000 [1.000, 1.000]" in done.stdout
    variants = [family.variant_of(t) for t in tasks]
    for variant in set(variants):
        n = variants.count(variant)
        assert f"  {variant}: {n}, 1.000 / 0.000, 1.000 [1.000, 1.000], high {n}, low 0" in done.stdout
    absent = str(tmp_path / "none.csv")
    command = [sys.executable, script, "--run", str(tmp_path), "--record", absent]
    missing = subprocess.run(command, capture_output=True, text=True)
    assert missing.returncode == 2 and "--record" in missing.stderr and "no such file" in missing.stderr
    command = [sys.executable, script, "--run", str(tmp_path), "--step", "3"]
    step_alone = subprocess.run(command, capture_output=True, text=True)
    assert step_alone.returncode == 2 and "--step reads an evaluation of --record" in step_alone.stderr
