"""Rollout throughput of the batched multi-turn collector against generating each rollout on its own.

    python benchmarks/llm_rollout_throughput.py                       # SmolLM2-135M-Instruct, CPU
    python benchmarks/llm_rollout_throughput.py --device cuda --groups 8 --group-size 8

Both sides run ``cleanrl_style.llm_rollout.collect_rollouts`` on the same tasks with the same
sampling settings; the only difference is ``generation_batch_size``: 0 (every unfinished episode
of every group in one ``generate`` call per turn) or 1 (one episode at a time, the way a simple
loop over ``env.reset``/``model.generate`` works). Measured: generated (policy) tokens per second
of generation time, in alternating rounds so that load on a shared machine hits both alike.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from cleanrl_style.llm_model import default_dtype, load_causal_lm
from cleanrl_style.llm_rollout import collect_rollouts
from envs.text import TaskSet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="", help="model folder (default: offline SmolLM2-135M-Instruct)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--groups", type=int, default=2, help="tasks per batch")
    parser.add_argument("--group-size", type=int, default=4, help="rollouts per task")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--max-assistant-messages", type=int, default=2)
    parser.add_argument("--suite", default="bank")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_causal_lm(args.model or None, device=args.device, dtype=default_dtype(args.device))
    tasks = TaskSet(num_tasks=200, seed=0, suite_groups=[(args.suite,)], variants=("base",), split="train")
    ids = [t for t in tasks.task_ids[: args.groups] for _ in range(args.group_size)]
    rates: dict[str, list[float]] = {"batched": [], "one at a time": []}
    for r in range(args.rounds):
        for name, batch in (("batched", 0), ("one at a time", 1)):
            torch.manual_seed(r)
            _, timing = collect_rollouts(
                model,
                tokenizer,
                tasks,
                ids,
                max_new_tokens=args.max_new_tokens,
                max_assistant_messages=args.max_assistant_messages,
                generation_batch_size=batch,
                seed=r,
            )
            rates[name].append(timing["tokens_per_second"])
            print(
                f"round {r}: {name:>13}: {timing['generated_tokens']:.0f} tokens in {timing['generation_seconds']:.1f} s "
                f"= {timing['tokens_per_second']:.1f} tokens/s"
            )
    batched, alone = statistics.median(rates["batched"]), statistics.median(rates["one at a time"])
    print(
        f"\n{len(ids)} rollouts ({args.groups} groups x {args.group_size}), {args.max_assistant_messages} assistant messages "
        f"of <= {args.max_new_tokens} tokens, device {args.device}"
    )
    print(
        f"batched collector: {batched:.1f} tokens/s; one rollout at a time: {alone:.1f} tokens/s; ratio {batched / alone:.2f}x"
    )


if __name__ == "__main__":
    main()
