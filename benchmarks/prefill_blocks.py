"""A turn where every episode reads a long tool output: the time and peak memory of its prefill fed
in forwards of at most ``PREFILL_TOKENS`` tokens (``TurnGenerator``'s default, blocks of columns
across the rows) against one forward of every row's whole chunk, in the same process, alternating
rounds.

    python benchmarks/prefill_blocks.py --rows 32 --prompt-tokens 900 --new-tokens 500

SmolLM2-135M-Instruct, fp32, one torch thread. Each round builds a fresh generator: a first message
of 8 greedy tokens for every row from a prompt of ``--prompt-tokens`` (300 shared by every row, the
rest its own), then the second turn, whose prefill appends ``--new-tokens`` tokens to every row,
and 8 more greedy tokens (the timed part). Peak RSS is the process's high-water mark over the timed
part (reset through ``/proc/self/clear_refs`` before it), with glibc returning large freed blocks
to the system as in the agents (``return_freed_memory_to_the_system``). The rows whose greedy tokens are equal
both ways are counted: the two feed the same tokens at the same positions under the same mask, so
they differ only by float32 rounding (a test checks their log-probabilities on a random tiny Llama).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from timing import timed_second_turn  # benchmarks/timing.py, beside this script

from cleanrl_style.llm import generation
from cleanrl_style.llm.generation import Sampling, TurnGenerator
from cleanrl_style.llm.model import load_causal_lm
from cleanrl_style.llm.train import return_freed_memory_to_the_system


def one_round(model, tokenizer, args, blocks: int) -> tuple[float, float, list[list[int]]]:
    generation.PREFILL_TOKENS = blocks
    generator = TurnGenerator(model, [tokenizer.eos_token_id], tokenizer.eos_token_id, Sampling(max_new_tokens=8, greedy=True))
    draw = torch.Generator().manual_seed(0)
    shared = torch.randint(100, 40000, (300,), generator=draw).tolist()
    own = max(args.prompt_tokens - 300, 1)
    tokens = [shared + torch.randint(100, 40000, (own,), generator=draw).tolist() for _ in range(args.rows)]
    return timed_second_turn(generator, tokens, [args.new_tokens] * args.rows, draw)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=900)
    parser.add_argument("--new-tokens", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    return_freed_memory_to_the_system()  # as the agents run: a freed round's tensors leave the high-water mark
    model, tokenizer = load_causal_lm()
    model.eval()
    default = generation.PREFILL_TOKENS
    print(f"{time.strftime('%Y-%m-%d')}, torch {torch.__version__}, one thread, load average {os.getloadavg()[0]:.1f}, {args}")
    names = {default: f"blocks of {default} tokens", 10**9: "one forward"}
    seconds: dict[int, list[float]] = {b: [] for b in names}
    peaks: dict[int, list[float]] = {b: [] for b in names}
    outputs: dict[int, list[list[int]]] = {}
    for r in range(args.rounds):
        for blocks in list(names) if r % 2 == 0 else list(names)[::-1]:
            took, peak, outputs[blocks] = one_round(model, tokenizer, args, blocks)
            seconds[blocks].append(took)
            peaks[blocks].append(peak)
            print(f"  round {r}: {names[blocks]:>22}: {took:6.1f} s, peak RSS {peak:6.0f} MB", flush=True)
    blocked, whole = min(seconds[default]), min(seconds[10**9])
    print(
        f"second turn, best of {args.rounds}: one forward {whole:.1f} s, blocks {blocked:.1f} s, ratio {whole / blocked:.2f}x"
    )
    print(f"peak RSS: one forward {max(peaks[10**9]):.0f} MB, blocks {max(peaks[default]):.0f} MB")
    same = sum(a == b for a, b in zip(outputs[default], outputs[10**9]))
    print(f"rows with the same greedy tokens both ways: {same} of {args.rows}")


if __name__ == "__main__":
    main()
