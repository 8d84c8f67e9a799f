"""PPO-NaP (agents/ppo_nap.py) against Stable-Baselines3 PPO: environment steps per second.

    python benchmarks/ppo_vs_sb3.py --env Humanoid --total-timesteps 98304 --repeats 3
    python benchmarks/ppo_vs_sb3.py --compile on ...   # ours with the loss compiled (auto: only from 500k steps)

Both use the same rollout (8 envs x 256 steps), 32 minibatches, 10 epochs, 64x64 tanh networks,
observation and reward normalization, and one torch thread (SB3 is slower with more on 2 cores:
``--sb3-threads 0`` measures its default). Ours runs with its defaults otherwise (LayerNorm, NaP,
the fastest backend); SB3 with its DummyVecEnv over Gymnasium envs, as its users run it. Ours'
default backend for Humanoid, ``mujoco``, steps the 8 simulations on one thread per CPU while
SB3 steps them serially; ``--env-threads 0 1`` also times ours with the physics on one thread.

Two figures per contender:

- **window**: steps / time from environment construction to the end of training (imports and
  interpreter start excluded on both sides; for ours that is the run's own clock, the ``time``
  column of ``progress.csv`` at its last row). Includes one-off costs: the first iteration,
  ``torch.compile`` with ``--compile on``.
- **steady**: steps after the first iteration / time after it, what a long run approaches.

The machine's speed drifts by 10-20% over minutes (a shared host), so ``--repeats`` alternates
the contenders and the ratios of each pair are reported with their median.

A third contender, LeanRL's compiled PPO (``leanrl/ppo_continuous_action_torchcompile.py`` of
pytorch-labs/LeanRL, CleanRL's PPO with ``torch.compile``), runs in the same rounds when
``--leanrl`` names a checkout of it and ``--leanrl-python`` an interpreter with its requirements
(it is not vendored here). It runs with ``--compile --no-cuda`` on the same shapes and one torch
thread, on Gymnasium's own vector env (its ``gymnasium`` version's newest Humanoid, v4 under
gymnasium 0.29). Its **steady** figure is the one it prints itself (steps / time after its first
two iterations, its ``measure_burnin``), which needs at least 10 iterations; its **window** is the
whole process, interpreter start and imports included, so it flatters neither side.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import tyro
from timing import run_leanrl  # benchmarks/timing.py, beside this script

REPO_ROOT = Path(__file__).resolve().parents[1]
BATCH = 2048  # 8 envs x 256 steps: one iteration of either contender


@dataclass
class Args:
    env: str = "Humanoid"
    """environment short name or Gymnasium id"""
    total_timesteps: int = 32_768
    """steps per contender (a multiple of 2,048, at least 4,096)"""
    sb3_threads: int = 1
    """torch threads for SB3 (0: torch's default)"""
    backend: str = "auto"
    """our vector-env backend"""
    compile: Literal["auto", "on", "off"] = "auto"
    """ours' --compile (auto: compiled for runs of 500k steps or more, as agents/ppo_nap.py decides)"""
    repeats: int = 1
    """alternate ours and SB3 this many times"""
    env_threads: tuple[int, ...] = (0,)
    """ours' --env-threads, one run each per round (0: one physics thread per CPU, the default; 1:
    the physics on one core, as SB3's serial DummyVecEnv)"""
    leanrl: Path | None = None
    """a checkout of pytorch-labs/LeanRL: also time its compiled PPO in each round"""
    leanrl_python: str = sys.executable
    """the Python that runs LeanRL (its own environment: tensordict, a gymnasium with MuJoCo v4 envs)"""
    leanrl_env: str = "Humanoid-v4"
    """the env id LeanRL's gymnasium knows"""


def ours_sps(args: Args, env_threads: int) -> tuple[float, float, float]:
    """(window SPS, steady SPS, whole-process SPS) of one run of agents/ppo_nap.py."""
    from cleanrl_style.runs.logger import read_progress

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [
            sys.executable,
            str(REPO_ROOT / "agents" / "ppo_nap.py"),
            "--env",
            args.env,
            "--total-timesteps",
            str(args.total_timesteps),
            "--backend",
            args.backend,
            "--eval-episodes",
            "0",
            "--no-progress-bar",
            "--run-dir",
            str(run_dir),
            "--compile",
            args.compile,
            "--env-threads",
            str(env_threads),
        ]
        start = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=tmp)
        whole_process = time.perf_counter() - start
        times = [t for _, t, _ in read_progress(run_dir)["charts/SPS"]]  # one row per iteration
        window = args.total_timesteps / times[-1]
        steady = (args.total_timesteps - BATCH) / (times[-1] - times[0])
        return window, steady, args.total_timesteps / whole_process


