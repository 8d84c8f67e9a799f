"""Multi-turn GRPO for a language model in the text environments: the baseline of RC-GRPO and TurnSight.

    python agents/grpo.py --env tools:bank                      # SmolLM2-135M-Instruct (offline), the bank suite
    python agents/grpo.py --env python-math                     # numeric problems with a sandboxed python tool
    python agents/grpo.py --env tools:all --model /models/Qwen2.5-1.5B-Instruct --device cuda --precision bf16
    python agents/grpo.py --env tools:bank --total-timesteps 0  # only evaluate the model on held-out tasks

GRPO (Shao et al., 2024, "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open
Language Models", arXiv:2402.03300) on whole multi-turn episodes. Each iteration draws
``groups_per_step`` training tasks and runs ``group_size`` episodes of each, all generated together
(tool results and user turns appended between assistant messages). Episode j of group g gets

    A_j = (R_j - mean_g R) / (std_g R + eps)          (sample std; A = 0 when the group's rewards are equal)

on every token the policy sampled in it (system, user and tool tokens are never trained on). With
``r_t = pi_theta(y_t | y_<t) / pi_old(y_t | y_<t)`` and ``d_t = log pi_ref(y_t | y_<t) - log pi_theta(y_t | y_<t)``,
the loss at a policy token t is

    l_t = -min(r_t A_j, clip(r_t, 1 - c, 1 + c) A_j) + beta (exp(d_t) - d_t - 1)

(PPO's clipped surrogate, Schulman et al., 2017, "Proximal Policy Optimization Algorithms",
arXiv:1707.06347, and the non-negative unbiased estimator of KL(pi_theta || pi_ref)), averaged over
each episode's policy tokens, then over episodes. With one optimizer step per batch (the default)
pi_old is the current policy, so r_t = 1 and the gradient is the plain policy gradient. That holds
because rollouts are generated at the training precision (``--generation-precision auto``). With
``--generation-precision bf16`` (bfloat16 weight products, faster decoding) the sampler is a
slightly different policy: pi_old is then that policy, each token's log-probability recorded when
it was drawn, and r_t the importance weight from it to the policy trained.

The reward is the environment's binary episode reward. On the tool suites it requires the gold
calls (name and arguments) as well as the state and response checks, by default for every agent:
that is RC-GRPO's definition, and GRPO, RC-GRPO and TurnSight are compared on one reward.

A group whose rewards are all equal has zero advantage everywhere and teaches nothing: the
fraction of such groups is logged as ``charts/zero_variance_fraction`` (what RC-GRPO attacks).
``total_timesteps`` counts iterations. Defaults where the paper leaves a choice: group 5 and
KL 0.1 (RC-GRPO's), clip 0.2, lr 1e-6, per-episode loss averaging (``--loss-aggregation token``
averages over all tokens), sampling from exactly softmax(logits / temperature) at the training
precision (fp32).
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
from cleanrl_style.llm.rollout import collect_groups, evaluate_held_out
from cleanrl_style.llm.tokens import TokenLoss
from cleanrl_style.llm.train import (
    build_policy,
    finish,
    generation_logprobs,
    iteration_seed,
    policy_update,
    release_training_state,
    rollout_metrics,
    sample_groups,
    save_policy_checkpoint,
)


@dataclass
class Args(LLMRunArgs):
    group_size: int = 5
    """rollouts per task (G)"""
    groups_per_step: int = 4
    """tasks per iteration (the batch is groups_per_step x group_size episodes)"""
    clip_coef: float = 0.2
    """PPO clipping coefficient c"""
    kl_coef: float = 0.1
    """beta: weight of the KL to the initial model (0: no reference forward at all)"""
    update_epochs: int = 1
    """optimizer steps per batch (1: on-policy, the ratio is 1)"""
    adv_eps: float = 1e-6
    """eps in (R - mean) / (std + eps)"""
    loss_aggregation: Literal["sequence", "token"] = "sequence"
    """sequence: mean over each rollout's tokens, then over rollouts (GRPO); token: mean over all tokens"""
    save_model: bool = True
    """also write runs/<run>/model (a transformers folder) at the end"""


# ---- the algorithm ---------------------------------------------------------------------------------


def group_advantages(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """``(R_j - mean_g) / (std_g + eps)`` within each group; ``rewards`` (groups, G), sample std."""
    centered = rewards - rewards.mean(dim=1, keepdim=True)
    if rewards.shape[1] < 2:
        return centered
    return centered / (rewards.std(dim=1, keepdim=True) + eps)


def clipped_token_loss(clip_coef: float, kl_coef: float) -> TokenLoss:
    """GRPO's per-token loss: the clipped surrogate plus ``kl_coef`` times the KL estimate.

    Inputs per token (``extras``): ``advantages``; ``old_logp`` (absent: this step's own log-probs,
    detached, so the ratio is 1); ``ref_logp`` (absent: no KL term)."""

    def loss(logp: torch.Tensor, extras: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        advantages = extras["advantages"]
        log_ratio = logp - extras.get("old_logp", logp.detach())
        ratio = log_ratio.exp()
        surrogate = torch.min(ratio * advantages, ratio.clamp(1 - clip_coef, 1 + clip_coef) * advantages)
        per_token = -surrogate
        stats = {
            "clipfrac": ((ratio - 1).abs() > clip_coef).float(),
            "approx_kl": (ratio - 1) - log_ratio,
        }
        if "ref_logp" in extras:
            d = extras["ref_logp"] - logp
            kl = d.exp() - d - 1
            per_token = per_token + kl_coef * kl
            stats["kl"] = kl
        return per_token, stats

    return loss


# ---- training ---------------------------------------------------------------------------------------

if __name__ == "__main__":
    args = tyro.cli(Args)
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
        with_reference=args.kl_coef > 0,  # no KL term: no frozen copy in memory
    )
    policy, tokenizer = setup.policy, setup.tokenizer
    family, settings, eval_settings = args.task_family(), args.rollout_settings(), args.eval_settings()
    progress = WorkProgress(bar=args.progress_bar)
    loss_fn = clipped_token_loss(args.clip_coef, args.kl_coef)

    for iteration in range(setup.start_iteration, args.total_timesteps + 1):
        started, cpu_started = time.perf_counter(), time.process_time()
        progress.prefix = f"iteration {iteration}/{args.total_timesteps}"
        # ---- rollouts: G episodes of each task, all generated together ---------------------------
        tasks = sample_groups(family.train_ids, args.groups_per_step, args.seed, iteration)
        seed = iteration_seed(args.seed, iteration)
        rollouts, timing, rewards = collect_groups(
            policy, tokenizer, family, tasks, args.group_size, settings, seed=seed, progress=progress
        )

        # ---- GRPO: one advantage per episode, on every policy token of it -------------------------
        advantages = group_advantages(rewards, args.adv_eps).flatten()
        sequences, masks = [r.tokens for r in rollouts], [r.policy_mask for r in rollouts]
        losses = policy_update(
            setup,
            sequences,
            masks,
            [torch.full((len(r.tokens),), float(a)) for r, a in zip(rollouts, advantages)],
            loss_fn,
            kl_coef=args.kl_coef,
            update_epochs=args.update_epochs,
            micro_batch_size=args.micro_batch_size,
            max_grad_norm=args.max_grad_norm,
            aggregation=args.loss_aggregation,
            temperature=args.temperature,
            precision=args.precision,
            progress=progress,
            sampling_logp=generation_logprobs(rollouts, settings),
        )

        # ---- logging, evaluation, checkpoints ----------------------------------------------------
        metrics = (
            rollout_metrics(rollouts, rewards, timing)
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
