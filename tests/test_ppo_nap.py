import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import REPO_ROOT

from cleanrl_style import load_checkpoint
from cleanrl_style.runs.evaluate import evaluate_run
from cleanrl_style.runs.logger import read_progress

FAST = ["--env", "InvertedPendulum", "--num-envs", "2", "--num-steps", "64", "--num-minibatches", "4", "--update-epochs", "2"]


def _steps_are_unique_and_increasing(series):
    for metric, rows in series.items():
        steps = [s for s, _, _ in rows]
        assert steps == sorted(set(steps)), f"{metric}: duplicated or unordered steps {steps}"


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_ppo_nap_learns_inverted_pendulum(run_agent, tmp_path, precision):
    run_dir = tmp_path / "learn"
    run_agent(
        "ppo_nap",
        "--precision",
        precision,
        "--env",
        "InvertedPendulum",
        "--num-envs",
        "4",
        "--num-steps",
        "128",
        "--total-timesteps",
        "8192",
        "--eval-episodes",
        "5",
        run_dir=run_dir,
    )
    series = read_progress(run_dir)
    first_return = series["charts/episodic_return"][0][2]
    eval_return = series["eval/return_mean"][-1][2]
    assert first_return < 50  # a random policy balances for a few steps
    assert eval_return > 5 * first_return and eval_return > 200
    # NaP held every projected hidden layer at its initial norm through 640 optimizer steps
    norms = series["nap/norm/actor_mean.0"]
    assert norms[0][2] == pytest.approx(norms[-1][2], rel=1e-4)
    # the output layer is free by default, so its norm moved
    out = series["nap/norm/actor_mean.6"]
    assert out[0][2] != pytest.approx(out[-1][2], rel=1e-4)
    # evaluation from the checkpoint (with its normalizer statistics) reproduces a balancing policy
    assert evaluate_run(str(run_dir), episodes=3).mean() > 200


@pytest.mark.slow
def test_plain_baseline_flags_remove_layer_norm_and_projection(run_agent, tmp_path):
    run_dir = tmp_path / "plain"
    run_agent(
        "ppo_nap",
        *FAST,
        "--total-timesteps",
        "256",
        "--eval-episodes",
        "0",
        "--no-nap",
        "--no-layer-norm",
        run_dir=run_dir,
    )
    state = load_checkpoint(run_dir)["agent"]
    assert not any("weight" in k and state[k].dim() == 1 and "logstd" not in k for k in state)  # no LayerNorm params
    series = read_progress(run_dir)
    norms = series["nap/norm/actor_mean.0"]
    assert norms[0][2] != pytest.approx(norms[-1][2], rel=1e-6)  # unprojected weights drift


@pytest.mark.slow
def test_killed_run_resumes_with_same_step_count_and_intact_csv(tmp_path):
    run_dir = tmp_path / "killed"
    env = {**os.environ, "CLEANRL_STYLE_RUNS": str(tmp_path / "runs")}
    cmd = [
        sys.executable,
        str(REPO_ROOT / "agents" / "ppo_nap.py"),
        *FAST,
        "--total-timesteps",
        "6400",
        "--checkpoint-every",
        "1000",
        "--eval-episodes",
        "0",
        "--no-progress-bar",
        "--run-dir",
        str(run_dir),
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while time.time() < deadline:
        if (run_dir / "checkpoint.pt").exists() and load_checkpoint(run_dir)["global_step"] >= 2048:
            break
        assert proc.poll() is None, proc.stderr.read().decode()
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = load_checkpoint(run_dir)["global_step"]
    assert 2048 <= killed_at < 6400

    resumed = subprocess.run(
        [sys.executable, str(REPO_ROOT / "agents" / "ppo_nap.py"), "--resume", str(run_dir), "--no-progress-bar"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert load_checkpoint(run_dir)["global_step"] == 6400  # 50 iterations of 128 steps
    series = read_progress(run_dir)
    _steps_are_unique_and_increasing(series)
    assert [s for s, _, _ in series["charts/SPS"]] == list(range(128, 6401, 128))


def test_resume_of_a_folder_without_a_run_explains_itself(run_agent, tmp_path):
    proc = run_agent("ppo_nap", "--resume", str(tmp_path / "nothing"), check=False)
    assert proc.returncode != 0 and "no args.json there" in proc.stderr


def test_unknown_env_and_bad_batch_are_reported(run_agent):
    proc = run_agent("ppo_nap", "--env", "Hoper", check=False)
    assert proc.returncode == 2 and "Did you mean 'Hopper'?" in proc.stderr
    proc = run_agent("ppo_nap", *FAST, "--num-minibatches", "1000", check=False)
    assert proc.returncode == 2 and "--num-minibatches 1000 exceeds one batch (128 steps" in proc.stderr


@pytest.mark.slow
def test_evaluate_cli_reports_mean_and_std(run_agent, tmp_path):
    run_dir = tmp_path / "cli"
    run_agent("ppo_nap", *FAST, "--total-timesteps", "256", "--eval-episodes", "1", run_dir=run_dir)
    # resuming a finished run neither trains nor evaluates again
    resumed = run_agent("ppo_nap", "--resume", str(run_dir))
    assert "already evaluated at step 256" in resumed.stdout
    assert len(read_progress(run_dir)["eval/return_mean"]) == 1
    out = subprocess.run(
        [sys.executable, "-m", "cleanrl_style.runs.evaluate", str(run_dir), "--episodes", "2"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "over 2 episodes" in out.stdout and "+-" in out.stdout


def test_written_out_gaussian_matches_torch_distributions():
    from ppo_nap import Agent, Args
    from torch.distributions import Normal

    agent = Agent(5, 3, Args())
    with torch.no_grad():
        agent.actor_logstd.copy_(torch.tensor([[-0.3, 0.0, 0.4]]))
    x, action = torch.randn(4, 5), torch.randn(4, 3)
    _, logprob, entropy, value = agent.get_action_and_value(x, action)
    reference = Normal(agent.actor_mean(x), agent.actor_logstd.exp().expand(4, 3))
    assert torch.allclose(logprob, reference.log_prob(action).sum(-1), atol=1e-6)
    assert torch.allclose(entropy, reference.entropy().sum(-1), atol=1e-6)
    assert value.shape == (4,)


@pytest.mark.slow
def test_compiled_minibatch_loss_trains_like_the_eager_one(run_agent, tmp_path):
    """--compile on fuses the loss's forward and backward; it must compute the same update (float rounding
    aside): one iteration of 8 minibatch updates from the same seed ends at the same parameters."""
    states, kl = {}, {}
    for mode in ("eager", "compiled"):
        run_dir = tmp_path / mode
        flags = ["--compile", "on" if mode == "compiled" else "off"]
        run_agent(
            "ppo_nap",
            *FAST,
            "--total-timesteps",
            "128",
            "--eval-episodes",
            "0",
            "--seed",
            "3",
            *flags,
            run_dir=run_dir,
            timeout=900,
        )
        states[mode] = load_checkpoint(run_dir)["agent"]
        kl[mode] = read_progress(run_dir)["losses/approx_kl"][-1][2]
    assert kl["eager"] > 0  # the policy moved during the update
    assert kl["compiled"] == pytest.approx(kl["eager"], rel=1e-3)
    for name, value in states["eager"].items():
        torch.testing.assert_close(states["compiled"][name], value, rtol=1e-4, atol=1e-6, msg=name)