def sb3_sps(args: Args) -> tuple[float, float]:
    """(window SPS, steady SPS) of one SB3 PPO run in this process."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    import envs

    class RolloutClock(BaseCallback):
        def __init__(self):
            super().__init__()
            self.starts: list[float] = []

        def _on_rollout_start(self) -> None:
            self.starts.append(time.perf_counter())

        def _on_step(self) -> bool:
            return True

    if args.sb3_threads > 0:
        torch.set_num_threads(args.sb3_threads)
    start = time.perf_counter()
    vec = VecNormalize(make_vec_env(envs.resolve_env_id(args.env), n_envs=8, seed=1), gamma=0.99)
    model = PPO(
        "MlpPolicy",
        vec,
        n_steps=256,
        batch_size=64,
        n_epochs=10,
        learning_rate=3e-4,
        gamma=0.99,
        gae_lambda=0.95,
        clip_range=0.2,
        ent_coef=0.0,
        vf_coef=0.5,
        max_grad_norm=0.5,
        policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn=torch.nn.Tanh),
        seed=1,
        device="cpu",
    )
    clock = RolloutClock()
    model.learn(total_timesteps=args.total_timesteps, callback=clock)
    end = time.perf_counter()
    # starts[1] is the end of the first iteration (its rollout and its update).
    return args.total_timesteps / (end - start), (args.total_timesteps - BATCH) / (end - clock.starts[1])


def leanrl_sps(args: Args) -> tuple[float, float]:
    """(whole-process SPS, LeanRL's own steady SPS) of one run of its compiled PPO script."""
    flags = ["--env-id", args.leanrl_env, "--num-envs", "8", "--num-steps", "256"]
    flags += ["--total-timesteps", str(args.total_timesteps), "--compile", "--no-cuda"]
    # One torch thread, as the other two.
    seconds, stderr = run_leanrl(args.leanrl, args.leanrl_python, "ppo_continuous_action_torchcompile.py", flags, 1)
    speeds = re.findall(r"speed:\s*([0-9.]+) sps", stderr)
    if not speeds:
        raise SystemExit("LeanRL's PPO printed no speed: --total-timesteps must give it at least 10 iterations")
    return args.total_timesteps / seconds, float(speeds[-1])


if __name__ == "__main__":
    args = tyro.cli(Args)
    if args.total_timesteps % BATCH or args.total_timesteps < 2 * BATCH:
        raise SystemExit(f"--total-timesteps must be a multiple of {BATCH} and at least {2 * BATCH}")
    if args.leanrl is not None and args.total_timesteps < 10 * BATCH:
        limit = 10 * BATCH  # LeanRL prints its speed every 10 iterations
        raise SystemExit(f"--leanrl needs --total-timesteps of at least {limit}: raise it")
    os.environ.setdefault("MUJOCO_GL", "disable")
    names = {t: f"ppo_nap.py, {t or 'all'} env thread(s)" for t in args.env_threads}
    window_ratios: dict[int, list[float]] = {t: [] for t in args.env_threads}
    steady_ratios: dict[int, list[float]] = {t: [] for t in args.env_threads}
    leanrl_ratios: dict[int, list[float]] = {t: [] for t in args.env_threads}
    for repeat in range(args.repeats):
        ours = {}
        for threads in args.env_threads:
            ours[threads] = ours_sps(args, threads)
            window, steady, process = ours[threads]
            print(
                f"[{repeat + 1}] {names[threads]:32s} {args.env}: window {window:6.0f} SPS   steady {steady:6.0f} SPS   "
                f"({process:.0f} SPS counting interpreter start and imports)",
                flush=True,
            )
        theirs, theirs_steady = sb3_sps(args)
        print(
            f"[{repeat + 1}] {'SB3 PPO':32s} {args.env}: window {theirs:6.0f} SPS   steady {theirs_steady:6.0f} SPS",
            flush=True,
        )
        lean_steady = None
        if args.leanrl is not None:
            lean, lean_steady = leanrl_sps(args)
            print(
                f"[{repeat + 1}] {'LeanRL PPO (compiled)':32s} {args.leanrl_env}: whole process {lean:6.0f} SPS   "
                f"steady {lean_steady:6.0f} SPS (its own figure, after 2 iterations)",
                flush=True,
            )
        for threads, (window, steady, _) in ours.items():
            window_ratios[threads].append(window / theirs)
            steady_ratios[threads].append(steady / theirs_steady)
            line = f"window {window_ratios[threads][-1]:.2f}x   steady {steady_ratios[threads][-1]:.2f}x"
            if lean_steady is not None:
                leanrl_ratios[threads].append(steady / lean_steady)
                line += f"   ours/LeanRL steady {leanrl_ratios[threads][-1]:.2f}x"
            print(f"[{repeat + 1}] {names[threads]} / SB3: {line}", flush=True)
    fmt = lambda ratios: ", ".join(f"{r:.2f}" for r in ratios)  # noqa: E731
    for threads in args.env_threads:
        window, steady = window_ratios[threads], steady_ratios[threads]
        print(
            f"{names[threads]} / SB3 over {args.repeats} pair(s), {args.total_timesteps} steps each: "
            f"window median {statistics.median(window):.2f}x ({fmt(window)}), "
            f"steady median {statistics.median(steady):.2f}x ({fmt(steady)})"
        )
        if leanrl_ratios[threads]:
            lean = leanrl_ratios[threads]
            print(f"{names[threads]} / LeanRL (steady): median {statistics.median(lean):.2f}x ({fmt(lean)})")
