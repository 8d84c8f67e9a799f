"""Do an RCTP model's reward tokens steer what it samples? RC-GRPO's stage 2 samples its groups
at the training temperature, half under ``<|high_reward|>`` and half under ``<|low_reward|>``, so
the gate that matters for it is sampled success under each token, not only greedy success.

    python benchmarks/reward_token_steering.py --run runs/recipes/llm_cpu_rc/tools-bank__rctp_own_failures__s1
    python benchmarks/reward_token_steering.py --run <rc_grpo run> --episodes 128 --greedy --out steering.csv

Loads the run's exported model (``<run>/model``) and its flags (``<run>/args.json``: the task
family, the message and episode limits, the precision, the temperature), then plays the first
``--episodes`` held-out tasks under each token. Both tokens start from the same random seed, so
the two sets of episodes share their random draws and differ only where the token changes a
token's probability: a paired comparison. Printed: success, turns and tool errors per episode under
each token, the paired success difference with a 95% percentile bootstrap interval over tasks
(2,000 resamples), and the tasks solved under one token only. ``--out`` keeps one row per episode
(``step`` 0 for high, 1 for low). For the tool suites the same figures follow for each task variant
(base, missing function, missing parameter, ...).

    python benchmarks/reward_token_steering.py --run results/llm_cpu_rc/tools-bank__rctp_turn_token__s1 \
        --record results/llm_cpu_rc/tools-bank__rctp_turn_token__s1/held_out.csv

``--record`` reads episodes already played instead (a run's ``held_out.csv``, its greedy
evaluation, or an earlier ``--out``): under each token, those of its last step, or of ``--step``.
It needs only the run's ``args.json``, not its model.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import random
import tempfile
from pathlib import Path

import torch


def paired_difference(high: dict[int, float], low: dict[int, float], seed: int = 0) -> tuple[float, float, float]:
    """Mean of high - low over the tasks both hold, and its 95% percentile bootstrap interval."""
    diffs = [high[t] - low[t] for t in sorted(high) if t in low]
    if not diffs:
        raise ValueError("no task was played under both tokens")
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(diffs, k=len(diffs))) / len(diffs) for _ in range(2000))
    return sum(diffs) / len(diffs), means[49], means[1949]


def read_outcomes(path: Path, tokens: tuple[str, str], step: int | None = None) -> tuple[dict[int, float], dict[int, float]]:
    """Each task's reward under the high and the low token (``tokens``, in that order), from a CSV of
    ``HELD_OUT_COLUMNS``: for each token, the rows of ``step`` (default: the last step at which it
    was played)."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    outcomes: list[dict[int, float]] = []
    for token in tokens:
        mine = [row for row in rows if row["suffix"] == token and (step is None or int(row["step"]) == step)]
        if not mine:
            raise ValueError(f"{path} holds no episode under {token}" + (f" at step {step}" if step is not None else ""))
        last = max(int(row["step"]) for row in mine)
        outcomes.append({int(row["task_id"]): float(row["reward"]) for row in mine if int(row["step"]) == last})
    return outcomes[0], outcomes[1]


def by_variant(high: dict[int, float], low: dict[int, float], variant_of) -> list[dict]:
    """Per task variant, in order of first appearance: tasks, success under each token, the paired
    difference with its interval (``paired_difference``) and the tasks solved under one token only."""
    groups: dict[str, list[int]] = {}
    for t in sorted(high):
        if t in low:
            groups.setdefault(variant_of(t), []).append(t)
    rows = []
    for variant, tasks in groups.items():
        h, lo_ = {t: high[t] for t in tasks}, {t: low[t] for t in tasks}
        mean, lo, hi = paired_difference(h, lo_)
        rows.append(
            {
                "variant": variant,
                "tasks": len(tasks),
                "high": sum(h.values()) / len(tasks),
                "low": sum(lo_.values()) / len(tasks),
                "difference": (mean, lo, hi),
                "only_high": sum(h[t] > lo_[t] for t in tasks),
                "only_low": sum(h[t] < lo_[t] for t in tasks),
            }
        )
    return rows


