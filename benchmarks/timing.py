"""Timing contenders in alternating rounds, the way every benchmark here compares them, the
matrix-product ceiling an update is measured against, and the process's peak memory over a timed
part.

The machine's speed drifts over minutes, so each contender gets a slice of every round in turn
and the benchmarks report medians over rounds (or of per-round ratios). The ceiling replays the
matrix products one update runs (same shapes, dtypes and layouts) back to back on fresh tensors:
the time the update would take if everything else cost nothing.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def run_leanrl(checkout: Path | None, python: str, script: str, flags: list[str], threads: int) -> tuple[float, str]:
    """Run ``leanrl/<script>`` of a LeanRL checkout (not vendored here) under ``python`` in a temp folder
    with ``threads`` torch threads and wandb off the network: (whole-process seconds, its stderr,
    where its progress bar prints its speed). Exits naming the problem if the script is missing or fails."""
    if checkout is None or not (checkout / "leanrl" / script).is_file():
        raise SystemExit(f"--leanrl {checkout}: no leanrl/{script} there; point it at a LeanRL checkout")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "WANDB_MODE": "disabled"}
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        done = subprocess.run(
            [python, str(checkout / "leanrl" / script), *flags], cwd=tmp, env=env, capture_output=True, text=True
        )
        seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"LeanRL's {script} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, done.stderr


MATMULS = {"aten.mm.default", "aten.addmm.default", "aten.bmm.default", "aten.baddbmm.default"}


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


class MatmulRecorder(TorchDispatchMode):
    """Records every matrix product's op, argument shapes, strides and dtypes."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func) in MATMULS:
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            self.calls.append((func, [(t.shape, t.stride(), t.dtype) for t in tensors], dict(kwargs or {})))
        return func(*args, **(kwargs or {}))


def record_matmuls(fn: Callable[[], object]) -> list[tuple]:
    """The matrix products one call of ``fn`` runs (op, argument layouts, keyword arguments)."""
    recorder = MatmulRecorder()
    with recorder:
        fn()
    return recorder.calls


def _like(shape, stride, dtype, device) -> torch.Tensor:
    """A random tensor with this exact layout (broadcast dimensions of stride 0 included)."""
    storage = 1 + sum((size - 1) * st for size, st in zip(shape, stride))
    return torch.randn(storage, device=device).to(dtype).as_strided(shape, stride)


def replay_matmuls(calls: list[tuple], device: str):
    """A function running the recorded products back to back on fresh tensors of the same layouts."""
    prepared = []
    for func, layouts, kwargs in calls:
        tensors = [_like(shape, stride, dtype, device) for shape, stride, dtype in layouts]
        prepared.append((func, tensors, kwargs))

    def run() -> None:
        for func, tensors, kwargs in prepared:
            func(*tensors, **kwargs)

    return run


def matmul_peak(dtype: torch.dtype, device: str, size: int = 256, seconds: float = 1.0) -> float:
    """GFLOP/s of a square matrix product of this size and dtype, the hardware's rate for the precision."""
    a, b = torch.randn(size, size, device=device).to(dtype), torch.randn(size, size, device=device).to(dtype)
    count, start = 0, time.perf_counter()
    while count < 3 or time.perf_counter() - start < seconds:
        a @ b
        count += 1
    return 2 * size**3 * count / (time.perf_counter() - start) / 1e9


def reset_high_water() -> None:
    """Start the process's resident-memory high-water mark (``VmHWM``) afresh (Linux)."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")


def high_water_mb() -> float:
    """The process's resident-memory high-water mark in MB (2^20 bytes) since the last reset."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM"))
    return int(line.split()[1]) / 1024


def timed_second_turn(generator, prompts: list[list[int]], new_tokens: list[int], draw: torch.Generator):
    """A first message for every prompt from ``generator`` (a ``TurnGenerator``), then, after each
    row's message and ``new_tokens[row]`` random token ids, the second turn, timed:
    ``(seconds, high-water MB over it, its messages)``."""
    rows = list(range(len(prompts)))
    first = generator.generate(rows, prompts)
    tokens = [p + m + torch.randint(100, 40000, (n,), generator=draw).tolist() for p, m, n in zip(prompts, first, new_tokens)]
    reset_high_water()
    started = time.perf_counter()
    second = generator.generate(rows, tokens)
    return time.perf_counter() - started, high_water_mb(), second
