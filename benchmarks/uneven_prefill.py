"""A turn where one episode's tool output is far longer than the others': the time and peak memory
of its prefill, fed with the long tail apart (``TurnGenerator``'s default) against every row padded
to the longest, in the same process, alternating rounds.

    python benchmarks/uneven_prefill.py --rows 32 --long-tokens 1000 --precision bf16

SmolLM2-135M-Instruct, one torch thread. Each round builds a fresh generator: a first message of 8
greedy tokens for every row from a 320-token prompt, then the second turn, whose prefill appends
``--long-tokens`` tokens to row 0 and 30 to every other row, and 8 more greedy tokens (the timed
part). Peak RSS is the process's high-water mark over the timed part (reset through
``/proc/self/clear_refs`` before it). The rows whose greedy tokens are equal both ways are counted:
all of them in fp32, where both ways compute the same log-probabilities (a test checks this on a
random tiny Llama).
"""

from __future__ import annotations

import argparse
import platform

import torch
from timing import timed_second_turn  # benchmarks/timing.py, beside this script

from cleanrl_style.llm.generation import Sampling, TurnGenerator
from cleanrl_style.llm.model import load_causal_lm


def one_round(model, tokenizer, args, split: bool) -> tuple[float, float, list[list[int]]]:
    generator = TurnGenerator(
        model,
        [tokenizer.eos_token_id],
        tokenizer.eos_token_id,
        Sampling(max_new_tokens=8, greedy=True),
        precision=args.precision,
    )
    if not split:
        generator._can_feed_rows = lambda: False  # type: ignore[method-assign]
    draw = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, 40000, (300,), generator=draw).tolist()
    tokens = [prompt + torch.randint(100, 40000, (20,), generator=draw).tolist() for _ in range(args.rows)]
    return timed_second_turn(generator, tokens, [args.long_tokens] + [30] * (args.rows - 1), draw)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--long-tokens", type=int, default=1000)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = load_causal_lm()
    model.eval()
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, one thread, {args}")
    seconds: dict[bool, list[float]] = {True: [], False: []}
    peaks: dict[bool, list[float]] = {True: [], False: []}
    outputs: dict[bool, list[list[int]]] = {}
    for _ in range(args.rounds):
        for split in (False, True):
            took, peak, outputs[split] = one_round(model, tokenizer, args, split)
            seconds[split].append(took)
            peaks[split].append(peak)
            print(f"  {'tail apart' if split else 'padded    '}: {took:7.1f} s, peak RSS {peak:7.0f} MB", flush=True)
    padded, apart = min(seconds[False]), min(seconds[True])
    print(f"second turn, best of {args.rounds}: padded {padded:.1f} s, tail apart {apart:.1f} s, ratio {padded / apart:.1f}x")
    print(f"peak RSS: padded {max(peaks[False]):.0f} MB, tail apart {max(peaks[True]):.0f} MB")
    same = sum(a == b for a, b in zip(outputs[True], outputs[False]))
    print(f"rows whose greedy tokens are equal both ways: {same}/{args.rows}")


if __name__ == "__main__":
    main()
