"""TurnSight's gate: do its turn scores tell good turns from bad ones, before any RL?

    python benchmarks/turnsight_auroc.py --model runs/recipes/llm_cpu_turnsight/python-math__sft__s1/model --test-kinds 5 6
    python benchmarks/turnsight_auroc.py --model <sft model> --rollouts 64 --out results/turnsight_gate/turns.csv

Samples ``--rollouts`` episodes (groups of ``--group-size`` on random training tasks, at
``--temperature`` as TurnSight's training rollouts; 1 by default) from ``--model``, scores every
turn as ``agents/turnsight.py`` does (steps 1-4: hindsight blocks of each horizon, the teacher's
gap, the cross-horizon agreement; its flags' defaults, ``--teacher policy``), and labels each turn
by what the environment returned:

- a turn with a tool call is **good** when every call ran and printed (no error message, exit
  code, kill, refusal or empty output), **bad** otherwise;
- the turn without a call (the answer that ends the episode) is **good** when the episode's
  reward is 1, **bad** otherwise.

TurnSight raises the weight of turns with a high score in a successful episode and lowers the
penalty of such turns in a failed one, so a useful score ranks good turns above bad ones. Printed:
the AUROC of the chosen score over all turns (the probability that a random good turn outscores a
random bad one, ties half), of the score normalized within each group (the ``z`` TurnSight uses; and
``z_last_apart``, with the episodes' last turns and their earlier turns normalized apart, as
``--normalize-last-apart`` does),
and over pairs within one episode only (the credit that the episode's advantage cannot give),
each with a 95% percentile bootstrap interval over episodes (2,000 resamples). The gate: AUROC
above 0.6. ``--out`` writes one row per turn.

Beside the score, two readings that need no hindsight: the AUROC of the policy's own mean
log-probability of the turn's tokens (``logprob``: a turn the policy finds likely ranked as good),
and the rank correlation of the score with that log-probability. With the turn's own message in its
hindsight block, the teacher can copy the tokens it scores, so the gap tends to ``-logprob``;
``--hindsight-start output`` (several values: each scored on the same rollouts, the first in the
``score``, ``z`` and ``z_last_apart`` columns, the others under ``<start>_`` names) leaves the message
out, and ``--hindsight-outcome`` ends every block with the episode's outcome.
"""

from __future__ import annotations

import argparse
import csv
import random
from pathlib import Path
from typing import Any

import torch

ERROR_MARKS = ("[exit code", "[killed:", "[not run", "[no output]", '"error"')


def turn_label(rollout: Any, k: int) -> bool:
    """True for a good turn (see the module docstring)."""
    from envs.text.parsing import has_tool_call

    turn = rollout.turns[k]
    if has_tool_call(turn.content):
        return bool(turn.tool_outputs) and not any(mark in out for out in turn.tool_outputs for mark in ERROR_MARKS)
    return rollout.reward >= 1.0


def auroc(good: list[float], bad: list[float]) -> float:
    """P(a good score > a bad score) + P(tie) / 2; NaN without both kinds."""
    if not good or not bad:
        return float("nan")
    wins = sum((g > b) + 0.5 * (g == b) for g in good for b in bad)
    return wins / (len(good) * len(bad))


def within_episode_auroc(rows: list[dict[str, Any]]) -> float:
    """AUROC over the (good, bad) pairs of turns of one episode, pooled over episodes."""
    wins, pairs = 0.0, 0
    by_episode: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_episode.setdefault(row["episode"], []).append(row)
    for turns in by_episode.values():
        good = [r["score"] for r in turns if r["good"]]
        bad = [r["score"] for r in turns if not r["good"]]
        wins += sum((g > b) + 0.5 * (g == b) for g in good for b in bad)
        pairs += len(good) * len(bad)
    return wins / pairs if pairs else float("nan")


def rank_correlation(x: list[float], y: list[float]) -> float:
    """Spearman's rho: Pearson's correlation of the ranks (ties share their mean rank)."""

    def ranks(values: list[float]) -> torch.Tensor:
        v = torch.tensor(values, dtype=torch.float64)
        less = (v.unsqueeze(0) < v.unsqueeze(1)).sum(1).double()
        equal = (v.unsqueeze(0) == v.unsqueeze(1)).sum(1).double()
        return less + (equal + 1) / 2

    rx, ry = ranks(x), ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    return float((rx * ry).sum() / (rx.norm() * ry.norm()))


