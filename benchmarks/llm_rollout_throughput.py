"""Rollout throughput with each episode's key/value cache kept across turns, against re-reading every
conversation at each turn; 4-turn episodes in GRPO groups.

    python benchmarks/llm_rollout_throughput.py                       # SmolLM2-135M-Instruct, CPU, 2 threads
    python benchmarks/llm_rollout_throughput.py --device cuda --groups 8 --group-size 8 --max-new-tokens 128

Both contenders run ``cleanrl_style.llm.rollout.collect_rollouts`` on the same tasks with the same
seed and sampling settings; the only difference is ``RolloutSettings.keep_cache``:

- ``cached``: each turn prefills only the tokens that are new since the last one (the sampled
  message's last token, the template's closing, the tool results, the next user turn);
- ``re-read``: each turn starts a fresh cache and prefills every conversation again (the first
  chunk that all rows share, the system prompt and tool schemas, still only once).

The tasks are ``tools:bank`` tasks with at least four user turns, and episodes are cut after four
assistant messages, so every episode has exactly four turns whatever the model writes. Measured:
generated tokens per second of generation time (prefill included), in alternating rounds so that
load on a shared machine hits both alike; the median over rounds and the ratio are printed, with
the tokens each side prefilled and the conditions (CPU, threads, load, versions).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

from cleanrl_style.llm.generation import Sampling
from cleanrl_style.llm.model import load_causal_lm
from cleanrl_style.llm.rollout import EpisodeLimits, RolloutSettings, collect_rollouts
from envs.text.families import make_task_family


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="", help="model folder (default: offline SmolLM2-135M-Instruct)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--groups", type=int, default=2, help="tasks per batch")
    parser.add_argument("--group-size", type=int, default=4, help="rollouts per task")
    parser.add_argument("--turns", type=int, default=4, help="assistant messages per episode")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_causal_lm(args.model or None, device=args.device)
    family = make_task_family("tools:bank", num_tasks=400, variants=("base",))
    env = family.make_env()
    long_enough = [t for t in family.train_ids if len(env.tasks.get(t).turns) >= args.turns]
    ids = [t for t in long_enough[: args.groups] for _ in range(args.group_size)]
    sampling = Sampling(max_new_tokens=args.max_new_tokens, temperature=1.0)
    limits = EpisodeLimits(max_assistant_messages=args.turns, max_context_tokens=100_000)
    contenders = {"cached": True, "re-read": False}
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    for r in range(args.rounds):
        order = list(contenders) if r % 2 == 0 else list(contenders)[::-1]
        for name in order:
            settings = RolloutSettings(sampling, limits, keep_cache=contenders[name], precision=args.precision)
            rollouts, timing = collect_rollouts(model, tokenizer, family, ids, settings, seed=r)
            turns = sorted({len(x.turns) for x in rollouts})
            rates[name].append(timing["tokens_per_second"])
            print(
                f"round {r}: {name:>8}: {timing['generated_tokens']:.0f} tokens in {timing['generation_seconds']:.1f} s "
                f"= {timing['tokens_per_second']:.1f} tokens/s; prefilled {timing['prefilled_tokens']:.0f} tokens; "
                f"turns per episode {turns}",
                flush=True,
            )
    cached, reread = statistics.median(rates["cached"]), statistics.median(rates["re-read"])
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    import transformers

    print(
        f"\n{len(ids)} episodes ({args.groups} groups x {args.group_size}), {args.turns} assistant messages of <= "
        f"{args.max_new_tokens} tokens each, sampling at temperature 1, {args.precision}, device {args.device}"
    )
    print(
        f"conditions: {time.strftime('%Y-%m-%d')}, {cpu_model()}, {os.cpu_count()} cores, {args.threads} torch threads, "
        f"1-minute load average {load_before:.1f} before and {load_after:.1f} after; torch {torch.__version__}, "
        f"transformers {transformers.__version__}"
    )
    print(
        f"median over {args.rounds} rounds: cached {cached:.1f} tokens/s, re-read {reread:.1f} tokens/s, "
        f"ratio {cached / reread:.2f}x"
    )


if __name__ == "__main__":
    main()
