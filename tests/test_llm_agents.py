"""Each LLM agent end to end with a tiny random model: a couple of iterations, a checkpoint, a kill, a resume.

The tiny model (tests/llm_tiny_model.py) is written to a folder and passed as ``--model``; tasks are
one suite's base variant, messages a few tokens, so an iteration takes seconds.
"""

from __future__ import annotations

import csv

import pytest

pytest.importorskip("transformers")

from agent_runs import resume_agent, run_agent, run_until_first_checkpoint_then_kill  # noqa: E402
from llm_tiny_model import save_tiny_model  # noqa: E402

from cleanrl_style.checkpoint import load_checkpoint  # noqa: E402

SMALL = (
    "--suites",
    "bank",
    "--variants",
    "base",
    "--max-new-tokens",
    "4",
    "--max-assistant-messages",
    "2",
    "--eval-episodes",
    "1",
    "--checkpoint-every",
    "1",
    "--micro-batch-size",
    "8",
)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def progress_steps(run_dir, metric):
    with open(run_dir / "progress.csv", newline="") as f:
        return [int(row["step"]) for row in csv.DictReader(f) if row["metric"] == metric]


@pytest.mark.parametrize(
    "agent,flags",
    [
        ("grpo", ("--group-size", "2", "--groups-per-step", "2")),
        ("turnsight", ("--group-size", "2", "--groups-per-step", "2")),
        ("rc_grpo", ("--stage", "rl", "--group-size", "2", "--groups-per-step", "2")),
    ],
)
def test_agent_survives_a_kill_and_resumes_to_the_end(agent, flags, tiny_model_dir, tmp_path):
    run_dir = tmp_path / agent
    run_until_first_checkpoint_then_kill(
        agent, run_dir, "--model", str(tiny_model_dir), "--total-timesteps", "2", *SMALL, *flags
    )
    resume_agent(agent, run_dir)
    assert progress_steps(run_dir, "charts/zero_variance_fraction") == [1, 2]  # none lost, none twice
    assert progress_steps(run_dir, "charts/test_success_rate") == [2]
    assert load_checkpoint(run_dir)["iteration"] == 2
    assert (run_dir / "model" / "config.json").exists()


def test_rctp_then_rc_grpo_from_its_model(tiny_model_dir, tmp_path):
    rctp = tmp_path / "rctp"
    run_agent(
        "rc_grpo",
        rctp,
        "--stage",
        "rctp",
        "--model",
        str(tiny_model_dir),
        "--rctp-trajectories",
        "8",
        "--rctp-batch-size",
        "4",
        "--rctp-epochs",
        "1",
        *SMALL,
    )
    assert progress_steps(rctp, "losses/sft_loss") == [1, 2]
    assert '"<|high_reward|>"' in (rctp / "model" / "tokenizer.json").read_text()
    rl = tmp_path / "rl"
    run_agent(
        "rc_grpo",
        rl,
        "--stage",
        "rl",
        "--model",
        str(rctp / "model"),
        "--total-timesteps",
        "1",
        "--group-size",
        "2",
        "--groups-per-step",
        "1",
        *SMALL,
    )
    assert progress_steps(rl, "rc_grpo/high_token_fraction") == [1]
    assert load_checkpoint(rl)["iteration"] == 1
