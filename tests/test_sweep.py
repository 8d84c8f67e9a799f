"""`python -m cleanrl_style.experiments.sweep`: grids run to the end, restarts skip finished work and resume the rest."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cleanrl_style.experiments.sweep import expand_grid, parse_grid

REPO = Path(__file__).resolve().parents[1]

# A tiny agent with the plumbing of a real one (Run: folder, CSV, checkpoints, --resume): it logs one
# return per 10 steps, so a complete run has exactly the rows 10, 20, ..., total_timesteps.
TINY_AGENT = '''
import time
from dataclasses import dataclass

import tyro

import envs
from cleanrl_style import Run, RunArgs


@dataclass
class Args(RunArgs):
    step_sleep: float = 0.0
    """seconds to sleep per logged step (to give a test time to kill the run)"""
    bonus: float = 0.0
    """added to every return"""


if __name__ == "__main__":
    args = tyro.cli(Args)
    run = Run(args, agent_file=__file__)
    args = run.args
    envs.resolve_env_id(args.env)
    step = run.start_step
    while step < args.total_timesteps:
        step += 10
        run.log(step, {"charts/episodic_return": args.seed + args.bonus + step / 100})
        if run.checkpoint_due(step) or step >= args.total_timesteps:
            run.save(step)
        time.sleep(args.step_sleep)
    run.close()
'''


@pytest.fixture
def tiny_agent(tmp_path) -> Path:
    path = tmp_path / "tiny_agent.py"
    path.write_text(TINY_AGENT)
    return path


def sweep_command(agent: Path, sweep_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "cleanrl_style.experiments.sweep",
        "--agents",
        str(agent),
        "--envs",
        "InvertedPendulum",
        "Pendulum",
        "--seeds",
        "1",
        "2",
        "--sweep-dir",
        str(sweep_dir),
        "--workers",
        "2",
        "--flags",
        "--total-timesteps 200 --checkpoint-every 50 --eval-episodes 0",
        *extra,
    ]


def run_sweep(agent: Path, sweep_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(sweep_command(agent, sweep_dir, *extra), cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def logged_steps(run_dir: Path) -> list[int]:
    with open(run_dir / "progress.csv", newline="") as f:
        return [int(r["step"]) for r in csv.DictReader(f) if r["metric"] == "charts/episodic_return"]


def assert_complete(sweep_dir: Path, expected_runs: int = 4) -> list[Path]:
    runs = sorted(d for d in sweep_dir.iterdir() if d.is_dir())
    assert len(runs) == expected_runs, runs
    for run_dir in runs:
        assert (run_dir / "sweep.json").exists(), run_dir
        assert logged_steps(run_dir) == list(range(10, 201, 10)), run_dir  # no row duplicated or missing
    return runs


def test_grid_expands_agent_env_values_seed_into_distinct_run_folders(tiny_agent):
    points = expand_grid([str(tiny_agent)], ["Hopper", "Ant"], [1, 2], parse_grid(["nap=true,false", "lr=1e-3"]), [])
    assert len(points) == 2 * 2 * 2
    assert points[0].folder_name() == "Hopper__tiny_agent__nap-true__lr-1e-3__s1"
    assert points[0].label == "tiny_agent nap=true lr=1e-3"
    assert points[2].value_flags() == ["--no-nap", "--lr", "1e-3"]
    assert len({p.folder_name() for p in points}) == len(points)


@pytest.mark.slow
def test_a_sweep_completes_and_a_second_invocation_does_nothing(tiny_agent, tmp_path):
    sweep_dir = tmp_path / "sweep"
    first = run_sweep(tiny_agent, sweep_dir)
    assert "4 grid points" in first.stdout and "4 run(s) finished, 0 failed" in first.stdout
    runs = assert_complete(sweep_dir)
    args = json.loads((runs[0] / "args.json").read_text())
    assert (args["env"], args["seed"], args["total_timesteps"]) == ("InvertedPendulum", 1, 200)
    mtimes = {d: (d / "progress.csv").stat().st_mtime_ns for d in runs}

    second = run_sweep(tiny_agent, sweep_dir)
    assert "4 finished, 0 to run" in second.stdout
    assert {d: (d / "progress.csv").stat().st_mtime_ns for d in runs} == mtimes


@pytest.mark.slow
def test_grid_values_reach_the_agent_as_flags_and_a_failing_run_is_reported_with_its_log(tiny_agent, tmp_path):
    sweep_dir = tmp_path / "sweep"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cleanrl_style.experiments.sweep",
            "--agents",
            str(tiny_agent),
            "--envs",
            "Pendulum",
            "NoSuchEnv",
            "--seeds",
            "3",
            "--grid",
            "bonus=0.5,2",
            "--sweep-dir",
            str(sweep_dir),
            "--workers",
            "2",
            "--flags",
            "--total-timesteps 20 --eval-episodes 0",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    for bonus in (0.5, 2.0):
        run_dir = sweep_dir / f"Pendulum__tiny_agent__bonus-{bonus:g}__s3"
        assert json.loads((run_dir / "args.json").read_text())["bonus"] == bonus
        assert json.loads((run_dir / "sweep.json").read_text())["label"] == f"tiny_agent bonus={bonus:g}"
    # The other runs went on; the failures are named with the end of their log, and the sweep exits 1.
    assert proc.returncode == 1
    assert "2 run(s) finished, 2 failed" in proc.stdout
    assert "FAILED" in proc.stdout and "Unknown env 'NoSuchEnv'" in proc.stdout
    assert not (sweep_dir / "NoSuchEnv__tiny_agent__bonus-2__s3" / "sweep.json").exists()


@pytest.mark.slow
def test_a_sweep_killed_midway_finishes_on_restart_without_duplicated_or_missing_rows(tiny_agent, tmp_path):
    sweep_dir = tmp_path / "sweep"
    # Its own session, so that the kill takes the sweep and its runs at once, as a crash of the machine would.
    proc = subprocess.Popen(
        sweep_command(
            tiny_agent, sweep_dir, "--flags", "--total-timesteps 200 --checkpoint-every 50 --eval-episodes 0 --step-sleep 0.1"
        ),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline:  # until some run has a checkpoint and rows past it
            started = [d for d in sweep_dir.glob("*") if (d / "checkpoint.pt").exists() and (d / "progress.csv").exists()]
            if any(len(logged_steps(d)) >= 7 for d in started):
                break
            assert proc.poll() is None, "the sweep ended before it could be killed"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not any((d / "sweep.json").exists() for d in sweep_dir.iterdir())

    restart = run_sweep(tiny_agent, sweep_dir)
    assert "[resume]" in restart.stdout
    runs = assert_complete(sweep_dir)
    started_as = {json.loads((d / "sweep.json").read_text())["started_as"] for d in runs}
    assert "resume" in started_as


def test_a_resumed_point_takes_the_sweeps_new_total_and_refuses_a_contradicting_flag(tiny_agent, tmp_path):
    sweep_dir = tmp_path / "sweep"
    one_point = ["--envs", "Pendulum", "--seeds", "1", "--workers", "1"]
    run_dir = sweep_dir / "Pendulum__tiny_agent__s1"
    # A run stopped (as a kill after a checkpoint would leave it) at step 100 of a 100-step budget.
    started = [sys.executable, str(tiny_agent), "--env", "Pendulum", "--seed", "1", "--run-dir", str(run_dir)]
    subprocess.run([*started, "--total-timesteps", "100", "--checkpoint-every", "50", "--eval-episodes", "0"], check=True)
    # The sweep's budget is now 200: the point resumes with it, runs to 200 and records it.
    proc = subprocess.run(
        [*sweep_command(tiny_agent, sweep_dir)[:5], *one_point, "--sweep-dir", str(sweep_dir), "--flags",
         "--total-timesteps 200 --checkpoint-every 50 --eval-episodes 0"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0 and "[resume]" in proc.stdout, proc.stdout + proc.stderr
    assert logged_steps(run_dir) == list(range(10, 201, 10))
    assert json.loads((run_dir / "args.json").read_text())["total_timesteps"] == 200
    # A flag that a resume may not change is refused by name, and the run is left as it was.
    (run_dir / "sweep.json").unlink()
    proc = subprocess.run(
        [*sweep_command(tiny_agent, sweep_dir)[:5], *one_point, "--sweep-dir", str(sweep_dir), "--flags",
         "--total-timesteps 300 --bonus 2"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 1 and "--bonus 2.0 (saved: 0.0)" in proc.stdout, proc.stdout
    assert logged_steps(run_dir) == list(range(10, 201, 10))


@pytest.mark.slow
def test_the_ray_launcher_runs_the_same_grid_on_a_ray_cluster(tiny_agent, tmp_path):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        address = ray.get_runtime_context().gcs_address
        proc = subprocess.run(
            sweep_command(tiny_agent, tmp_path / "sweep", "--launcher", "ray", "--ray-address", address),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        ray.shutdown()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 run(s) finished, 0 failed" in proc.stdout
    assert_complete(tmp_path / "sweep")


def test_command_line_keeps_its_flags():
    from cleanrl_style.experiments.sweep import parse_args

    args = parse_args(
        [
            "--agents",
            "ppo_nap",
            "sac_nap",
            "--envs",
            "Hopper",
            "--seeds",
            "4",
            "5",
            "--flags",
            "--total-timesteps 100 --no-nap",
        ]
        + ["--grid", "nap=true,false", "--grid", "lr=1e-3", "--import", "my_envs", "--import", "more_envs", "--dry-run"]
    )
    assert (args.agents, args.envs, args.seeds) == (["ppo_nap", "sac_nap"], ["Hopper"], [4, 5])
    assert args.flags == "--total-timesteps 100 --no-nap" and args.grid == ["nap=true,false", "lr=1e-3"]
    assert args.imports == ["my_envs", "more_envs"] and args.dry_run and args.launcher == "local"
    assert parse_args(["--agents", "ppo_nap", "--envs", "Hopper", "--flags=--no-nap"]).flags == "--no-nap"
    assert parse_args(["--agents", "a", "--envs", "E", "--flags", "--no-nap", "--flags", "--seed-offset 2"]).flags == (
        "--seed-offset 2"
    )
