"""TurnSight: turn-level hindsight self-distillation on top of multi-turn GRPO.

    python agents/turnsight.py                                   # SmolLM2-135M-Instruct (offline)
    python agents/turnsight.py --lam 0.5 --eps-w 0.5 --horizons 1 2 3

Qu et al. (docs/algorithms.md#turnsight). GRPO gives every token of an episode the same advantage A.
TurnSight asks, per turn, how much the rollout's own future explains what the policy wrote, and
reweights A turn by turn without ever changing its sign:

1. Hindsight block of horizon d for turn k: the calls (assistant messages) and tool outputs of
   turns k .. min(k+d-1, K) of the same rollout. A "turn" is one assistant message and the tool
   results it got back.
2. Gap per policy token y of turn k: ``log pi_ref(y | context + hindsight_d) - log pi_theta(y | context)``;
   the teacher pi_ref is the frozen initial policy, teacher-forced, no gradient.
3. Turn score: mean gap over the turn's policy tokens (tool and user tokens are not scored).
4. Cross-horizon agreement over d in {1, 2, 3}: majority sign v of the scores; d* = the horizon
   of largest |score| among those of sign v (no majority: score 0).
5. ``z = (s - mean) / (std + eps)`` over all turns of all sibling rollouts of the task (its group).
6. ``w = 1 + eps_w tanh(sign(A) z)``, ``A' = A ((1 - lam) + lam w)``, lam = eps_w = 0.5: w stays in
   [1 - eps_w, 1 + eps_w] and the factor is positive, so A' has the sign of A.

Paper setup as defaults: 16 rollouts per task, at most 10 turns, temperature 1.0, no KL.
Choices not fixed by the paper (flags or stated here): the hindsight block is given to the
teacher as one extra user message after the context (``hindsight_header``), tool outputs in it
are cut to ``hindsight_max_chars``; groups with zero advantage skip the teacher passes (their A'
is 0 whatever w is). Logged: ``turnsight/weight_mean|std|min|max``, the agreement fraction and
the chosen horizons, with GRPO's metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import tyro
from grpo import test_metrics, train_metrics

from cleanrl_style import Run
from cleanrl_style.llm_losses import batched_logprobs, group_advantages, ppo_update
from cleanrl_style.llm_rollout import (
    LLMRunArgs,
    Rollout,
    chat_template_text,
    collect_group_rollouts,
    encode,
    make_task_set,
    task_ids_of,
)
from cleanrl_style.llm_train import build_policy, export_model, reference_logprobs, sample_groups, save_policy_checkpoint


@dataclass
class Args(LLMRunArgs):
    group_size: int = 16
    """rollouts per task (paper: 16)"""
    groups_per_step: int = 2
    """tasks per iteration"""
    lam: float = 0.5
    """lambda: how much of the advantage is modulated"""
    eps_w: float = 0.5
    """eps_w: the weights stay within [1 - eps_w, 1 + eps_w]"""
    horizons: tuple[int, ...] = (1, 2, 3)
    """hindsight horizons d"""
    norm_eps: float = 1e-6
    """eps of the score normalization over sibling rollouts"""
    hindsight_max_chars: int = 1000
    """characters of each tool output kept in a hindsight block"""
    hindsight_header: str = "Hindsight: what the assistant did next and what the tools returned:"
    """first line of the hindsight message shown to the teacher"""
    clip_coef: float = 0.2
    """PPO clipping coefficient"""
    kl_coef: float = 0.0
    """KL to the initial model (paper: none)"""
    adv_eps: float = 1e-6
    """eps in (R - mean) / (std + eps)"""
    loss_aggregation: str = "sequence"
    """sequence or token averaging of the loss"""
    save_model: bool = True
    """write runs/<run>/model at the end"""


# ---- the algorithm: steps 4-6 on per-turn scores --------------------------------------------------


def select_horizon(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Cross-horizon agreement. ``scores`` (turns, horizons) -> (chosen score, chosen horizon index, all-agree flag).

    The majority sign v of each row's scores; among the horizons of sign v, the one with the largest
    |score|. A row without a majority (equal counts of signs) gets score 0 and index -1.
    """
    signs = torch.sign(scores)
    majority = torch.sign(signs.sum(dim=1))
    eligible = (signs == majority.unsqueeze(1)) & (majority.unsqueeze(1) != 0)
    magnitude = torch.where(eligible, scores.abs(), torch.full_like(scores, -1.0))
    index = magnitude.argmax(dim=1)
    chosen = scores.gather(1, index.unsqueeze(1)).squeeze(1)
    has_majority = majority != 0
    agree = (signs == signs[:, :1]).all(dim=1) & (signs[:, 0] != 0)
    return torch.where(has_majority, chosen, torch.zeros_like(chosen)), torch.where(has_majority, index, -1), agree


