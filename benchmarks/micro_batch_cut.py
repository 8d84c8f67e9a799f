"""One update over a batch where one episode is far longer than the others: micro-batches cut by the
row count alone against ``micro_batches``' cut (no micro-batch padded past twice its real tokens),
in the same process, alternating rounds.

    python benchmarks/micro_batch_cut.py --long-tokens 2048 --short-tokens 600 --precision bf16

SmolLM2-135M-Instruct, one torch thread, activation checkpointing on (the agents' default). Each
timed step is ``gradient_step`` (GRPO's clipped loss shape: a per-token advantage times the
log-probability) over 4 sequences that share a 300-token prompt: one of ``--long-tokens`` tokens
and three of ``--short-tokens``, every token after the prompt trained, micro-batches of at most 4
rows. Cut by rows alone, the four rows are one micro-batch padded to the long one's width; the
default cut runs the long row with one short one and the other two apart. SGD at learning rate 0
leaves the weights as they were, so every round scores the same model. Peak RSS is the process's
high-water mark over the timed part (reset through ``/proc/self/clear_refs`` before it). The
gradient is the same sum either way (``test_gradient_step_is_the_same_whatever_the_micro_batch_cut``).
"""

from __future__ import annotations

import argparse
import math
import platform
import time

import torch
from timing import high_water_mb, reset_high_water  # benchmarks/timing.py, beside this script

from cleanrl_style.llm import tokens
from cleanrl_style.llm.model import load_causal_lm
from cleanrl_style.llm.train import enable_activation_checkpointing


def advantage_loss(logp: torch.Tensor, extras: dict[str, torch.Tensor]):
    return -logp * extras["advantages"], {}


def one_round(model, pad_id: int, args, cut_by_rows_alone: bool) -> tuple[float, float, int]:
    draw = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, 40000, (300,), generator=draw).tolist()
    lengths = [args.long_tokens] + [args.short_tokens] * 3
    sequences = [prompt + torch.randint(100, 40000, (n - 300,), generator=draw).tolist() for n in lengths]
    masks = [[False] * 300 + [True] * (n - 300) for n in lengths]
    advantages = [torch.full((n,), a) for n, a in zip(lengths, (1.0, -1.0, 0.5, -0.5))]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    saved = tokens.MAX_PADDING_RATIO
    tokens.MAX_PADDING_RATIO = math.inf if cut_by_rows_alone else saved
    cuts = len(tokens.micro_batches(tokens.prefix_order(sequences), lengths, 4))
    try:
        reset_high_water()
        started = time.perf_counter()
        tokens.gradient_step(
            model, optimizer, sequences, masks, pad_id, advantage_loss,
            per_token={"advantages": advantages}, micro_batch_size=4, precision=args.precision,
        )  # fmt: skip
        return time.perf_counter() - started, high_water_mb(), cuts
    finally:
        tokens.MAX_PADDING_RATIO = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--long-tokens", type=int, default=2048)
    parser.add_argument("--short-tokens", type=int, default=600)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if not 300 < args.short_tokens <= args.long_tokens:
        parser.error("need 300 < --short-tokens <= --long-tokens (the shared prompt is 300 tokens)")
    torch.set_num_threads(1)
    model, tokenizer = load_causal_lm()
    enable_activation_checkpointing(model)
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, one thread, {args}")
    seconds: dict[bool, list[float]] = {True: [], False: []}
    peaks: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.rounds):
        for by_rows in (True, False):
            took, peak, cuts = one_round(model, tokenizer.pad_token_id, args, by_rows)
            seconds[by_rows].append(took)
            peaks[by_rows].append(peak)
            name = "rows alone" if by_rows else "padding cut"
            print(f"  {name}: {cuts} micro-batch(es), {took:7.1f} s, peak RSS {peak:7.0f} MB", flush=True)
    rows, cut = min(seconds[True]), min(seconds[False])
    print(f"update, best of {args.rounds}: rows alone {rows:.1f} s, padding cut {cut:.1f} s, ratio {rows / cut:.2f}x")
    print(f"peak RSS: rows alone {max(peaks[True]):.0f} MB, padding cut {max(peaks[False]):.0f} MB")


if __name__ == "__main__":
    main()
