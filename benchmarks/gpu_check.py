"""GPU check of the warp backend: one command, under ten minutes, prints its figures.

    python benchmarks/gpu_check.py

1. Humanoid-v5 with MuJoCo Warp on CUDA at 1,024, 8,192 and 32,768 worlds: physics env-steps/s
   (the captured CUDA graph of ``frame_skip`` MuJoCo steps, replayed) and full env steps/s through
   the contract (physics, observation, reward, termination and the masked reset), random actions.
2. PPO-NaP end to end at 4,096 worlds: ``agents/ppo_nap.py --backend warp --device cuda`` run as
   a subprocess for a few iterations; its SPS is read from ``runs/<run>/progress.csv`` (metric
   ``charts/SPS``, the last value).

Goals on one H100/H200-class GPU: >= 1M physics env-steps/s at 8,192 worlds, >= 100k SPS for PPO.
The first run compiles MuJoCo Warp's CUDA kernels (cached in ~/.cache/warp afterwards).
"""

from __future__ import annotations

import argparse
import csv
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PHYSICS_GOAL = 1_000_000  # physics env-steps/s at 8,192 worlds
PPO_GOAL = 100_000  # end-to-end SPS at 4,096 worlds


def require_cuda() -> None:
    problems = []
    if not torch.cuda.is_available():
        problems.append("torch sees no CUDA device (torch.cuda.is_available() is False; a CPU-only torch build?)")
    try:
        import mujoco_warp  # noqa: F401
        import warp as wp

        wp.init()
        if not wp.is_cuda_available():
            problems.append("warp finds no CUDA device or driver")
    except ImportError as err:
        problems.append(f"{err.name} is not installed (pip install -e '.[gpu]')")
    if problems:
        sys.exit("gpu_check needs a CUDA GPU with mujoco-warp and warp-lang: " + "; ".join(problems) + ".")


def measure_warp(num_envs: int, seconds: float) -> tuple[float, float, float]:
    """(physics env-steps/s, env steps/s, seconds to build) for Humanoid at ``num_envs`` worlds on CUDA."""
    import envs

    start = time.perf_counter()
    env = envs.make("Humanoid", num_envs=num_envs, backend="warp", device="cuda", seed=0)
    env.reset()
    build = time.perf_counter() - start
    low, high = env.action_low, env.action_high

    def timed(step) -> float:
        step()  # warm-up
        torch.cuda.synchronize()
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(10):
                step()
            steps += 10
            torch.cuda.synchronize()
        return steps * num_envs / (time.perf_counter() - t0)

    def physics():
        env.state.ctrl.uniform_(-0.4, 0.4)
        env._run("physics")

    def full():
        env.step(low + (high - low) * torch.rand((num_envs, *low.shape), device=env.device))

    physics_sps = timed(physics)
    env.reset()
    env_sps = timed(full)
    env.close()
    return physics_sps, env_sps, build


def ppo_sps(num_envs: int, iterations: int, num_steps: int, timeout: float) -> float:
    run_dir = ROOT / "runs" / "gpu_check_ppo_nap"
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [
        sys.executable,
        str(ROOT / "agents" / "ppo_nap.py"),
        "--env",
        "Humanoid",
        "--backend",
        "warp",
        "--device",
        "cuda",
        "--num-envs",
        str(num_envs),
        "--num-steps",
        str(num_steps),
        "--total-timesteps",
        str(num_envs * num_steps * iterations),
        "--eval-episodes",
        "0",
        "--no-progress-bar",
        "--checkpoint-every",
        str(10**12),
        "--run-dir",
        str(run_dir),
    ]
    print("  $", " ".join(cmd[1:]), flush=True)
    result = subprocess.run(cmd, cwd=ROOT, timeout=timeout, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"ppo_nap.py failed (exit {result.returncode}):\n{result.stderr[-4000:]}")
    with open(run_dir / "progress.csv") as f:
        sps = [float(row["value"]) for row in csv.DictReader(f) if row["metric"] == "charts/SPS"]
    if not sps:
        sys.exit(f"no charts/SPS in {run_dir / 'progress.csv'}")
    return sps[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1024, 8192, 32768])
    parser.add_argument("--seconds", type=float, default=5.0, help="measuring time per figure")
    parser.add_argument("--ppo-num-envs", type=int, default=4096)
    parser.add_argument("--ppo-iterations", type=int, default=3, help="PPO iterations (the SPS of the last is reported)")
    parser.add_argument("--ppo-num-steps", type=int, default=64, help="steps per sub-environment per iteration")
    parser.add_argument("--ppo-timeout", type=float, default=360.0)
    parser.add_argument("--skip-ppo", action="store_true")
    args = parser.parse_args()

    require_cuda()
    print(f"GPU: {torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    start = time.perf_counter()
    results = {}
    print("Humanoid-v5, MuJoCo Warp, random actions (env steps/s summed over worlds):", flush=True)
    for n in args.num_envs:
        physics, full, build = measure_warp(n, args.seconds)
        results[n] = physics
        print(f"  {n:>6} worlds: physics {physics:>12,.0f}/s   env step {full:>12,.0f}/s   (build {build:.0f} s)", flush=True)
    if 8192 in results:
        verdict = "meets" if results[8192] >= PHYSICS_GOAL else "misses"
        print(f"  8,192 worlds {verdict} the goal of {PHYSICS_GOAL:,} physics env-steps/s", flush=True)
    if not args.skip_ppo:
        print(f"PPO-NaP end to end, Humanoid, {args.ppo_num_envs} worlds:", flush=True)
        sps = ppo_sps(args.ppo_num_envs, args.ppo_iterations, args.ppo_num_steps, args.ppo_timeout)
        verdict = "meets" if sps >= PPO_GOAL else "misses"
        print(f"  SPS {sps:,.0f} ({verdict} the goal of {PPO_GOAL:,})", flush=True)
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