def normalize_over_siblings(scores: torch.Tensor, eps: float) -> torch.Tensor:
    """``(s - mean) / (std + eps)`` over all turns of a group's rollouts (a flat tensor); zeros if fewer than 2."""
    if scores.numel() < 2:
        return torch.zeros_like(scores)
    return (scores - scores.mean()) / (scores.std(unbiased=False) + eps)


def modulation_weights(advantage_sign: torch.Tensor, z: torch.Tensor, eps_w: float) -> torch.Tensor:
    """``w = 1 + eps_w tanh(sign(A) z)``, within [1 - eps_w, 1 + eps_w]."""
    return 1.0 + eps_w * torch.tanh(advantage_sign * z)


def modulate(advantage: torch.Tensor, w: torch.Tensor, lam: float) -> torch.Tensor:
    """``A' = A ((1 - lam) + lam w)``; for lam * eps_w < 1 the factor is positive, so the sign of A is kept."""
    return advantage * ((1.0 - lam) + lam * w)


# ---- steps 1-3: hindsight blocks and per-turn gaps ---------------------------------------------------


def hindsight_message(rollout: Rollout, k: int, d: int, args: Args) -> dict[str, str]:
    """The calls and tool outputs of turns k .. min(k+d-1, K) of ``rollout``, as one user message."""
    lines = [args.hindsight_header]
    for j in range(k, min(k + d, len(rollout.turns))):
        turn = rollout.turns[j]
        lines.append(f"[turn {j - k + 1}] assistant: {turn.content}")
        lines += [f"[turn {j - k + 1}] tool: {out[: args.hindsight_max_chars]}" for out in turn.tool_outputs]
    return {"role": "user", "content": "\n".join(lines)}


def turn_scores(
    policy, reference, tokenizer, rollouts: list[Rollout], student: list[torch.Tensor], args: Args
) -> list[torch.Tensor]:
    """Per rollout, a (turns, horizons) tensor: the mean over each turn's policy tokens of
    ``log pi_ref(y | context + hindsight_d) - log pi_theta(y | context)``.

    Identical blocks (d past the last turn) are scored once."""
    jobs: dict[tuple[int, int, int], int] = {}
    sequences, masks = [], []
    for i, r in enumerate(rollouts):
        for k, turn in enumerate(r.turns):
            for d in args.horizons:
                key = (i, k, min(k + d, len(r.turns)))
                if key in jobs or turn.end <= turn.start:
                    continue
                prefix = encode(
                    tokenizer, chat_template_text(tokenizer, turn.context_messages + [hindsight_message(r, k, d, args)], True)
                )
                y = r.tokens[turn.start : turn.end]
                jobs[key] = len(sequences)
                sequences.append(prefix + y)
                masks.append([False] * len(prefix) + [True] * len(y))
    teacher = (
        reference_logprobs(
            policy, reference, sequences, masks, tokenizer.pad_token_id, args.micro_batch_size, args.temperature
        )
        if sequences
        else []
    )
    out = []
    for i, r in enumerate(rollouts):
        scores = torch.zeros(len(r.turns), len(args.horizons))
        for k, turn in enumerate(r.turns):
            if turn.end <= turn.start:
                continue
            student_y = student[i][turn.start : turn.end]
            for h, d in enumerate(args.horizons):
                teacher_y = teacher[jobs[(i, k, min(k + d, len(r.turns)))]][-(turn.end - turn.start) :]
                scores[k, h] = (teacher_y - student_y).mean()
        out.append(scores)
    return out


