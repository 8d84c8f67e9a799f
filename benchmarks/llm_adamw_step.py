"""One AdamW step of SmolLM2-135M trained in full: torch's fused AdamW (what ``build_policy`` makes)
against its single-tensor AdamW, in alternating rounds, one thread, the moments parked in a file
between steps as the agents park them (``--park-training-state``): the seconds of the step (the
moments' read and write included) and the step's peak RSS above the RSS before it.

    python benchmarks/llm_adamw_step.py --rounds 3

Random gradients; the first step of each (which creates the moments) is not counted. The peak is
the process's high-water mark over the step (reset through ``/proc/self/clear_refs`` before it);
only one of the two models has gradients and moments at a time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch
from timing import high_water_mb, reset_high_water  # benchmarks/timing.py, beside this script

from cleanrl_style.llm.train import build_policy


def current_mb() -> float:
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith("VmRSS")).split()[1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="", help="model folder (default: offline SmolLM2-135M-Instruct)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    folders = {name: tempfile.TemporaryDirectory(prefix=f"adamw-{name}-") for name in ("fused", "single-tensor")}
    setups = {
        name: build_policy(args.model, "cpu", 1e-5, with_reference=False, park_dir=folder.name)
        for name, folder in folders.items()
    }
    single = setups["single-tensor"].optimizer
    for group in single.param_groups:  # the same optimizer with the single-tensor implementation
        group["fused"], group["foreach"] = None, False
    generator = torch.Generator().manual_seed(0)
    seconds: dict[str, list[float]] = {name: [] for name in setups}
    rises: dict[str, list[float]] = {name: [] for name in setups}
    print(f"{time.strftime('%Y-%m-%d')}, torch {torch.__version__}, one thread, load average {os.getloadavg()[0]:.1f}")
    for r in range(args.rounds + 1):  # round 0 creates the moments and their files: not counted
        for name in list(setups) if r % 2 == 0 else list(setups)[::-1]:
            setup = setups[name]
            for p in setup.policy.parameters():
                if p.requires_grad:
                    p.grad = torch.randn(p.shape, generator=generator) * 1e-3
            before = current_mb()
            reset_high_water()
            started = time.perf_counter()
            setup.optimizer.step()
            elapsed, rise = time.perf_counter() - started, high_water_mb() - before
            setup.optimizer.zero_grad(set_to_none=True)
            if r:
                seconds[name].append(elapsed)
                rises[name].append(rise)
                print(f"round {r}: {name:>13}: step {elapsed:.2f} s, peak {rise:.0f} MB above the {before:.0f} MB before it")
    for name in setups:
        print(
            f"{name}: median of {args.rounds}: {statistics.median(seconds[name]):.2f} s a step, "
            f"peak {statistics.median(rises[name]):.0f} MB above the RSS before it"
        )


if __name__ == "__main__":
    main()
