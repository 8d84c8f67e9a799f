"""TurnSight: turn-level hindsight credit on top of multi-turn GRPO.

    python agents/turnsight.py --env python-math                 # tool-integrated reasoning, SmolLM2-135M-Instruct (offline)
    python agents/turnsight.py --env tools:bank --lam 0.5 --eps-w 0.5 --horizons 1 2 3

Qu et al. (2026), TurnSight, arXiv:2608.04007 (docs/algorithms.md#turnsight). GRPO gives every
token of an episode the same advantage A. TurnSight asks, per turn, how much the rollout's own future explains what the policy
wrote, and reweights A turn by turn without ever changing its sign. Its natural home is
multi-turn tool-integrated reasoning (``--env python-math``: the model runs Python in a sandbox
and sees the output before its next message); it runs on the tool suites alone as well.

1. Hindsight block of horizon d for turn k: the calls (assistant messages) and tool outputs of
   turns k .. min(k+d-1, K) of the same rollout. A "turn" is one assistant message and the tool
   results it got back.
2. Gap per policy token y of turn k: ``log pi_T(y | context + hindsight_d) - log pi_theta(y | context)``;
   the teacher pi_T is teacher-forced, without gradient: by default (``--teacher policy``) the
   current policy itself, reading the hindsight (on-policy self-distillation: the gap measures
   only what the hindsight changes); ``--teacher initial`` takes the frozen initial model, whose
   gap also carries the policy's drift from it.
3. Turn score: mean gap over the turn's policy tokens (tool and user tokens are not scored).
4. Cross-horizon agreement over d in {1, 2, 3}: majority sign v of the scores; d* = the horizon
   of largest |score| among those of sign v (no majority: score 0). Each distinct hindsight block
   votes once: near the end of an episode, horizons that run past the last turn give the block of
   a shorter one and do not vote again.
5. ``z = (s - mean) / (std + eps)`` over all turns of all sibling rollouts of the task (its group);
   with ``--normalize-last-apart``, over the rollouts' last turns and over their earlier turns apart.
6. ``w = 1 + eps_w tanh(sign(A) z)``, ``A' = A ((1 - lam) + lam w)``, lam = eps_w = 0.5: w stays in
   [1 - eps_w, 1 + eps_w] and the factor is positive, so A' has the sign of A.

The base advantage and loss are GRPO's: ``A = (R - mean_g R) / (std_g R + eps)`` and, per policy
token t, ``l_t = -min(r_t A'_t, clip(r_t, 1 - c, 1 + c) A'_t)`` with A'_t the modulated advantage
of the token's turn (no KL term by default), averaged per rollout, then over rollouts.

Paper setup as defaults: 16 rollouts per task, at most 10 turns, temperature 1.0, no KL.
Choices not fixed by the paper (flags or stated here): the teacher (``--teacher``: the current
policy under no_grad by default, the frozen initial model as the alternative; the initial model
needs a second copy in memory unless LoRA's base serves); each distinct hindsight block votes once
in the agreement; the hindsight block is given to the teacher as one extra user message after the
context (``hindsight_header``), tool outputs in it are cut to ``hindsight_max_chars``; where the
block begins (``--hindsight-start``: turn k's own message by default, or its tool outputs, so that
the teacher does not read the tokens it scores); whether the block ends with the episode's outcome
(``--hindsight-outcome``, off by default); whether the last turns and the earlier ones are
normalized apart (``--normalize-last-apart``, off by default: one ``z`` over all turns); groups with
zero advantage skip the teacher passes (their A' is 0 whatever w is); tokens outside any turn
(none are trained) keep A. Logged:
``turnsight/weight_mean|std|min|max``, the agreement fraction and the chosen horizons, with
GRPO's metrics.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

import torch
import tyro

from cleanrl_style import Run
from cleanrl_style.llm.args import LLMRunArgs
from cleanrl_style.llm.progress import WorkProgress
from cleanrl_style.llm.rollout import Rollout, chat_template_text, collect_groups, encode, evaluate_held_out
from cleanrl_style.llm.tokens import TokenLoss, batched_logprobs
from cleanrl_style.llm.train import (
    build_policy,
    finish,
    generation_logprobs,
    iteration_seed,
    policy_update,
    reference_logprobs,
    release_training_state,
    rollout_metrics,
    sample_groups,
    save_policy_checkpoint,
)


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
    hindsight_start: Literal["turn", "output"] = "turn"
    """where turn k's hindsight block begins: turn (its own message, then its tool outputs and the
    later turns: step 1) or output (its tool outputs and the later turns only: the teacher never reads
    the message it scores, so the gap cannot come from copying it; a block left empty, as d = 1 of an
    answer without a call, does not vote)"""
    hindsight_outcome: bool = False
    """end every hindsight block with the episode's outcome (solved or not, and its reward), so the
    teacher also reads how the episode ended; with it no block is empty"""
    normalize_last_apart: bool = False
    """normalize the scores of the episodes' last turns (mostly the answers) and of their earlier
    turns (the calls) apart within each group, not all together: the two kinds of turn sit at
    different levels of the gap, and one mean and std over both keeps less of either's ranking"""
    teacher: Literal["policy", "initial"] = "policy"
    """who reads the hindsight: policy (the current policy, without gradient: on-policy
    self-distillation, the score is the hindsight's effect alone) or initial (the frozen starting
    model: the score also carries the policy's drift from it, and a second model stays in memory)"""
    clip_coef: float = 0.2
    """PPO clipping coefficient"""
    kl_coef: float = 0.0
    """KL to the initial model (paper: none)"""
    adv_eps: float = 1e-6
    """eps in (R - mean) / (std + eps)"""
    loss_aggregation: Literal["sequence", "token"] = "sequence"
    """sequence or token averaging of the loss"""
    save_model: bool = True
    """write runs/<run>/model at the end"""


