"""Seconds per gradient update of the three off-policy agents at their defaults, side by side.

    python benchmarks/offpolicy_update_cost.py                  # Hopper shapes, CPU, 1 thread
    python benchmarks/offpolicy_update_cost.py --device cuda

``sac_nap`` (256x256, NaP off: the networks of SB3's SAC), ``sac_simba`` and ``symphony`` with
their default Args, each learner fed batches from the same random transitions; rounds alternate
so that load hits all alike, and the median round counts. Prints seconds per update, updates per
environment step, and the hours 100k environment steps of updates would take at that rate.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import tyro

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cleanrl_style.evaluate import import_agent  # noqa: E402
from cleanrl_style.replay import ReplayBuffer  # noqa: E402


@dataclass
class BenchArgs:
    obs_dim: int = 11
    """observation size (Hopper: 11)"""
    act_dim: int = 3
    """action size (Hopper: 3)"""
    rounds: int = 3
    """alternating rounds; the median is reported"""
    seconds_per_round: float = 3.0
    """time each agent gets per round (at least one update)"""
    device: str = "cpu"
    threads: int = 1
    """torch threads (0: torch's default)"""


def learners(args: BenchArgs):
    low, high = -torch.ones(args.act_dim), torch.ones(args.act_dim)
    n = 5_000
    data = (
        torch.randn(n, args.obs_dim),
        torch.rand(n, args.act_dim) * 2 - 1,
        torch.randn(n),
        torch.randn(n, args.obs_dim),
        torch.rand(n) < 0.01,
        torch.zeros(n, dtype=torch.bool),
    )
    models = {
        "sac_nap (256x256, NaP off)": ("sac_nap", "SoftActorCritic", dict(nap=False, layer_norm=False, anneal_lr=False)),
        "sac_simba (defaults)": ("sac_simba", "SimbaSAC", {}),
        "symphony (defaults)": ("symphony", "Symphony", {}),
    }
    out = {}
    for name, (file, model_class, overrides) in models.items():
        module = import_agent(str(REPO / "agents" / f"{file}.py"))
        agent_args = module.Args(device=args.device, **overrides)
        agent = getattr(module, model_class)(args.obs_dim, args.act_dim, low, high, agent_args).to(args.device)
        learner = module.Learner(agent, agent_args)
        rb = ReplayBuffer(2 * n, (args.obs_dim,), (args.act_dim,), device=args.device)
        rb.add(*(x.to(args.device) for x in data))
        out[name] = (
            lambda learner=learner, rb=rb, bs=agent_args.batch_size: learner.update(rb.sample(bs)),
            agent_args.updates_per_step,
        )
    return out


def main(args: BenchArgs) -> None:
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    fns = learners(args)
    seconds: dict[str, list[float]] = {name: [] for name in fns}
    for update, _ in fns.values():
        update()  # warm-up
    for _ in range(args.rounds):
        for name, (update, _) in fns.items():
            count, start = 0, time.perf_counter()
            while count == 0 or time.perf_counter() - start < args.seconds_per_round:
                update()
                count += 1
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            seconds[name].append((time.perf_counter() - start) / count)
    print(f"obs {args.obs_dim}, act {args.act_dim}, device {args.device}, torch threads {torch.get_num_threads()}")
    for name, (_, per_step) in fns.items():
        s = statistics.median(seconds[name])
        print(
            f"  {name:28s} {s:8.3f} s/update   {per_step:g} updates/env step   "
            f"100k env steps of updates: {s * per_step * 100_000 / 3600:6.1f} h"
        )


if __name__ == "__main__":
    main(tyro.cli(BenchArgs))
