"""A turn where one episode's tool output is far longer than the others': the key/value cache it
leaves, the peak memory and the time of that turn and the next, with the long tail's keys and
values kept for its row alone (a side block, the packed decoder's default) against written into
every row (the others' columns zero and masked, as the buffer did before side blocks), in the same
process, alternating rounds.

    python benchmarks/side_blocks.py --rows 32 --long-tokens 1000 --decode-tokens 64

SmolLM2-135M-Instruct, fp32 (the packed decoder), one torch thread. Each round builds a fresh
generator: a first message of ``--decode-tokens`` greedy tokens for every row from a 320-token
prompt (300 shared), then the second turn, whose prefill appends ``--long-tokens`` tokens to row 0
and 30 to every other row (both ways feed row 0's tail on its own), then a third turn of 30 new
tokens a row; every message runs ``--decode-tokens`` steps (no token stops it). The second and
third turns are timed; peak RSS is the process's high-water mark over them (reset through
``/proc/self/clear_refs`` before), with glibc returning large freed blocks to the system as in the
agents. The cache's size is its buffers' bytes (spare columns included) after the third turn. The
rows whose greedy tokens are equal both ways are counted: both attend to the same keys under the
same mask, so they differ only by float32 rounding (a test checks the log-probabilities on a
random tiny Llama).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from timing import high_water_mb, reset_high_water  # benchmarks/timing.py, beside this script

from cleanrl_style.llm.decoder import KVBuffer
from cleanrl_style.llm.generation import Sampling, TurnGenerator
from cleanrl_style.llm.model import load_causal_lm
from cleanrl_style.llm.train import return_freed_memory_to_the_system

SIDE_BLOCKS = KVBuffer.append_rows


def append_rows_to_every_row(self: KVBuffer, part: KVBuffer, index: torch.Tensor, width: int) -> None:
    """The peer: the fed rows' new columns written into every row's main block, zeros in the rest."""
    start = self.columns
    self.add_main_columns(width)
    for layer, (keys, values) in enumerate(zip(self.keys, self.values)):
        assert keys is not None and values is not None
        part_keys, part_values = part.layer(layer, part.columns)
        new_keys = keys.new_zeros((keys.shape[0], keys.shape[1], width, keys.shape[3]))
        new_values = values.new_zeros((values.shape[0], values.shape[1], width, values.shape[3]))
        new_keys[index], new_values[index] = part_keys[:, :, -width:], part_values[:, :, -width:]
        self.append(layer, new_keys, new_values, start)


def cache_mb(cache: KVBuffer) -> float:
    tensors = [t for t in cache.keys + cache.values if t is not None]
    tensors += [t for side in cache.sides for t in side.keys + side.values]
    return sum(t.numel() * t.element_size() for t in tensors) / 2**20


def one_round(model, tokenizer, args, apart: bool) -> tuple[float, float, float, list[list[int]]]:
    KVBuffer.append_rows = SIDE_BLOCKS if apart else append_rows_to_every_row  # type: ignore[method-assign]
    generator = TurnGenerator(model, [], tokenizer.eos_token_id, Sampling(max_new_tokens=args.decode_tokens, greedy=True))
    draw = torch.Generator().manual_seed(0)
    shared = torch.randint(100, 40000, (300,), generator=draw).tolist()
    tokens = [shared + torch.randint(100, 40000, (20,), generator=draw).tolist() for _ in range(args.rows)]
    rows = list(range(args.rows))
    first = generator.generate(rows, tokens)
    new = [args.long_tokens] + [30] * (args.rows - 1)
    tokens = [t + m + torch.randint(100, 40000, (n,), generator=draw).tolist() for t, m, n in zip(tokens, first, new)]
    reset_high_water()
    started = time.perf_counter()
    second = generator.generate(rows, tokens)
    tokens = [t + m + torch.randint(100, 40000, (30,), generator=draw).tolist() for t, m in zip(tokens, second)]
    third = generator.generate(rows, tokens)
    took = time.perf_counter() - started
    assert generator.packed is not None  # the packed decoder ran both ways
    return took, high_water_mb(), cache_mb(generator.packed.cache), [a + b for a, b in zip(second, third)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--long-tokens", type=int, default=1000)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    return_freed_memory_to_the_system()
    model, tokenizer = load_causal_lm()
    model.eval()
    print(f"{time.strftime('%Y-%m-%d')}, torch {torch.__version__}, one thread, load average {os.getloadavg()[0]:.1f}, {args}")
    names = {True: "side block", False: "every row widened"}
    seconds: dict[bool, list[float]] = {True: [], False: []}
    peaks: dict[bool, list[float]] = {True: [], False: []}
    caches: dict[bool, float] = {}
    outputs: dict[bool, list[list[int]]] = {}
    for r in range(args.rounds):
        for apart in (True, False) if r % 2 == 0 else (False, True):
            took, peak, caches[apart], outputs[apart] = one_round(model, tokenizer, args, apart)
            seconds[apart].append(took)
            peaks[apart].append(peak)
            print(f"  round {r}: {names[apart]:>17}: {took:6.1f} s, peak RSS {peak:6.0f} MB", end="")
            print(f", cache {caches[apart]:6.0f} MB", flush=True)
    tokens = 2 * args.rows * args.decode_tokens
    apart, widened = min(seconds[True]), min(seconds[False])
    print(
        f"second and third turns, best of {args.rounds}: every row widened {widened:.1f} s ({tokens / widened:.1f} tokens/s), "
        f"side block {apart:.1f} s ({tokens / apart:.1f} tokens/s), ratio {widened / apart:.2f}x"
    )
    print(f"cache after the third turn: every row widened {caches[False]:.0f} MB, side block {caches[True]:.0f} MB")
    print(f"peak RSS over the two turns: every row widened {max(peaks[False]):.0f} MB, side block {max(peaks[True]):.0f} MB")
    same = sum(a == b for a, b in zip(outputs[True], outputs[False]))
    print(f"rows with the same greedy tokens both ways: {same} of {args.rows}")


if __name__ == "__main__":
    main()
