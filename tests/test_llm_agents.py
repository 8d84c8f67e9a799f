"""Each LLM agent end to end with a tiny random model: every --env family, bf16, RCTP then RC-GRPO from its
model, and (slow) a kill after the first checkpoint and a resume to the end.

The tiny model (tests/llm_tiny_model.py) is written to a folder and passed as ``--model``; messages are a
few tokens, so an iteration takes seconds (most of a run is starting Python and loading the model).
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys

import pytest
import torch

pytest.importorskip("transformers")

from agent_runs import resume_agent, run_agent, run_until_first_checkpoint_then_kill  # noqa: E402
from llm_tiny_model import bf16_attention_error, save_tiny_model  # noqa: E402

from cleanrl_style.runs.checkpoint import load_checkpoint  # noqa: E402

SMALL = (
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


def progress_values(run_dir, metric):
    with open(run_dir / "progress.csv", newline="") as f:
        return [float(row["value"]) for row in csv.DictReader(f) if row["metric"] == metric]


@pytest.mark.parametrize(
    "agent,env,precision,flags",
    [
        pytest.param("grpo", "tools:bank+travel", "bf16", (), marks=pytest.mark.slow),
        ("grpo", "python-math", "fp32", ()),  # the everyday tier keeps one family end to end
        pytest.param("turnsight", "python-math", "bf16", (), marks=pytest.mark.slow),
        pytest.param("rc_grpo", "tools:bank", "bf16", ("--stage", "rl"), marks=pytest.mark.slow),
    ],
)
def test_agent_runs_on_each_env_family(agent, env, precision, flags, tiny_model_dir, tmp_path):
    if precision == "bf16" and bf16_attention_error():
        pytest.skip(f"torch's bf16 attention fails on this CPU: {bf16_attention_error()}")
    run_dir = tmp_path / agent
    run_agent(
        agent,
        "--env",
        env,
        "--precision",
        precision,
        "--model",
        str(tiny_model_dir),
        "--total-timesteps",
        "1",
        "--group-size",
        "2",
        "--groups-per-step",
        "2",
        *SMALL,
        *flags,
        run_dir=run_dir,
    )
    assert json.loads((run_dir / "args.json").read_text())["env"] == env
    assert progress_steps(run_dir, "charts/zero_variance_fraction") == [1]
    assert progress_steps(run_dir, "charts/test_success_rate") == [1]
    assert all(math.isfinite(v) for v in progress_values(run_dir, "losses/policy_loss"))
    assert progress_values(run_dir, "charts/generated_tokens")[0] > 0
    # bf16 generation puts each sampled token's generation-time log-prob in the loss's ratio (r != 1);
    # at fp32 generation the ratio of the one optimizer step is exactly 1.
    assert (progress_values(run_dir, "losses/approx_kl")[0] > 0) == (precision == "bf16")
    # The process's peak RSS at the iteration and again after the final evaluation (never lower).
    rss = progress_values(run_dir, "memory/peak_rss_gib")
    assert progress_steps(run_dir, "memory/peak_rss_gib") == [1, 1] and 0.1 < rss[0] <= rss[1] < 100
    checkpoint = load_checkpoint(run_dir)
    assert checkpoint["iteration"] == 1
    assert checkpoint["optimizer"]["state"]  # saved before the training state was released for the evaluation
    assert (run_dir / "model" / "config.json").exists()


def test_a_bad_env_name_is_refused_before_a_run_folder_is_made(tiny_model_dir, tmp_path):
    import subprocess

    from agent_runs import agent_command

    proc = subprocess.run(
        agent_command("grpo", tmp_path / "r", "--env", "tools:bnak", "--model", str(tiny_model_dir)),
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "did you mean 'bank'" in proc.stderr and not (tmp_path / "r").exists()


@pytest.mark.slow
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
        agent, run_dir, "--env", "tools:bank", "--model", str(tiny_model_dir), "--total-timesteps", "2", *SMALL, *flags
    )
    resume_agent(agent, run_dir)
    assert progress_steps(run_dir, "charts/zero_variance_fraction") == [1, 2]  # none lost, none twice
    assert progress_steps(run_dir, "charts/test_success_rate") == [2]
    assert load_checkpoint(run_dir)["iteration"] == 2
    assert (run_dir / "model" / "config.json").exists()


@pytest.mark.slow
def test_a_finished_full_fine_tune_keeps_one_copy_of_its_weights_and_resumes_from_its_model_folder(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file

    common = ("--env", "tools:bank", "--model", str(tiny_model_dir), "--group-size", "2", "--groups-per-step", "2", *SMALL)
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run_agent("grpo", *common, "--total-timesteps", "2", run_dir=straight)
    run_agent("grpo", *common, "--total-timesteps", "1", run_dir=resumed)
    checkpoint = load_checkpoint(resumed)
    assert checkpoint["policy"] == "model" and checkpoint["iteration"] == 1 and checkpoint["optimizer"]["state"]
    assert not (resumed / "checkpoint.prev.pt").exists()  # no second full copy either
    run_agent("grpo", "--resume", str(resumed), "--total-timesteps", "2", "--no-progress-bar", runs_root=tmp_path)
    assert load_checkpoint(resumed)["policy"] == "model" and load_checkpoint(resumed)["iteration"] == 2
    assert progress_steps(resumed, "charts/zero_variance_fraction") == [1, 2]
    # the resumed run trained on from iteration 1's weights (read from the folder): the same model as the straight run
    a, b = (load_file(run / "model" / "model.safetensors") for run in (straight, resumed))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_a_lora_run_checkpoints_its_adapters_alone_and_resumes_to_the_end(tiny_model_dir, tmp_path):
    """``--lora-rank``: the checkpoint holds only the adapters (a few kB here, not the model), a run
    killed after its first checkpoint resumes to the end, and the exported model is an ordinary
    transformers folder with the base model's weights' names (the adapters merged in)."""
    from safetensors.torch import load_file

    run_dir = tmp_path / "lora"
    flags = ("--env", "tools:bank", "--model", str(tiny_model_dir), "--lora-rank", "2", "--total-timesteps", "2")
    run_until_first_checkpoint_then_kill("grpo", run_dir, *flags, "--group-size", "2", "--groups-per-step", "2", *SMALL)
    resume_agent("grpo", run_dir)
    checkpoint = load_checkpoint(run_dir)
    assert checkpoint["iteration"] == 2 and checkpoint["optimizer"]["state"]
    assert checkpoint["policy"] and all("lora_" in name for name in checkpoint["policy"])
    assert progress_steps(run_dir, "charts/zero_variance_fraction") == [1, 2]
    exported, base = (load_file(folder / "model.safetensors") for folder in (run_dir / "model", tiny_model_dir))
    assert exported.keys() == base.keys()


def test_a_checkpoint_whose_model_folder_is_gone_is_refused_by_name(tmp_path):
    from cleanrl_style.llm.train import policy_weights
    from cleanrl_style.runs.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match="model folder .*missing"):
        policy_weights({"policy": "model"}, tmp_path)
    assert policy_weights({"policy": {"w": torch.ones(1)}}, tmp_path)["w"].item() == 1.0


@pytest.mark.slow
def test_rctp_then_rc_grpo_from_its_model(tiny_model_dir, tmp_path):
    if bf16_attention_error():
        pytest.skip(f"torch's bf16 attention fails on this CPU: {bf16_attention_error()}")
    rctp = tmp_path / "rctp"
    run_agent(
        "rc_grpo",
        "--env",
        "tools:bank",
        "--precision",
        "bf16",
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
        "--rctp-on-policy",
        "3",
        *SMALL,
        run_dir=rctp,
    )
    on_policy = [json.loads(line) for line in (rctp / "rctp_on_policy.jsonl").read_text().splitlines()]
    assert len(on_policy) == 3 and all(t["messages"][-1]["role"] != "system" for t in on_policy)
    assert progress_steps(rctp, "losses/sft_loss") == [1, 2]
    # the held-out tasks evaluated under both tokens at the end: charts/test_success_rate with the high one
    assert progress_steps(rctp, "rctp/low_token_success_rate") == progress_steps(rctp, "charts/test_success_rate") == [2]
    with open(rctp / "held_out.csv", newline="") as f:  # per task, under each token, for paired comparisons
        rows = list(csv.DictReader(f))
    assert sorted((r["step"], r["suffix"]) for r in rows) == [("2", "<|high_reward|>"), ("2", "<|low_reward|>")]
    assert rows[0]["task_id"] == rows[1]["task_id"] and {r["reward"] for r in rows} <= {"0.0", "1.0"}
    assert '"<|high_reward|>"' in (rctp / "model" / "tokenizer.json").read_text()
    rl = tmp_path / "rl"
    run_agent(
        "rc_grpo",
        "--env",
        "tools:bank",
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
        run_dir=rl,
    )
    assert progress_steps(rl, "rc_grpo/high_token_fraction") == [1]
    assert load_checkpoint(rl)["iteration"] == 1


def test_sft_warm_start_writes_a_model_the_agents_load(tiny_model_dir, tmp_path):
    sft = tmp_path / "sft"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cleanrl_style.llm.sft",
            "--env",
            "python-math",
            "--model",
            str(tiny_model_dir),
            "--trajectories",
            "6",
            "--batch-size",
            "4",
            "--epochs",
            "2",
            "--test-kinds",
            "6",
            "--max-new-tokens",
            "4",
            "--max-assistant-messages",
            "2",
            "--eval-episodes",
            "1",
            "--micro-batch-size",
            "4",
            "--run-dir",
            str(sft),
            "--no-progress-bar",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SFT data: 6 traces kept of 6" in proc.stdout
    assert progress_steps(sft, "losses/sft_loss") == [1, 2, 3, 4]  # 2 epochs of 2 batches
    assert progress_steps(sft, "charts/test_success_rate") == [4]
    run_agent(
        "grpo",
        "--env",
        "python-math",
        "--model",
        str(sft / "model"),
        "--total-timesteps",
        "0",
        "--test-kinds",
        "6",
        *SMALL,
        run_dir=tmp_path / "grpo",
    )


@pytest.mark.slow
def test_a_finished_sft_run_resumed_with_more_epochs_ends_as_a_run_asked_for_them_from_the_start(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file

    def sft(*flags):
        cmd = [sys.executable, "-m", "cleanrl_style.llm.sft", *flags, "--no-progress-bar"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]

    common = ["--env", "python-math", "--model", str(tiny_model_dir), "--trajectories", "6", "--batch-size", "4"]
    common += ["--max-new-tokens", "4", "--max-assistant-messages", "2", "--eval-episodes", "0", "--micro-batch-size", "4"]
    straight, extended = tmp_path / "straight", tmp_path / "extended"
    sft(*common, "--epochs", "2", "--run-dir", str(straight))
    sft(*common, "--epochs", "1", "--run-dir", str(extended))
    assert progress_steps(extended, "losses/sft_loss") == [1, 2]
    sft("--resume", str(extended), "--epochs", "2")  # batches follow from the step: epoch 2 as in the straight run
    assert progress_steps(extended, "losses/sft_loss") == [1, 2, 3, 4]
    assert progress_values(extended, "losses/sft_loss") == progress_values(straight, "losses/sft_loss")
    a, b = (load_file(run / "model" / "model.safetensors") for run in (straight, extended))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
