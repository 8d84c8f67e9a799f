"""PPO-NaP (agents/ppo_nap.py) against Stable-Baselines3 PPO: environment steps per second.

    python benchmarks/ppo_vs_sb3.py --env Humanoid --total-timesteps 32768

Both use the same rollout (8 envs x 256 steps), 32 minibatches, 10 epochs, 64x64 tanh networks,
observation and reward normalization, and one torch thread (SB3 is slower with more on 2 cores:
``--sb3-threads 0`` measures its default). Ours runs with its defaults otherwise (LayerNorm, NaP,
the fastest backend); SB3 with its DummyVecEnv over Gymnasium envs, as its users run it.
Both sides are timed over the same window, from environment construction to the end of
training (imports and interpreter start excluded on both sides: for ours that is the run's own
clock, the ``time`` column of ``progress.csv`` at its last row). The whole-process time of ours is
printed too. Prints each SPS and the ratio.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tyro

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Args:
    env: str = "Humanoid"
    """environment short name or Gymnasium id"""
    total_timesteps: int = 32_768
    """steps per contender (a multiple of 2,048)"""
    sb3_threads: int = 1
    """torch threads for SB3 (0: torch's default)"""
    backend: str = "auto"
    """our vector-env backend"""


def ours_sps(args: Args) -> tuple[float, float]:
    """(SPS over the run's own clock, SPS over the whole process)."""
    from cleanrl_style.logger import read_progress

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [
            sys.executable, str(REPO_ROOT / "agents" / "ppo_nap.py"), "--env", args.env,
            "--total-timesteps", str(args.total_timesteps), "--backend", args.backend,
            "--eval-episodes", "0", "--no-progress-bar", "--run-dir", str(run_dir),
        ]
        start = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=tmp)
        whole_process = time.perf_counter() - start
        run_clock = read_progress(run_dir)["charts/SPS"][-1][1]
        return args.total_timesteps / run_clock, args.total_timesteps / whole_process


def sb3_sps(args: Args) -> float:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    import envs

    if args.sb3_threads > 0:
        torch.set_num_threads(args.sb3_threads)
    start = time.perf_counter()
    vec = VecNormalize(make_vec_env(envs.resolve_env_id(args.env), n_envs=8, seed=1), gamma=0.99)
    model = PPO(
        "MlpPolicy", vec, n_steps=256, batch_size=64, n_epochs=10, learning_rate=3e-4, gamma=0.99,
        gae_lambda=0.95, clip_range=0.2, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5,
        policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn=torch.nn.Tanh), seed=1, device="cpu",
    )
    model.learn(total_timesteps=args.total_timesteps)
    return args.total_timesteps / (time.perf_counter() - start)


if __name__ == "__main__":
    args = tyro.cli(Args)
    os.environ.setdefault("MUJOCO_GL", "disable")
    ours, ours_process = ours_sps(args)
    print(f"ppo_nap.py      {args.env}: {ours:8.0f} SPS   ({ours_process:.0f} SPS counting interpreter start and imports)", flush=True)
    theirs = sb3_sps(args)
    print(f"SB3 PPO         {args.env}: {theirs:8.0f} SPS")
    print(f"ratio ours/SB3: {ours / theirs:.2f}x")
