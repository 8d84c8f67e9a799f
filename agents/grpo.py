"""Multi-turn GRPO for tool use: the baseline of RC-GRPO and TurnSight.

    python agents/grpo.py                                   # SmolLM2-135M-Instruct (offline), all task kinds
    python agents/grpo.py --model Qwen/Qwen2.5-0.5B-Instruct --device cuda --lora-rank 16
    python agents/grpo.py --total-timesteps 0               # only evaluate the model on held-out tasks

Each iteration draws ``groups_per_step`` training tasks and runs ``group_size`` episodes of each
(all episodes of all groups generated together; tool results appended between turns). The episode
reward is binary (every user turn passed). Advantage of rollout j in group g:
``A_j = (R_j - mean_g) / (std_g + eps)``, given to every token the policy produced in that
episode (tool, user and system tokens are never trained on). Loss: PPO-clip (0.2) plus
``kl_coef`` times the KL to the initial model (estimator ``exp(d) - d - 1``), one optimizer step
per batch by default (``--update-epochs`` > 1 reuses the batch with the clipped ratio).

A group whose rewards are all equal has zero advantage everywhere and teaches nothing: the
fraction of such groups is logged as ``charts/zero_variance_fraction`` (the quantity RC-GRPO
attacks). ``total_timesteps`` counts iterations. Choices not fixed by the papers (flags):
group 5, lr 1e-6, KL 0.1 (RC-GRPO's), per-sequence loss averaging.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import tyro

from cleanrl_style import Run
from cleanrl_style.llm_losses import batched_logprobs, group_advantages, group_reward_std, ppo_update, zero_variance_fraction
from cleanrl_style.llm_rollout import (
    LLMRunArgs,
    collect_group_rollouts,
    evaluate_success,
    make_task_set,
    rollout_stats,
    task_ids_of,
)
from cleanrl_style.llm_train import build_policy, export_model, reference_logprobs, sample_groups, save_policy_checkpoint


@dataclass
class Args(LLMRunArgs):
    group_size: int = 5
    """rollouts per task (G)"""
    groups_per_step: int = 4
    """tasks per iteration (the batch is groups_per_step x group_size episodes)"""
    clip_coef: float = 0.2
    """PPO clipping coefficient"""
    kl_coef: float = 0.1
    """weight of the KL to the initial model (0: no reference forward at all)"""
    update_epochs: int = 1
    """optimizer steps per batch (1: on-policy GRPO, the ratio is 1)"""
    adv_eps: float = 1e-6
    """eps in (R - mean) / (std + eps)"""
    loss_aggregation: str = "sequence"
    """sequence: mean over each rollout's tokens, then over rollouts (GRPO); token: mean over all tokens"""
    save_model: bool = True
    """also write runs/<run>/model (a transformers folder) at the end"""


def train_metrics(rollouts, rewards: torch.Tensor, timing: dict, update: dict) -> dict[str, float]:
    stats = rollout_stats(rollouts)
    return {
        "charts/success_rate": stats["success_rate"],
        "charts/zero_variance_fraction": zero_variance_fraction(rewards),
        "charts/group_reward_std": group_reward_std(rewards),
        "charts/turns_per_episode": stats["turns_per_episode"],
        "charts/tool_errors_per_episode": stats["tool_errors_per_episode"],
        "charts/cut_fraction": stats["cut_fraction"],
        "charts/tokens_per_second": timing["tokens_per_second"],
        "losses/policy_loss": update["policy_loss"],
        "losses/kl": update["kl"],
        "losses/clipfrac": update["clipfrac"],
        "losses/approx_kl": update["approx_kl"],
        "losses/grad_norm": update["grad_norm"],
    }


def test_metrics(policy, tokenizer, test_tasks, args, suffix: str = "") -> dict[str, float]:
    stats = evaluate_success(policy, tokenizer, test_tasks, args.eval_episodes, args, first_user_suffix=suffix)
    return {
        "charts/test_success_rate": stats["success_rate"],
        "eval/turns_per_episode": stats["turns_per_episode"],
        "eval/tool_errors_per_episode": stats["tool_errors_per_episode"],
    }


if __name__ == "__main__":
    args = tyro.cli(Args)
    run = Run(args, agent_file=__file__)
    args = run.args
    policy, tokenizer, reference, optimizer, start = build_policy(args, run)
    pad_id = tokenizer.pad_token_id
    train_tasks, test_tasks = make_task_set(args, "train"), make_task_set(args, "test")
    train_ids = task_ids_of(train_tasks)

    for iteration in range(start, args.total_timesteps + 1):
        # ---- rollouts: G episodes of each task, all generated together --------------------------
        tasks = sample_groups(train_ids, args.groups_per_step, args.seed, iteration)
        rollouts, timing, rewards = collect_group_rollouts(policy, tokenizer, train_tasks, tasks, args, iteration)

        # ---- GRPO: one advantage per episode, on every policy token of it -----------------------
        advantages = group_advantages(rewards, args.adv_eps).flatten()
        sequences, masks = [r.tokens for r in rollouts], [r.policy_mask for r in rollouts]
        token_advantages = [torch.full((len(r.tokens),), float(a)) for r, a in zip(rollouts, advantages)]
        ref = (
            reference_logprobs(policy, reference, sequences, masks, pad_id, args.micro_batch_size, args.temperature)
            if args.kl_coef > 0
            else None
        )
        old = (
            batched_logprobs(policy, sequences, masks, pad_id, args.micro_batch_size, args.temperature)
            if args.update_epochs > 1
            else None
        )
        for _ in range(args.update_epochs):
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
                old_logps=old,
                micro_batch_size=args.micro_batch_size,
                temperature=args.temperature,
                max_grad_norm=args.max_grad_norm,
                loss_aggregation=args.loss_aggregation,
            )

        # ---- logging, evaluation, checkpoints ----------------------------------------------------
        metrics = train_metrics(rollouts, rewards, timing, update) | {"charts/learning_rate": args.learning_rate}
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
