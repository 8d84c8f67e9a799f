"""Env steps per second of the vector tool-use env driven by the scripted noisy policy.

One step is one assistant message (a batch of tool calls, or the reply ending a turn), the same
unit an LLM produces per generation call, so this figure is what to compare with generation
throughput: the env should never be the bottleneck.

    python benchmarks/text_env_throughput.py --num-envs 64 --seconds 10
"""

from __future__ import annotations

import argparse
import time

from envs.text.policies import NoisyPolicy
from envs.text.vector import make_tool_use_vector_env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=int, default=64, help="environments in the batch")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to measure")
    parser.add_argument("--num-tasks", type=int, default=1000, help="task ids in the train split family")
    parser.add_argument("--variants", nargs="*", default=None, help="restrict to these variants (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    extra = {"variants": args.variants} if args.variants else {}
    start = time.perf_counter()
    vec = make_tool_use_vector_env(args.num_envs, autoreset=True, num_tasks=args.num_tasks, seed=args.seed, **extra)
    tasks = vec.envs[0].tasks
    list(tasks)  # generate every task up front: the measurement is of stepping, not generation
    generation_seconds = time.perf_counter() - start

    policies = [NoisyPolicy(mistake_prob=0.5, seed=args.seed + i) for i in range(args.num_envs)]
    observations, infos = vec.reset(seed=args.seed)
    steps = episodes = 0
    reward_sum = 0.0
    start = time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        actions = [p.act(o, i) for p, o, i in zip(policies, observations, infos)]
        observations, rewards, terminated, truncated, infos = vec.step(actions)
        steps += args.num_envs
        done = terminated | truncated
        episodes += int(done.sum())
        reward_sum += float(rewards[done].sum())
    elapsed = time.perf_counter() - start

    print(f"tasks generated: {len(tasks)} in {generation_seconds:.2f} s")
    print(
        f"num_envs={args.num_envs}  steps={steps}  episodes={episodes}  "
        f"mean episode reward={reward_sum / max(episodes, 1):.3f}"
    )
    print(f"env steps per second: {steps / elapsed:,.0f}  (episodes per second: {episodes / elapsed:,.1f}, one process)")


if __name__ == "__main__":
    main()