# ---- the algorithm: steps 4-6 on per-turn scores --------------------------------------------------


def select_horizon(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Cross-horizon agreement. ``scores`` (turns, horizons) -> (chosen score, chosen horizon index, all-agree flag).

    NaN marks a horizon whose hindsight block is a shorter horizon's (it ran past the last turn):
    it does not vote. The majority sign v of each row's votes; among the horizons of sign v, the one
    with the largest |score| (the first on a tie). A row without a majority (as many positive as
    negative votes) gets score 0 and index -1; it agrees when all its votes have one nonzero sign.
    """
    votes = ~scores.isnan()
    signs = torch.where(votes, torch.sign(scores), torch.zeros_like(scores))
    majority = torch.sign(signs.sum(dim=1))
    eligible = (signs == majority.unsqueeze(1)) & (majority.unsqueeze(1) != 0)
    magnitude = torch.where(eligible, scores.abs(), torch.full_like(scores, -1.0))
    index = magnitude.argmax(dim=1)
    chosen = scores.gather(1, index.unsqueeze(1)).squeeze(1)
    has_majority = majority != 0
    first = signs.gather(1, votes.long().argmax(dim=1, keepdim=True))  # the first vote's sign
    agree = ((signs == first) | ~votes).all(dim=1) & (first.squeeze(1) != 0)
    return torch.where(has_majority, chosen, torch.zeros_like(chosen)), torch.where(has_majority, index, -1), agree


def normalize_over_siblings(scores: torch.Tensor, eps: float) -> torch.Tensor:
    """``(s - mean) / (std + eps)`` over all turns of a group's rollouts (a flat tensor); zeros if fewer than 2."""
    if scores.numel() < 2:
        return torch.zeros_like(scores)
    return (scores - scores.mean()) / (scores.std(unbiased=False) + eps)


def normalize_group(scores: list[torch.Tensor], eps: float, last_apart: bool) -> list[torch.Tensor]:
    """``z`` of each turn of a group's rollouts (one (turns,) tensor of chosen scores each):
    ``normalize_over_siblings`` over all their turns, or with ``last_apart`` over the rollouts' last
    turns and over their earlier turns separately."""
    flat = torch.cat(scores)
    if not last_apart:
        z = normalize_over_siblings(flat, eps)
    else:
        last = torch.cat([torch.arange(len(s)) == len(s) - 1 for s in scores])
        z = torch.empty_like(flat)
        z[last] = normalize_over_siblings(flat[last], eps)
        z[~last] = normalize_over_siblings(flat[~last], eps)
    return list(z.split([len(s) for s in scores]))


def modulation_weights(advantage_sign: torch.Tensor, z: torch.Tensor, eps_w: float) -> torch.Tensor:
    """``w = 1 + eps_w tanh(sign(A) z)``, within [1 - eps_w, 1 + eps_w]."""
    return 1.0 + eps_w * torch.tanh(advantage_sign * z)


def modulate(advantage: torch.Tensor, w: torch.Tensor, lam: float) -> torch.Tensor:
    """``A' = A ((1 - lam) + lam w)``; for lam * eps_w < 1 the factor is positive, so the sign of A is kept."""
    return advantage * ((1.0 - lam) + lam * w)


# ---- steps 1-3: hindsight blocks and per-turn gaps ---------------------------------------------------


def hindsight_message(rollout: Rollout, k: int, d: int, args: Args) -> dict[str, str] | None:
    """The calls and tool outputs of turns k .. min(k+d-1, K) of ``rollout``, as one user message;
    with ``hindsight_start == "output"`` without turn k's own message, and None where that leaves
    nothing to show; with ``hindsight_outcome`` the episode's outcome last."""
    lines = [args.hindsight_header]
    for j in range(k, min(k + d, len(rollout.turns))):
        turn = rollout.turns[j]
        if j > k or args.hindsight_start == "turn":
            lines.append(f"[turn {j - k + 1}] assistant: {turn.content}")
        lines += [f"[turn {j - k + 1}] tool: {out[: args.hindsight_max_chars]}" for out in turn.tool_outputs]
    if args.hindsight_outcome:
        solved = "solved" if rollout.reward >= 1.0 else "not solved"
        lines.append(f"Outcome: the task was {solved} (reward {rollout.reward:g}).")
    return {"role": "user", "content": "\n".join(lines)} if len(lines) > 1 else None


def student_logprobs(
    policy, tokenizer, rollouts: list[Rollout], args: Args, progress: WorkProgress | None = None
) -> list[torch.Tensor]:
    """``log pi_theta(y | context)`` of every token of each rollout, at the sampling temperature (as
    the teacher scores), without gradient: the second term of each gap."""
    return batched_logprobs(
        policy,
        [r.tokens for r in rollouts],
        [r.policy_mask for r in rollouts],
        tokenizer.pad_token_id,
        args.micro_batch_size,
        temperature=args.temperature,
        precision=args.precision,
        progress=progress,
        stage_name="student log-probs",
    )


def turn_scores(
    policy,
    reference,
    tokenizer,
    rollouts: list[Rollout],
    student: list[torch.Tensor],
    args: Args,
    progress: WorkProgress | None = None,
) -> list[torch.Tensor]:
    """Per rollout, a (turns, horizons) tensor: the mean over each turn's policy tokens of
    ``log pi_T(y | context + hindsight_d) - log pi_theta(y | context)``, with the teacher pi_T the
    policy (``args.teacher == "policy"``) or the reference (``"initial"``).

    A horizon whose block is a shorter horizon's (d past the last turn) is NaN: scored once, it
    votes once (``select_horizon``). So is an empty block (``hindsight_start == "output"``): it does
    not vote."""
    jobs: dict[tuple[int, int, int], int] = {}
    sequences, masks = [], []
    for i, r in enumerate(rollouts):
        for k, turn in enumerate(r.turns):
            for d in args.horizons:
                key = (i, k, min(k + d, len(r.turns)))
                if key in jobs or turn.end <= turn.start:
                    continue  # a block already read, or a turn without tokens: no message to build
                message = hindsight_message(r, k, d, args)
                if message is None:
                    continue
                prefix = encode(tokenizer, chat_template_text(tokenizer, turn.context_messages + [message], True))
                y = r.tokens[turn.start : turn.end]
                jobs[key] = len(sequences)
                sequences.append(prefix + y)
                masks.append([False] * len(prefix) + [True] * len(y))
    common = dict(
        pad_id=tokenizer.pad_token_id,
        micro_batch_size=args.micro_batch_size,
        temperature=args.temperature,
        precision=args.precision,
        progress=progress,
        stage_name="hindsight teacher log-probs",
    )
    teacher: list[torch.Tensor] = []
    if sequences and args.teacher == "policy":  # batched_logprobs runs without gradient: a stop-gradient teacher
        teacher = batched_logprobs(policy, sequences, masks, **common)
    elif sequences:
        teacher = reference_logprobs(policy, reference, sequences, masks, **common)
    out = []
    for i, r in enumerate(rollouts):
        scores = torch.zeros(len(r.turns), len(args.horizons))
        for k, turn in enumerate(r.turns):
            if turn.end <= turn.start:
                continue
            student_y = student[i][turn.start : turn.end]
            blocks = set()
            for h, d in enumerate(args.horizons):
                block = min(k + d, len(r.turns))
                if block in blocks or (i, k, block) not in jobs:
                    scores[k, h] = float("nan")
                    continue
                blocks.add(block)
                teacher_y = teacher[jobs[(i, k, block)]][-(turn.end - turn.start) :]
                scores[k, h] = (teacher_y - student_y).mean()
        out.append(scores)
    return out


def turnsight_advantages(
    policy,
    reference,
    tokenizer,
    rollouts: list[Rollout],
    advantages: torch.Tensor,
    num_groups: int,
    args: Args,
    progress: WorkProgress | None = None,
) -> tuple[list[torch.Tensor], dict[str, float]]:
    """Token advantages (one (len_i,) tensor per rollout): each turn's tokens get ``A'`` of that turn."""
    token_adv = [torch.full((len(r.tokens),), float(a)) for r, a in zip(rollouts, advantages)]
    size = len(rollouts) // num_groups
    active = [i for i in range(len(rollouts)) if advantages[i] != 0]
    weights, agreements, horizons = [], [], []
    if active:
        picked = [rollouts[i] for i in active]
        student = student_logprobs(policy, tokenizer, picked, args, progress)
        scores = dict(zip(active, turn_scores(policy, reference, tokenizer, picked, student, args, progress)))
        for g in range(num_groups):
            members = [i for i in range(g * size, (g + 1) * size) if i in scores and len(rollouts[i].turns) > 0]
            if not members:
                continue
            chosen = {i: select_horizon(scores[i]) for i in members}
            z_group = normalize_group([chosen[i][0] for i in members], args.norm_eps, args.normalize_last_apart)
            for i, z in zip(members, z_group):
                K = len(rollouts[i].turns)
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


# ---- GRPO's advantage and loss, with the turn-level advantages in place of the episode's -------------


def group_advantages(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """``(R_j - mean_g) / (std_g + eps)`` within each group; ``rewards`` (groups, G), sample std."""
    centered = rewards - rewards.mean(dim=1, keepdim=True)
    if rewards.shape[1] < 2:
        return centered
    return centered / (rewards.std(dim=1, keepdim=True) + eps)


def clipped_token_loss(clip_coef: float, kl_coef: float) -> TokenLoss:
    """The clipped surrogate on per-token (per-turn) advantages, plus an optional KL estimate.

    ``old_logp`` (the generation-time log-probs at bf16 generation) is the sampling policy's; absent,
    this step's own log-probs detached: one step per batch, the ratio is 1 and its gradient the
    policy gradient."""

    def loss(logp: torch.Tensor, extras: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        advantages = extras["advantages"]
        log_ratio = logp - extras.get("old_logp", logp.detach())
        ratio = log_ratio.exp()
        per_token = -torch.min(ratio * advantages, ratio.clamp(1 - clip_coef, 1 + clip_coef) * advantages)
        stats = {"clipfrac": ((ratio - 1).abs() > clip_coef).float(), "approx_kl": (ratio - 1) - log_ratio}
        if "ref_logp" in extras:
            d = extras["ref_logp"] - logp
            kl = d.exp() - d - 1
            per_token = per_token + kl_coef * kl
            stats["kl"] = kl
        return per_token, stats

    return loss


if __name__ == "__main__":
    args = tyro.cli(Args)
    if not 0 <= args.lam * args.eps_w < 1:
        raise SystemExit("lam * eps_w must be in [0, 1) so that the modulation never flips an advantage's sign")
    args.validate()
    run = Run(args, agent_file=__file__)
    args = run.args
    setup = build_policy(
        args.model,
        args.device,
        args.learning_rate,
        weight_decay=args.weight_decay,
        lora_rank=args.lora_rank,
        lora_alpha=args.lora_alpha,
        gradient_checkpointing=args.gradient_checkpointing,
        park_dir=args.park_dir(run),
        run=run,
        with_reference=args.kl_coef > 0 or args.teacher == "initial",
    )
    policy, tokenizer = setup.policy, setup.tokenizer
    family, settings, eval_settings = args.task_family(), args.rollout_settings(), args.eval_settings()
    progress = WorkProgress(bar=args.progress_bar)
    loss_fn = clipped_token_loss(args.clip_coef, args.kl_coef)

    for iteration in range(setup.start_iteration, args.total_timesteps + 1):
        started, cpu_started = time.perf_counter(), time.process_time()
        progress.prefix = f"iteration {iteration}/{args.total_timesteps}"
        tasks = sample_groups(family.train_ids, args.groups_per_step, args.seed, iteration)
        seed = iteration_seed(args.seed, iteration)
        rollouts, timing, rewards = collect_groups(
            policy, tokenizer, family, tasks, args.group_size, settings, seed=seed, progress=progress
        )
        advantages = group_advantages(rewards, args.adv_eps).flatten()
        token_advantages, ts_stats = turnsight_advantages(
            policy, setup.reference, tokenizer, rollouts, advantages, len(tasks), args, progress
        )

        sequences, masks = [r.tokens for r in rollouts], [r.policy_mask for r in rollouts]
        losses = policy_update(
            setup,
            sequences,
            masks,
            token_advantages,
            loss_fn,
            kl_coef=args.kl_coef,
            update_epochs=1,
            micro_batch_size=args.micro_batch_size,
            max_grad_norm=args.max_grad_norm,
            aggregation=args.loss_aggregation,
            temperature=args.temperature,
            precision=args.precision,
            progress=progress,
            sampling_logp=generation_logprobs(rollouts, settings),
        )

        metrics = (
            rollout_metrics(rollouts, rewards, timing)
            | ts_stats
            | losses
            | {
                "charts/learning_rate": args.learning_rate,
                "time/iteration_seconds": time.perf_counter() - started,
                "time/iteration_cpu_seconds": time.process_time() - cpu_started,
            }
        )
        if args.eval_every and iteration % args.eval_every == 0 and iteration < args.total_timesteps:
            metrics |= evaluate_held_out(policy, tokenizer, family, args.eval_episodes, eval_settings, progress=progress)
        run.log(iteration, metrics)
        run.progress(iteration, metrics["charts/success_rate"])
        if run.checkpoint_due(iteration) or iteration == args.total_timesteps:
            save_policy_checkpoint(run, iteration, policy, setup.optimizer)

    release_training_state(setup)
    finish(
        run,
        policy,
        tokenizer,
        family,
        max(args.total_timesteps, setup.start_iteration - 1),
        eval_episodes=args.eval_episodes,
        eval_settings=eval_settings,
        save_model=args.save_model and args.total_timesteps > 0,
        progress=progress,
    )
