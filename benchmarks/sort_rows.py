"""Sorting rows, forward and backward: ``cleanrl_style.blocks.sorting.sort_rows`` against ``torch.sort``.

    python benchmarks/sort_rows.py                        # Symphony's 384 x 384 critic nodes
    python benchmarks/sort_rows.py --rows 256 --cols 1024

Both sort the same ``(rows, cols)`` float32 tensor along its last dimension and back-propagate a
weighted sum of the sorted values (what Symphony's sorted-node target does), in one process,
alternating rounds; the median round counts. Prints milliseconds per call and the ratio.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import tyro

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from timing import alternating_rounds  # noqa: E402  (benchmarks/timing.py, beside this script)

from cleanrl_style.blocks.sorting import sort_rows  # noqa: E402
from cleanrl_style.runs.provenance import cpu_model  # noqa: E402


@dataclass
class BenchArgs:
    rows: int = 384
    """rows sorted independently (Symphony: the batch)"""
    cols: int = 384
    """values per row (Symphony: critic nets x nodes)"""
    rounds: int = 7
    """alternating rounds; the median is reported"""
    seconds_per_round: float = 1.0
    """time each contender gets per round"""
    threads: int = 1
    """torch threads"""


def main(args: BenchArgs) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x = torch.randn(args.rows, args.cols, requires_grad=True)
    weights = torch.rand(args.cols)

    def step(sort) -> None:
        (sort(x) * weights).sum().backward()
        x.grad = None

    contenders = {"torch.sort": lambda t: t.sort(dim=-1).values, "sort_rows": sort_rows}
    for sort in contenders.values():
        step(sort)
    times = alternating_rounds(
        {name: lambda sort=sort: step(sort) for name, sort in contenders.items()}, args.rounds, args.seconds_per_round
    )
    print(
        f"({args.rows}, {args.cols}) float32, forward + backward, {cpu_model()}, torch {torch.__version__}, "
        f"numpy {np.__version__}, {args.threads} thread(s), median of {args.rounds} alternating rounds"
    )
    for name, t in times.items():
        print(f"  {name:<11} {statistics.median(t) * 1e3:8.3f} ms")
    ratios = [a / b for a, b in zip(times["torch.sort"], times["sort_rows"])]
    print(f"  sort_rows is {statistics.median(ratios):.2f}x as fast as torch.sort (median of per-round ratios)")


if __name__ == "__main__":
    main(tyro.cli(BenchArgs))
