"""GPU check: one command, under eight minutes on one GPU, prints its figures and a verdict per item.

    python benchmarks/gpu_check.py
    python benchmarks/gpu_check.py --skip-smoke       # throughput figures only
    python benchmarks/gpu_check.py --device cpu --tiny   # every code path at the smallest sizes, no GPU

1. Humanoid-v5 with MuJoCo Warp on CUDA at 1,024, 8,192 and 32,768 worlds: physics env-steps/s
   (the captured CUDA graph of ``frame_skip`` MuJoCo steps, replayed) and full env steps/s through
   the contract (physics, observation, reward, termination and the masked reset), random actions.
2. PPO-NaP end to end at 4,096 worlds: ``agents/ppo_nap.py --backend warp --device cuda`` run as
   a subprocess for a few iterations; its SPS is read from ``runs/<run>/progress.csv`` (metric
   ``charts/SPS``, the last value).
3. Smoke runs of every control agent on CUDA, a few thousand Hopper steps each, on the warp and the
   mujoco backends (and one compiled, one bf16): each must exit 0 with finite losses; its SPS is
   printed.

Goals on one H100/H200-class GPU: >= 1M physics env-steps/s at 8,192 worlds, >= 100k SPS for PPO.
The first run compiles MuJoCo Warp's CUDA kernels (cached in ~/.cache/warp afterwards).

``--device cpu --tiny`` runs the same code on warp's CPU device with a few worlds, steps and units
each (the slow test tier runs it), so that the script works the day a GPU arrives; its figures
mean nothing and no goal is judged.
"""

from __future__ import annotations

import csv
import dataclasses
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import tyro

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PHYSICS_GOAL = 1_000_000  # physics env-steps/s at 8,192 worlds
PPO_GOAL = 100_000  # end-to-end SPS at 4,096 worlds


def require_device(device: str) -> None:
    problems = []
    if device == "cuda" and not torch.cuda.is_available():
        problems.append("torch sees no CUDA device (torch.cuda.is_available() is False; a CPU-only torch build?)")
    try:
        import mujoco_warp  # noqa: F401
        import warp as wp

        wp.init()
        if device == "cuda" and not wp.is_cuda_available():
            problems.append("warp finds no CUDA device or driver")
    except ImportError as err:
        problems.append(f"{err.name} is not installed (pip install -e '.[gpu]')")
    if problems:
        needs = "mujoco-warp and warp-lang" + (" and a CUDA GPU" if device == "cuda" else "")
        sys.exit(
            f"gpu_check --device {device} needs {needs}: " + "; ".join(problems) + ". Without a GPU: --device cpu --tiny."
        )


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def measure_warp(num_envs: int, seconds: float, device: str = "cuda") -> tuple[float, float, float]:
    """(physics env-steps/s, env steps/s, seconds to build) for Humanoid at ``num_envs`` worlds on ``device``."""
    import envs

    start = time.perf_counter()
    env = envs.make("Humanoid", num_envs=num_envs, backend="warp", device=device, seed=0)
    env.reset()
    build = time.perf_counter() - start
    low, high = env.action_low, env.action_high

    def timed(step) -> float:
        step()  # warm-up
        synchronize(device)
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(10):
                step()
            steps += 10
            synchronize(device)
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


RUNS = ROOT / "runs" / "gpu_check"  # --runs-dir changes it


