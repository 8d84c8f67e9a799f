"""What parking a full fine-tune's training state costs (``--park-training-state``,
``cleanrl_style/llm/parking.py``): the seconds of one AdamW step of SmolLM2-135M with its moments
resident against parked (read back from their file before the step, written and dropped after),
in alternating rounds, one thread, random gradients, and the current RSS after the step.

    python benchmarks/llm_parking_cost.py --rounds 3

The parked file goes to ``--dir`` (default: a temporary folder; a run parks in its run folder).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cleanrl_style.llm.train import build_policy  # noqa: E402


def current_rss_gib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 2**20
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="", help="model folder (default: offline SmolLM2-135M-Instruct)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default="", help="folder for the parked file (default: a temporary one)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    folder = tempfile.TemporaryDirectory(prefix="parked-", dir=args.dir or None)
    setups = {
        "resident": build_policy(args.model, "cpu", 1e-5, with_reference=False),
        "parked": build_policy(args.model, "cpu", 1e-5, with_reference=False, park_dir=folder.name),
    }
    generator = torch.Generator().manual_seed(0)
    seconds: dict[str, list[float]] = {name: [] for name in setups}
    for r in range(args.rounds + 1):  # round 0 creates the moments (and, parked, the file): not counted
        for name, setup in setups.items():
            params = [p for p in setup.policy.parameters() if p.requires_grad]
            for p in params:
                p.grad = torch.randn(p.shape, generator=generator) * 1e-3
            start = time.perf_counter()
            setup.optimizer.step()
            elapsed = time.perf_counter() - start
            setup.optimizer.zero_grad(set_to_none=True)
            if r:
                seconds[name].append(elapsed)
                print(f"round {r}: {name}: step {elapsed:.2f} s, current RSS {current_rss_gib():.2f} GiB (both models)")
    state_bytes = sum(f.stat().st_size for f in Path(folder.name).iterdir())
    resident, parked = statistics.median(seconds["resident"]), statistics.median(seconds["parked"])
    print(
        f"AdamW step of {sum(p.numel() for p in setups['parked'].policy.parameters()) / 1e6:.2f}M parameters, median of "
        f"{args.rounds}: resident {resident:.2f} s, parked {parked:.2f} s (+{parked - resident:.2f} s for reading and "
        f"writing {state_bytes / 1e9:.2f} GB in {folder.name})"
    )


if __name__ == "__main__":
    main()