def turnsight_advantages(
    policy, reference, tokenizer, rollouts: list[Rollout], advantages: torch.Tensor, num_groups: int, args: Args
) -> tuple[list[torch.Tensor], dict[str, float]]:
    """Token advantages (one (len_i,) tensor per rollout): each turn's tokens get ``A'`` of that turn."""
    token_adv = [torch.full((len(r.tokens),), float(a)) for r, a in zip(rollouts, advantages)]
    size = len(rollouts) // num_groups
    active = [i for i in range(len(rollouts)) if advantages[i] != 0]
    weights, agreements, horizons = [], [], []
    if active:
        picked = [rollouts[i] for i in active]
        student = batched_logprobs(
            policy,
            [r.tokens for r in picked],
            [r.policy_mask for r in picked],
            tokenizer.pad_token_id,
            args.micro_batch_size,
            args.temperature,
        )
        scores = dict(zip(active, turn_scores(policy, reference, tokenizer, picked, student, args)))
        for g in range(num_groups):
            members = [i for i in range(g * size, (g + 1) * size) if i in scores and len(rollouts[i].turns) > 0]
            if not members:
                continue
            chosen = {i: select_horizon(scores[i]) for i in members}
            z_all = normalize_over_siblings(torch.cat([chosen[i][0] for i in members]), args.norm_eps)
            offset = 0
            for i in members:
                K = len(rollouts[i].turns)
                z = z_all[offset : offset + K]
                offset += K
                a = advantages[i]
                w = modulation_weights(torch.sign(a).expand(K), z, args.eps_w)
                modulated = modulate(a.expand(K), w, args.lam)
                for k, turn in enumerate(rollouts[i].turns):
                    token_adv[i][turn.start : turn.end] = modulated[k]
                weights.append(w)
                agreements.append(chosen[i][2].float())
                horizons.append(chosen[i][1][chosen[i][1] >= 0].float())
    stats: dict[str, float] = {}
    if weights:
        w = torch.cat(weights)
        chosen_h = torch.cat(horizons)
        stats = {
            "turnsight/weight_mean": float(w.mean()),
            "turnsight/weight_std": float(w.std(unbiased=False)),
            "turnsight/weight_min": float(w.min()),
            "turnsight/weight_max": float(w.max()),
            "turnsight/agreement_fraction": float(torch.cat(agreements).mean()),
            "turnsight/modulated_turns": float(w.numel()),
        }
        if chosen_h.numel():
            stats["turnsight/horizon_mean"] = float(torch.tensor(args.horizons, dtype=torch.float)[chosen_h.long()].mean())
    return token_adv, stats


if __name__ == "__main__":
    args = tyro.cli(Args)
    if not 0 <= args.lam * args.eps_w < 1:
        raise SystemExit("lam * eps_w must be in [0, 1) so that the modulation never flips an advantage's sign")
    run = Run(args, agent_file=__file__)
    args = run.args
    policy, tokenizer, reference, optimizer, start = build_policy(args, run)
    pad_id = tokenizer.pad_token_id
    train_tasks, test_tasks = make_task_set(args, "train"), make_task_set(args, "test")
    train_ids = task_ids_of(train_tasks)

    for iteration in range(start, args.total_timesteps + 1):
        tasks = sample_groups(train_ids, args.groups_per_step, args.seed, iteration)
        rollouts, timing, rewards = collect_group_rollouts(policy, tokenizer, train_tasks, tasks, args, iteration)
        advantages = group_advantages(rewards, args.adv_eps).flatten()
        token_advantages, ts_stats = turnsight_advantages(policy, reference, tokenizer, rollouts, advantages, len(tasks), args)

        sequences, masks = [r.tokens for r in rollouts], [r.policy_mask for r in rollouts]
        ref = (
            reference_logprobs(policy, reference, sequences, masks, pad_id, args.micro_batch_size, args.temperature)
            if args.kl_coef > 0
            else None
        )
        update = ppo_update(
            policy,
            optimizer,
            sequences,
            masks,
            token_advantages,
            pad_id,
            clip_coef=args.clip_coef,
            kl_coef=args.kl_coef,
            ref_logps=ref,
            micro_batch_size=args.micro_batch_size,
            temperature=args.temperature,
            max_grad_norm=args.max_grad_norm,
            loss_aggregation=args.loss_aggregation,
        )

        metrics = train_metrics(rollouts, rewards, timing, update) | ts_stats | {"charts/learning_rate": args.learning_rate}
        if args.eval_every and iteration % args.eval_every == 0 and iteration < args.total_timesteps:
            metrics |= test_metrics(policy, tokenizer, test_tasks, args)
        run.log(iteration, metrics)
        run.progress(iteration, metrics["charts/success_rate"])
        if run.checkpoint_due(iteration) or iteration == args.total_timesteps:
            save_policy_checkpoint(run, iteration, policy, optimizer)

    final_step = max(args.total_timesteps, start - 1)
    if args.eval_episodes > 0:
        metrics = test_metrics(policy, tokenizer, test_tasks, args)
        run.log(final_step, metrics)
        print(f"held-out success over {args.eval_episodes} tasks: {metrics['charts/test_success_rate']:.3f}")
    if args.save_model and args.total_timesteps > 0:
        export_model(run, policy, tokenizer)
    run.close()
