"""Env steps per second of every vector-env backend (random actions), beside raw MuJoCo physics.

The ceiling is ``mujoco.batch.Batch`` on all cores: MuJoCo's native threaded batch stepping the
same model ``frame_skip`` substeps per env step with random controls, resetting fallen worlds, with
no observations, rewards or Python per sub-environment. A backend's ratio to it is the share of the
machine's physics throughput it delivers.

    python benchmarks/env_throughput.py                              # Humanoid, all backends, CPU
    python benchmarks/env_throughput.py --num-envs 1024 8192 --device cuda --backends warp
    python benchmarks/env_throughput.py --markdown benchmarks/README.md
    python benchmarks/env_throughput.py --num-envs 8 --backends mujoco --env-threads 1   # physics on one core

Steps are env steps summed over sub-environments (one env step = ``frame_skip`` physics steps).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import gymnasium as gym
import numpy as np
import torch

import envs


def measure_backend(
    backend: str, env_id: str, num_envs: int, device: str, seconds: float, min_steps: int, threads: int = 0
) -> float:
    """Env steps/s of ``backend`` with uniform random actions (creation and first steps excluded).
    ``threads`` sizes the thread pool of the backends that have one (0: one per CPU)."""
    threaded = envs.BACKENDS[backend].takes_threads
    env = envs.make(env_id, num_envs=num_envs, backend=backend, device=device, seed=0, num_threads=threads if threaded else 0)
    try:
        env.reset()
        low, high = env.action_low, env.action_high
        generator = torch.Generator(device=env.device).manual_seed(0)

        def actions():
            u = torch.rand((num_envs, *low.shape), generator=generator, device=env.device)
            return low + (high - low) * u

        for _ in range(2):  # warm-up: kernel loads, graph capture, allocator
            env.step(actions())
        synchronize(env.device)
        steps, start = 0, time.perf_counter()
        while steps < min_steps or time.perf_counter() - start < seconds:
            env.step(actions())
            steps += 1
        synchronize(env.device)
        return steps * num_envs / (time.perf_counter() - start)
    finally:
        env.close()


def measure_mujoco_batch(env_id: str, num_envs: int, seconds: float, min_steps: int, threads: int = 0) -> float:
    """Env steps/s of raw physics: mujoco.batch.Batch on ``threads`` threads (0: all cores), Gymnasium's
    model and frame skip."""
    from mujoco.batch import Batch

    gym_env = gym.make(env_id).unwrapped
    model, frame_skip = gym_env.model, gym_env.frame_skip
    healthy_z = getattr(gym_env, "_healthy_z_range", None)
    batch = Batch(model, num_envs, nthread=threads)
    batch.reset()
    ctrl, qpos = batch.bind("ctrl"), batch.bind("qpos")
    low, high = model.actuator_ctrlrange[:, 0], model.actuator_ctrlrange[:, 1]
    rng = np.random.default_rng(0)
    steps, start = 0, time.perf_counter()
    while steps < min_steps or time.perf_counter() - start < seconds:
        ctrl[:] = rng.uniform(low, high, size=(num_envs, model.nu))
        batch.step(nstep=frame_skip)
        if healthy_z is not None:  # keep the worlds upright as the envs' resets do
            fallen = np.flatnonzero((qpos[:, 2] < healthy_z[0]) | (qpos[:, 2] > healthy_z[1]))
            if len(fallen):
                batch.reset(ids=fallen)
        steps += 1
    gym_env.close()
    return steps * num_envs / (time.perf_counter() - start)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="Humanoid", help="env id or short name")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--backends", nargs="+", default=None, help="default: every installed backend that supports the env")
    parser.add_argument("--device", default="cpu", help="torch device of the env tensors (warp runs there too)")
    parser.add_argument("--seconds", type=float, default=3.0, help="measuring time per configuration")
    parser.add_argument("--min-steps", type=int, default=3, help="at least this many vector steps per configuration")
    parser.add_argument(
        "--env-threads",
        type=int,
        default=0,
        help="threads of the backends with a thread pool and of the ceiling (0: all cores)",
    )
    parser.add_argument("--no-ceiling", action="store_true", help="skip the mujoco.batch ceiling")
    parser.add_argument("--markdown", default="", help="also write the table, as Markdown, to this file")
    args = parser.parse_args()

    env_id = envs.resolve_env_id(args.env)
    device = torch.device(args.device)
    backends = args.backends or [name for name, b in envs.BACKENDS.items() if b.installed() and b.supports(env_id, device)]
    rows = []
    for n in args.num_envs:
        row = {"num_envs": n}
        if not args.no_ceiling:
            row["mujoco.batch"] = measure_mujoco_batch(env_id, n, args.seconds, args.min_steps, args.env_threads)
        for backend in backends:
            row[backend] = measure_backend(backend, env_id, n, args.device, args.seconds, args.min_steps, args.env_threads)
        rows.append(row)
        print(format_row(row, backends, args.no_ceiling), flush=True)

    table = markdown_table(rows, backends, env_id, args)
    print()
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)


def format_row(row: dict, backends: list[str], no_ceiling: bool) -> str:
    parts = [f"num_envs={row['num_envs']:>6}"]
    ceiling = row.get("mujoco.batch")
    if ceiling:
        parts.append(f"mujoco.batch {ceiling:>10,.0f}/s")
    for b in backends:
        ratio = f" ({row[b] / ceiling:.2f}x)" if ceiling else ""
        parts.append(f"{b} {row[b]:>10,.0f}/s{ratio}")
    return "  ".join(parts)


def markdown_table(rows: list[dict], backends: list[str], env_id: str, args) -> str:
    columns = ([] if args.no_ceiling else ["mujoco.batch"]) + backends
    header = "| num_envs | " + " | ".join(f"{c} steps/s" for c in columns)
    if not args.no_ceiling:
        header += " | " + " | ".join(f"{b} / ceiling" for b in backends)
    ncols = 1 + len(columns) + (0 if args.no_ceiling else len(backends))
    lines = [header + " |", "|" + "---:|" * ncols]
    for row in rows:
        cells = [f"{row['num_envs']:,}"] + [f"{row[c]:,.0f}" for c in columns]
        if not args.no_ceiling:
            cells += [f"{row[b] / row['mujoco.batch']:.2f}" for b in backends]
        lines.append("| " + " | ".join(cells) + " |")
    machine = f"{platform.machine()}, {os.cpu_count()} CPU cores, torch device {args.device}"
    return (
        f"{env_id}, random actions, env steps/s summed over sub-environments ({machine}; "
        f"{args.seconds:g} s per cell).\n\n" + "\n".join(lines) + "\n"
    )


if __name__ == "__main__":
    main()
