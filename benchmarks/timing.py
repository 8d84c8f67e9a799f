"""Timing contenders in alternating rounds, the way every benchmark here compares them.

The machine's speed drifts over minutes, so each contender gets a slice of every round in turn
and the benchmarks report medians over rounds (or of per-round ratios).
"""

from __future__ import annotations

import time
from collections.abc import Callable


def alternating_rounds(
    contenders: dict[str, Callable[[], object]],
    rounds: int,
    seconds_per_round: float,
    sync: Callable[[], object] = lambda: None,
    min_calls: int = 3,
) -> dict[str, list[float]]:
    """Seconds per call of each contender in each round: ``{name: [round 1, round 2, ...]}``.

    In every round each contender runs for at least ``seconds_per_round`` and ``min_calls`` calls;
    ``sync`` (``torch.cuda.synchronize`` on a GPU) runs before the clock stops.
    """
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            count, start = 0, time.perf_counter()
            while count < min_calls or time.perf_counter() - start < seconds_per_round:
                fn()
                count += 1
            sync()
            seconds[name].append((time.perf_counter() - start) / count)
    return seconds