def play(model, tokenizer, family, settings, episodes: int, suffix: str, seed: int, out: Path, step: int) -> list:
    """The first ``episodes`` held-out tasks under ``settings`` as they are (sampled unless they are
    greedy), 32 at a time, each outcome appended to ``out`` at ``step``; the rollouts."""
    from cleanrl_style.llm.rollout import append_held_out_outcomes, collect_in_batches

    rollouts, _ = collect_in_batches(
        model, tokenizer, family, family.test_ids[:episodes], settings,
        batch_size=32, seed=seed, first_user_suffix=suffix, stage_name="steering",
    )  # fmt: skip
    append_held_out_outcomes(out, step, suffix, rollouts)
    return rollouts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, help="an rc_grpo.py run folder with model/ and args.json")
    parser.add_argument("--episodes", type=int, default=64, help="held-out tasks, the first of the test split")
    parser.add_argument("--greedy", action="store_true", help="greedy episodes (the agent's evaluation) instead of sampled")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="", help="CSV of one row per episode")
    parser.add_argument("--record", default="", help="a CSV of episodes already played (held_out.csv) to read instead")
    parser.add_argument("--step", type=int, default=None, help="with --record: the step to read (default: the last)")
    args = parser.parse_args()
    run = Path(args.run)
    record = Path(args.record) if args.record else None
    if args.step is not None and record is None:
        parser.error("--step reads an evaluation of --record; without --record the episodes are played anew")
    for needed in (run / "args.json",) if record else (run / "model", run / "args.json"):
        if not needed.exists():
            parser.error(f"{needed} is missing: --run takes a finished rc_grpo.py run folder (it exports model/)")
    if record is not None and not record.exists():
        parser.error(f"--record {record}: no such file (a run's held_out.csv, or an earlier --out)")
    torch.set_num_threads(args.threads)

    from llm_rollout_throughput import load_agent  # benchmarks/ is on the path of a script run from it

    rc_grpo = load_agent("rc_grpo")
    names = {field.name for field in dataclasses.fields(rc_grpo.Args)}
    saved = json.loads((run / "args.json").read_text())
    run_args = rc_grpo.Args(**{k: tuple(v) if isinstance(v, list) else v for k, v in saved.items() if k in names})
    family = run_args.task_family()
    if record is None:
        record = play_both_tokens(args, run, run_args, rc_grpo, family)
    else:
        print(f"{run.name}: the episodes in {record}")
    try:
        high, low = read_outcomes(record, (rc_grpo.HIGH_REWARD, rc_grpo.LOW_REWARD), args.step)
    except ValueError as exc:
        parser.error(str(exc))
    (whole,) = by_variant(high, low, lambda task: "all")
    mean, lo, hi = whole["difference"]
    print(f"high - low, paired by task: {mean:.3f} [{lo:.3f}, {hi:.3f}] (95% percentile bootstrap over tasks)")
    print(f"tasks solved under one token only: high {whole['only_high']}, low {whole['only_low']}")
    if family.variant_of is not None:
        print("by task variant: tasks, success high / low, high - low [95% bootstrap], tasks solved under one token only")
        for row in by_variant(high, low, family.variant_of):
            d, dlo, dhi = row["difference"]
            print(
                f"  {row['variant']}: {row['tasks']}, {row['high']:.3f} / {row['low']:.3f}, {d:.3f} [{dlo:.3f}, {dhi:.3f}], "
                f"high {row['only_high']}, low {row['only_low']}"
            )


def play_both_tokens(args, run: Path, run_args, rc_grpo, family) -> Path:
    """The first ``--episodes`` held-out tasks under each token, from the same seed; the CSV of their outcomes."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cleanrl_style.llm.rollout import rollout_stats

    settings = run_args.eval_settings() if args.greedy else run_args.rollout_settings()
    tokenizer = AutoTokenizer.from_pretrained(run / "model")
    model = AutoModelForCausalLM.from_pretrained(run / "model").eval()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp()) / "episodes.csv"
    out.unlink(missing_ok=True)
    print(f"{run.name}: {args.episodes} held-out tasks, {'greedy' if args.greedy else 'sampled'}, seed {args.seed}")
    for step, token in enumerate((rc_grpo.HIGH_REWARD, rc_grpo.LOW_REWARD)):
        # the same seed under both tokens: the same random draws
        suffix = run_args.token_separator + token
        stats = rollout_stats(play(model, tokenizer, family, settings, args.episodes, suffix, args.seed, out, step))
        print(
            f"{token}: success {stats['success_rate']:.3f}, turns {stats['turns_per_episode']:.2f}, "
            f"tool errors {stats['tool_errors_per_episode']:.3f} per episode"
        )
    return out


if __name__ == "__main__":
    main()