def bootstrap(rows: list[dict[str, Any]], statistic: Any, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of ``statistic(rows)`` over episodes drawn with replacement."""
    rng = random.Random(seed)
    episodes = sorted({r["episode"] for r in rows})
    by_episode = {e: [r for r in rows if r["episode"] == e] for e in episodes}
    values = []
    for _ in range(resamples):
        drawn: list[dict[str, Any]] = []
        for n, e in enumerate(rng.choices(episodes, k=len(episodes))):
            drawn += [r | {"episode": n} for r in by_episode[e]]
        value = statistic(drawn)
        if value == value:  # not NaN
            values.append(value)
    values.sort()
    return values[int(0.025 * len(values))], values[min(int(0.975 * len(values)), len(values) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="", help="model folder (empty: SmolLM2-135M-Instruct)")
    parser.add_argument("--env", default="python-math")
    parser.add_argument("--test-kinds", type=int, nargs="*", default=[], help="python-math kinds held out (as the SFT run)")
    parser.add_argument("--kinds", type=int, nargs="*", default=[], help="python-math kinds kept (as the RL run; empty: all)")
    parser.add_argument("--rollouts", type=int, default=64)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--max-assistant-messages", type=int, default=4)
    parser.add_argument("--max-steps-per-turn", type=int, default=3)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (the teacher scores at it too)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--hindsight-start",
        nargs="+",
        choices=["turn", "output"],
        default=["turn"],
        help="where each turn's hindsight block begins (agents/turnsight.py); several: each scored",
    )
    parser.add_argument(
        "--hindsight-outcome",
        action="store_true",
        help="end each hindsight block with the episode's outcome (agents/turnsight.py)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="", help="CSV of one row per turn")
    args = parser.parse_args()
    if args.rollouts % args.group_size:
        parser.error(f"--rollouts {args.rollouts} is not a multiple of --group-size {args.group_size}")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    from llm_rollout_throughput import load_agent  # benchmarks/ is on the path of a script run from it

    from cleanrl_style.llm.rollout import collect_groups
    from cleanrl_style.llm.train import build_policy, sample_groups

    turnsight = load_agent("turnsight")
    ts_args = turnsight.Args(
        env=args.env,
        model=args.model,
        test_kinds=tuple(args.test_kinds),
        kinds=tuple(args.kinds),
        max_new_tokens=args.max_new_tokens,
        max_assistant_messages=args.max_assistant_messages,
        max_steps_per_turn=args.max_steps_per_turn,
        precision=args.precision,
        group_size=args.group_size,
        temperature=args.temperature,
        hindsight_outcome=args.hindsight_outcome,
    )
    setup = build_policy(args.model, "cpu", 0.0, with_reference=False)
    policy, tokenizer = setup.policy, setup.tokenizer
    family = ts_args.task_family()
    tasks = sample_groups(family.train_ids, args.rollouts // args.group_size, args.seed, 1)
    rollouts, timing, rewards = collect_groups(
        policy, tokenizer, family, tasks, args.group_size, ts_args.rollout_settings(), seed=args.seed
    )
    student = turnsight.student_logprobs(policy, tokenizer, rollouts, ts_args)  # at the sampling temperature
    rows: list[dict[str, Any]] = []
    columns = {
        start: ("score", "z", "z_last_apart") if n == 0 else (f"{start}_score", f"{start}_z", f"{start}_z_last_apart")
        for n, start in enumerate(args.hindsight_start)
    }
    for n, start in enumerate(args.hindsight_start):
        ts_args.hindsight_start = start
        scores = turnsight.turn_scores(policy, None, tokenizer, rollouts, student, ts_args)
        score_key, z_key, apart_key = columns[start]
        row = 0
        for g in range(len(tasks)):
            members = range(g * args.group_size, (g + 1) * args.group_size)
            chosen = {i: turnsight.select_horizon(scores[i])[0] for i in members if len(rollouts[i].turns)}
            if not chosen:
                continue
            z = turnsight.normalize_group(list(chosen.values()), ts_args.norm_eps, last_apart=False)
            z_apart = turnsight.normalize_group(list(chosen.values()), ts_args.norm_eps, last_apart=True)
            for n_i, (i, s) in enumerate(chosen.items()):
                for k in range(len(s)):
                    if n == 0:
                        turn = rollouts[i].turns[k]
                        own = student[i][turn.start : turn.end]
                        rows.append(
                            {
                                "episode": i,
                                "group": g,
                                "turn": k,
                                "turns": len(rollouts[i].turns),
                                "reward": rollouts[i].reward,
                                "good": turn_label(rollouts[i], k),
                                "logprob": float(own.mean()) if len(own) else 0.0,
                            }
                        )
                    rows[row][score_key] = float(s[k])
                    rows[row][z_key] = float(z[n_i][k])
                    rows[row][apart_key] = float(z_apart[n_i][k])
                    row += 1

    good = sum(r["good"] for r in rows)
    print(
        f"{len(rollouts)} episodes, success {float(rewards.mean()):.3f}, {len(rows)} turns ({good} good, "
        f"{len(rows) - good} bad), {timing['tokens_per_second']:.1f} generated tokens/s"
    )

    def pooled(key: str) -> Any:
        return lambda rs: auroc([r[key] for r in rs if r["good"]], [r[key] for r in rs if not r["good"]])

    def within(key: str) -> Any:
        return lambda rs: within_episode_auroc([{**r, "score": r[key]} for r in rs])

    statistics = [("the policy's own log-prob of the turn, no hindsight", pooled("logprob"))]
    for start, (score_key, z_key, apart_key) in columns.items():
        statistics += [
            (f"score, all turns (block from the {start})", pooled(score_key)),
            (f"z within each group, TurnSight's (block from the {start})", pooled(z_key)),
            (f"z within each group, last turns apart, --normalize-last-apart (block from the {start})", pooled(apart_key)),
            (f"score, pairs within one episode (block from the {start})", within(score_key)),
        ]
    for name, statistic in statistics:
        value = statistic(rows)
        low, high = bootstrap(rows, statistic) if value == value else (float("nan"), float("nan"))
        print(f"AUROC {name}: {value:.3f} [{low:.3f}, {high:.3f}] (95% percentile bootstrap over episodes)")
    for start, (score_key, _, _) in columns.items():
        rho = rank_correlation([r[score_key] for r in rows], [r["logprob"] for r in rows])
        print(f"Spearman correlation of the score (block from the {start}) with the turn's own log-prob: {rho:.3f}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