def run_agent(name: str, agent: str, flags: list[str], timeout: float) -> dict[str, float]:
    """Run ``agents/<agent>.py`` with ``flags`` into ``RUNS/<name>``; return its last logged metrics."""
    run_dir = RUNS / name
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [sys.executable, str(ROOT / "agents" / f"{agent}.py"), *flags, "--no-progress-bar", "--run-dir", str(run_dir)]
    print("  $", " ".join(cmd[1:]), flush=True)
    start = time.perf_counter()
    try:
        result = subprocess.run(cmd, cwd=ROOT, timeout=timeout, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if result.returncode != 0:
        return {
            "error": f"exit {result.returncode}: {result.stderr.strip().splitlines()[-1] if result.stderr.strip() else ''}"
        }
    last: dict[str, float] = {"seconds": time.perf_counter() - start}
    with open(run_dir / "progress.csv") as f:
        for row in csv.DictReader(f):
            last[row["metric"]] = float(row["value"])
    return last


def ppo_sps(num_envs: int, iterations: int, num_steps: int, timeout: float, device: str = "cuda") -> float:
    flags = ["--env", "Humanoid", "--backend", "warp", "--device", device, "--num-envs", str(num_envs)]
    flags += ["--num-steps", str(num_steps), "--total-timesteps", str(num_envs * num_steps * iterations)]
    flags += ["--eval-episodes", "0", "--checkpoint-every", str(10**12)]
    last = run_agent("ppo_nap_throughput", "ppo_nap", flags, timeout)
    if "error" in last:
        sys.exit(f"ppo_nap.py failed: {last['error']}")
    if "charts/SPS" not in last:
        sys.exit("ppo_nap.py logged no charts/SPS")
    return last["charts/SPS"]


def smoke_runs(tiny: bool = False) -> list[tuple[str, str, list[str]]]:
    """(name, agent, flags): a few thousand Hopper steps each, learning started early so that updates
    run; ``tiny``: a few hundred steps of narrow networks, the same code paths."""
    steps, starts = ("200", "100") if tiny else ("3000", "1000")
    short = ["--total-timesteps", steps, "--eval-episodes", "0", "--log-every", "50" if tiny else "500"]
    warm = ["--learning-starts", starts]
    symphony = ["--warmup-steps", starts, "--buffer-size", "2000" if tiny else "20000"]
    ppo_warp = ["--num-envs", "4", "--num-steps", "16", "--total-timesteps", "128"] if tiny else \
        ["--num-envs", "64", "--num-steps", "32", "--total-timesteps", "6144"]  # fmt: skip
    ppo_mujoco = (
        ["--num-steps", "64", "--total-timesteps", "512"] if tiny else ["--num-steps", "384", "--total-timesteps", "3072"]
    )
    narrow: dict[str, list[str]] = {"ppo_nap": [], "sac_nap": [], "sac_simba": [], "symphony": []}
    if tiny:
        narrow = {
            "ppo_nap": [],
            "sac_nap": ["--hidden-sizes", "32", "32", "--batch-size", "32"],
            "sac_simba": ["--critic-width", "32", "--actor-width", "32", "--batch-size", "32"],
            "symphony": ["--hidden", "64", "--critic-nodes", "16", "--batch-size", "32"],
        }
    runs = [
        ("ppo_nap_warp", "ppo_nap", ["--backend", "warp", *ppo_warp]),
        ("ppo_nap_mujoco", "ppo_nap", ["--backend", "mujoco", *ppo_mujoco]),
        ("sac_nap_warp", "sac_nap", ["--backend", "warp", "--num-envs", "4", *warm, *short]),
        ("sac_nap_mujoco", "sac_nap", ["--backend", "mujoco", *warm, *short]),
        ("sac_simba_warp_compiled", "sac_simba", ["--backend", "warp", "--compile", "on", *warm, *short]),
        ("sac_simba_mujoco_bf16", "sac_simba", ["--backend", "mujoco", "--precision", "bf16", *warm, *short]),
        ("symphony_warp", "symphony", ["--backend", "warp", *symphony, *short]),
        ("symphony_mujoco", "symphony", ["--backend", "mujoco", *symphony, *short]),
    ]
    return [(name, agent, [*flags, *narrow[agent]]) for name, agent, flags in runs]


def smoke(timeout: float, device: str = "cuda", tiny: bool = False, workers: int = 1) -> bool:
    """Every control agent on ``device``, ``workers`` runs at a time; True if all exit 0 with finite losses."""
    import math
    from concurrent.futures import ThreadPoolExecutor

    runs = smoke_runs(tiny)
    with ThreadPoolExecutor(max_workers=workers) as pool:  # each run is a subprocess: threads only wait on them
        finished = pool.map(
            lambda run: run_agent(f"smoke_{run[0]}", run[1], ["--env", "Hopper", "--device", device, *run[2]], timeout), runs
        )
        ok = True
        for (name, _, _), last in zip(runs, finished):  # in the runs' order, each as soon as it and those before end
            losses = {k: v for k, v in last.items() if k.startswith("losses/")}
            if "error" in last:
                verdict = f"FAILED ({last['error']})"
            elif not losses or not all(math.isfinite(v) for v in losses.values()):
                verdict = f"FAILED (losses {losses or 'never logged'})"
            else:
                verdict = "ok"
            ok &= verdict == "ok"
            sps = last.get("charts/SPS", float("nan"))
            print(f"  {name:26s} {verdict:8s} SPS {sps:>9,.0f}   ({last.get('seconds', float('nan')):.0f} s)", flush=True)
    return ok


@dataclass
class CheckArgs:
    device: Literal["cuda", "cpu"] = "cuda"
    """where warp and the agents run (cpu: warp's CPU device, to check the script itself)"""
    tiny: bool = False
    """the smallest sizes: a few worlds, steps and units (with --device cpu: every code path in minutes)"""
    num_envs: tuple[int, ...] = (1024, 8192, 32768)
    """worlds for the warp throughput figures"""
    seconds: float = 5.0
    """measuring time per figure"""
    ppo_num_envs: int = 4096
    """worlds of the PPO-NaP throughput run"""
    ppo_iterations: int = 3
    """PPO iterations (the SPS of the last is reported)"""
    ppo_num_steps: int = 64
    """steps per sub-environment per PPO iteration"""
    ppo_timeout: float = 360.0
    """seconds before the PPO run is abandoned"""
    smoke_timeout: float = 150.0
    """seconds before one smoke run is abandoned"""
    smoke_workers: int = 1
    """smoke runs at once (their SPS figures are not judged; 2 on a 2-core CPU with --tiny uses both cores)"""
    skip_ppo: bool = False
    """skip the PPO throughput run"""
    skip_smoke: bool = False
    """skip the smoke runs of every agent"""
    runs_dir: str = ""
    """where the agents' run folders go (default: runs/gpu_check)"""


def main(args: CheckArgs) -> None:
    global RUNS
    if args.runs_dir:
        RUNS = Path(args.runs_dir)
    if args.tiny:
        # smoke_timeout: a compiled update on a loaded 2-core CPU takes minutes to compile
        args = dataclasses.replace(
            args, num_envs=(4,), seconds=0.5, ppo_num_envs=4, ppo_iterations=2, ppo_num_steps=16, smoke_timeout=900.0
        )
    require_device(args.device)
    name = torch.cuda.get_device_name() if args.device == "cuda" else "none (warp's CPU device)"
    print(f"GPU: {name}  torch {torch.__version__}{'  (--tiny: figures not judged)' if args.tiny else ''}", flush=True)
    judged = args.device == "cuda" and not args.tiny
    start = time.perf_counter()
    results = {}
    print("Humanoid-v5, MuJoCo Warp, random actions (env steps/s summed over worlds):", flush=True)
    for n in args.num_envs:
        physics, full, build = measure_warp(n, args.seconds, args.device)
        results[n] = physics
        print(f"  {n:>6} worlds: physics {physics:>12,.0f}/s   env step {full:>12,.0f}/s   (build {build:.0f} s)", flush=True)
    if 8192 in results and judged:
        verdict = "meets" if results[8192] >= PHYSICS_GOAL else "misses"
        print(f"  8,192 worlds {verdict} the goal of {PHYSICS_GOAL:,} physics env-steps/s", flush=True)
    if not args.skip_ppo:
        print(f"PPO-NaP end to end, Humanoid, {args.ppo_num_envs} worlds:", flush=True)
        sps = ppo_sps(args.ppo_num_envs, args.ppo_iterations, args.ppo_num_steps, args.ppo_timeout, args.device)
        verdict = ("meets" if sps >= PPO_GOAL else "misses") if judged else "not judged"
        print(f"  SPS {sps:,.0f} ({verdict} the goal of {PPO_GOAL:,})", flush=True)
    if not args.skip_smoke:
        print(f"Every control agent on {args.device}, Hopper-v5, {'a few hundred' if args.tiny else 'a few thousand'} steps:",
              flush=True)  # fmt: skip
        all_ok = smoke(args.smoke_timeout, args.device, args.tiny, args.smoke_workers)
        print(f"  smoke runs: {'all passed' if all_ok else 'FAILURES above'}", flush=True)
        if not all_ok:
            sys.exit(1)
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main(tyro.cli(CheckArgs))
