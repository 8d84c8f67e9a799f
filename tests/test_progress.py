"""Progress of a run without a terminal: plain lines with the step, rate, figures and time left."""

from __future__ import annotations

import dataclasses
import io
import subprocess
import sys

import pytest
import torch

from cleanrl_style.runs.progress import Progress, format_duration


def test_a_plain_line_at_the_first_update_then_at_most_every_interval(capsys):
    progress = Progress(total=1000, initial=0, bar=False, every=3600)
    progress.update(100, recent_return=12.34, sps=1234.5)
    progress.update(200, recent_return=15.0, sps=1500.0)  # within the interval: no line
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("[progress] step 100/1,000 (10.0%) | SPS 1,234 | return 12.3 | elapsed 0:00:0")
    assert " | left " in lines[0]
    progress.close()  # the step reached since the last line, for the end of a log
    (last,) = capsys.readouterr().out.splitlines()
    assert last.startswith("[progress] step 200/1,000 (20.0%) | SPS 1,500 | return 15.0")


def test_agents_add_their_own_figures(capsys):
    progress = Progress(total=200, initial=10, bar=False, every=1e-9)
    progress.update(10, extra={"tokens/s": 14.63, "success": 0.5, "rollout turn": "3/8"})  # inside an iteration
    progress.update(11, extra={"tokens/s": 15.2, "update micro-batch": "2/4"})
    first, second = capsys.readouterr().out.splitlines()
    assert first.startswith("[progress] step 10/200 (5.0%) | tokens/s 14.63 | success 0.5 | rollout turn 3/8 | elapsed ")
    assert " left " not in first  # no step done in this process yet: no rate to extrapolate
    assert "| tokens/s 15.2 | update micro-batch 2/4 |" in second and " | left " in second


def test_time_left_extrapolates_the_rate_of_this_process():
    progress = Progress(total=1000, initial=500, bar=False, every=0)
    progress.update(600)
    start_time, _ = progress._start
    # 100 steps in 10 s since the (resumed) start: 400 left take 40 s.
    assert progress.line(now=start_time + 10).endswith("| elapsed 0:00:10 | left 0:00:40")


def test_no_lines_when_the_interval_is_zero(capsys):
    progress = Progress(total=10, bar=False, every=0)
    progress.update(5)
    progress.close()
    assert capsys.readouterr().out == ""


def test_durations_read_as_hours_minutes_seconds():
    assert format_duration(0) == "0:00:00"
    assert format_duration(3725.9) == "1:02:05"
    assert format_duration(90000) == "25:00:00"


class _Policy(torch.nn.Module):
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.zeros(obs.shape[0], 1)


def _finish_a_run(tmp_path, bar: bool) -> None:
    from ppo_nap import Args

    from cleanrl_style import Run

    args = Args(env="Pendulum", run_dir=str(tmp_path / "run"), total_timesteps=100, num_envs=1, num_steps=50)
    run = Run(dataclasses.replace(args, eval_episodes=1, progress_bar=bar, progress_every=3600), agent_file="ppo_nap.py")
    run.progress(50, sps=10.0)
    run.progress(100, sps=10.0)
    run.save(100, agent={})
    run.final_evaluation(_Policy(), 100)
    run.close()


def test_piped_the_last_progress_line_comes_before_the_evaluation(tmp_path, capsys):
    _finish_a_run(tmp_path, bar=False)
    lines = capsys.readouterr().out.splitlines()
    last = next(i for i, line in enumerate(lines) if line.startswith("[progress] step 100/100 (100.0%)"))
    evaluation = next(i for i, line in enumerate(lines) if line.startswith("evaluation over 1 episodes"))
    assert last < evaluation, lines


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_evaluation_starts_a_line_of_its_own(tmp_path, monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)  # one screen: stdout and the bar's stderr
    monkeypatch.setattr(sys, "stderr", terminal)
    _finish_a_run(tmp_path, bar=True)
    screen = terminal.getvalue()
    before = screen[: screen.index("evaluation over")]
    assert before.endswith("\n") and "100/100" in before.split("\n")[-2], repr(screen)


def test_eval_every_evaluates_the_watched_policy_during_training(tmp_path, capsys):
    from ppo_nap import Args

    from cleanrl_style import Run
    from cleanrl_style.runs.logger import read_progress

    args = Args(env="Pendulum", run_dir=str(tmp_path / "run"), total_timesteps=300, num_envs=1, num_steps=50)
    run = Run(dataclasses.replace(args, eval_every=100, eval_episodes=1, progress_bar=False), agent_file="ppo_nap.py")
    policy = _Policy()
    run.watch(policy, None)
    for step in range(50, 301, 50):
        run.progress(step)
    assert policy.training  # evaluated in eval mode, handed back in training mode
    run.final_evaluation(policy, 300)  # evaluated at 300 already: not twice
    run.close()
    assert [step for step, _, _ in read_progress(tmp_path / "run")["eval/return_mean"]] == [100, 200, 300]
    assert "evaluation over 1 episodes at step 200: " in capsys.readouterr().out


@pytest.mark.slow
def test_eval_every_in_an_agent_run_draws_as_an_eval_curve(tmp_path):
    from agent_runs import REPO, run_agent

    run_dir = tmp_path / "runs" / "ppo"
    flags = ["--env", "Pendulum", "--num-envs", "1", "--num-steps", "64", "--num-minibatches", "2", "--update-epochs", "1"]
    flags += ["--total-timesteps", "256", "--eval-every", "128", "--eval-episodes", "2", "--compile", "off"]
    proc = run_agent("ppo_nap", *flags, run_dir=run_dir)
    assert "evaluation over 2 episodes at step 128: " in proc.stdout
    from cleanrl_style.runs.logger import read_progress

    assert [step for step, _, _ in read_progress(run_dir)["eval/return_mean"]] == [128, 256]
    plots = tmp_path / "plots"
    command = [
        sys.executable,
        "-m",
        "cleanrl_style.experiments.plot",
        str(tmp_path / "runs"),
        "--out",
        str(plots),
        "--metric",
        "eval/return_mean",
    ]
    plotted = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert plotted.returncode == 0, plotted.stdout + plotted.stderr
    assert (plots / "curves_steps.png").stat().st_size > 10_000
