"""RC-GRPO: reward-conditioned fine-tuning (RCTP), then GRPO with a reward token drawn per rollout.

    python agents/rc_grpo.py --stage rctp                                   # stage 1 from SmolLM2-135M-Instruct
    python agents/rc_grpo.py --stage rl --model runs/<rctp run>/model       # stage 2 from stage 1's model
    python agents/rc_grpo.py --stage rctp --model runs/<rl run>/model       # (either stage starts from the other's model)

Zhong et al. (docs/algorithms.md#rc-grpo). In multi-turn tool use an SFT'd policy makes the rollouts
of a GRPO group alike, so a group's binary rewards are often all equal and its advantage is zero.

Stage 1, RCTP. Trajectories from the environment's scripted policies (expert, and noisy with one
mistake per episode), labelled by their actual reward and mixed 1:1 successful/failed. A
reward-goal token is appended to the first user message, ``<|high_reward|>`` on successes and
``<|low_reward|>`` on failures; both are added to the tokenizer as special tokens (new embedding
rows start at the mean embedding). Loss: cross-entropy on the assistant tokens only. Paper
settings as defaults: lr 1e-5, batch 16, 5 epochs. ``total_timesteps`` is filled in as the number
of optimizer steps (epochs x batches). At the end the model is written to ``runs/<run>/model``.

Stage 2, RC-GRPO. Every rollout j of a group draws its own token (high with probability
``p_high`` = 0.5) and is conditioned on it; the binary episode reward is normalized within the
group, ``A_j = (R_j - mean_g) / (std_g + eps)``; PPO-clip 0.2; KL 0.1 to the RCTP model (the model
stage 2 starts from); group 5. Because high- and low-conditioned rollouts behave differently,
the expected group variance is at least ``(G-1)/G p(1-p) (mu_high - mu_low)^2`` and fewer groups
have zero advantage (``charts/zero_variance_fraction``, against ``agents/grpo.py``).

Evaluation (``charts/test_success_rate``) conditions on ``<|high_reward|>``. Choices the paper
leaves open (flags): the token is appended after a space; the expert/noisy split of data
generation (noisy with mistake probability 1, then balanced by actual reward); stage 2's lr 1e-6.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

import torch
import tyro
from grpo import test_metrics, train_metrics

from cleanrl_style import Run
from cleanrl_style.llm_losses import batched_logprobs, group_advantages, ppo_update, sft_step
from cleanrl_style.llm_rollout import (
    LLMRunArgs,
    collect_group_rollouts,
    make_task_set,
    task_ids_of,
    tokenize_conversation,
    with_first_user_suffix,
)
from cleanrl_style.llm_train import build_policy, export_model, reference_logprobs, sample_groups, save_policy_checkpoint

HIGH_REWARD, LOW_REWARD = "<|high_reward|>", "<|low_reward|>"


@dataclass
class Args(LLMRunArgs):
    stage: str = "rctp"
    """rctp (stage 1: reward-conditioned fine-tuning) or rl (stage 2: RC-GRPO)"""
    token_separator: str = " "
    """text between the first user message and its reward token"""
    # ---- stage 1: RCTP
    learning_rate: float = 1e-5
    """AdamW learning rate (paper's RCTP: 1e-5; pass 1e-6 or so for stage 2)"""
    rctp_trajectories: int = 256
    """trajectories in the RCTP data set (half successful, half failed)"""
    rctp_batch_size: int = 16
    """trajectories per RCTP optimizer step"""
    rctp_epochs: int = 5
    """passes over the RCTP data"""
    rctp_data: str = ""
    """JSONL of trajectories (envs.text.save_jsonl); empty: generate them with the scripted policies"""
    rctp_max_tokens: int = 4096
    """drop training conversations longer than this many tokens"""
    # ---- stage 2: RC-GRPO
    group_size: int = 5
    """rollouts per task (G)"""
    groups_per_step: int = 4
    """tasks per iteration"""
    p_high: float = 0.5
    """probability that a rollout is conditioned on <|high_reward|>"""
    clip_coef: float = 0.2
    """PPO clipping coefficient"""
    kl_coef: float = 0.1
    """weight of the KL to the RCTP model"""
    update_epochs: int = 1
    """optimizer steps per batch"""
    adv_eps: float = 1e-6
    """eps in (R - mean) / (std + eps)"""
    loss_aggregation: str = "sequence"
    """sequence or token averaging of the loss"""
    save_model: bool = True
    """write runs/<run>/model at the end"""


def reward_token(success: bool) -> str:
    return HIGH_REWARD if success else LOW_REWARD


def draw_reward_tokens(n: int, p_high: float, rng: random.Random) -> list[str]:
    """Stage 2: each rollout's own goal token, high with probability ``p_high``."""
    return [HIGH_REWARD if rng.random() < p_high else LOW_REWARD for _ in range(n)]


def rctp_dataset(args: Args, tokenizer, train_tasks) -> tuple[list[list[int]], list[list[bool]], dict[str, float]]:
    """Mixed-quality trajectories, 1:1 successful/failed, each conditioned on the token of its outcome; tokenized."""
    from envs.text import ExpertPolicy, NoisyPolicy, ToolUseEnv, load_jsonl, rollout

    if args.rctp_data:
        episodes = [(t["messages"], float(t["reward"])) for t in load_jsonl(args.rctp_data)]
    else:
        env = ToolUseEnv(train_tasks, max_steps_per_turn=args.max_steps_per_turn)
        rng = random.Random(args.seed)
        ids = task_ids_of(train_tasks)
        episodes = []
        for k in range(args.rctp_trajectories):  # alternate expert (successes) and noisy (mostly failures)
            policy = ExpertPolicy() if k % 2 == 0 else NoisyPolicy(mistake_prob=1.0, seed=args.seed * 7919 + k)
            trajectory = rollout(env, policy, seed=k, options={"task_id": rng.choice(ids)})
            episodes.append((trajectory.messages, trajectory.reward))
    good = [e for e in episodes if e[1] >= 1.0]
    bad = [e for e in episodes if e[1] < 1.0]
    half = min(len(good), len(bad))
    if half == 0:
        raise SystemExit(f"RCTP needs successful and failed trajectories; got {len(good)} and {len(bad)}")
    sequences, masks = [], []
    for messages, reward in [x for pair in zip(good[:half], bad[:half]) for x in pair]:
        conditioned = with_first_user_suffix(messages, args.token_separator + reward_token(reward >= 1.0))
        ids, mask = tokenize_conversation(tokenizer, conditioned)
        if len(ids) <= args.rctp_max_tokens:
            sequences.append(ids)
            masks.append(mask)
    return sequences, masks, {"rctp/trajectories": len(sequences)}


def run_rctp(args: Args, run: Run) -> None:
    policy, tokenizer, _, optimizer, start = build_policy(args, run, special_tokens=(HIGH_REWARD, LOW_REWARD))
    train_tasks, test_tasks = make_task_set(args, "train"), make_task_set(args, "test")
    sequences, masks, data_stats = rctp_dataset(args, tokenizer, train_tasks)
    per_epoch = math.ceil(len(sequences) / args.rctp_batch_size)
    total = args.rctp_epochs * per_epoch  # args.total_timesteps was an estimate before the data was balanced and filtered
    for step in range(start, total + 1):
        epoch, batch = divmod(step - 1, per_epoch)
        order = torch.randperm(len(sequences), generator=torch.Generator().manual_seed(args.seed * 1000 + epoch)).tolist()
        chosen = order[batch * args.rctp_batch_size : (batch + 1) * args.rctp_batch_size]
        stats = sft_step(
            policy,
            optimizer,
            [sequences[i] for i in chosen],
            [masks[i] for i in chosen],
            tokenizer.pad_token_id,
            args.micro_batch_size,
            args.max_grad_norm,
        )
        metrics = {
            "losses/sft_loss": stats["sft_loss"],
            "losses/grad_norm": stats["grad_norm"],
            "rctp/epoch": epoch,
            "charts/learning_rate": args.learning_rate,
            **(data_stats if step == 1 else {}),
        }
        if args.eval_every and step % args.eval_every == 0 and step < total:
            metrics |= test_metrics(policy, tokenizer, test_tasks, args, args.token_separator + HIGH_REWARD)
        run.log(step, metrics)
        run.progress(step)
        if run.checkpoint_due(step) or step == total:
            save_policy_checkpoint(run, step, policy, optimizer)
    finish(args, run, policy, tokenizer, test_tasks, total)


def run_rc_grpo(args: Args, run: Run) -> None:
    policy, tokenizer, reference, optimizer, start = build_policy(args, run, special_tokens=(HIGH_REWARD, LOW_REWARD))
    pad_id = tokenizer.pad_token_id
    train_tasks, test_tasks = make_task_set(args, "train"), make_task_set(args, "test")
    train_ids = task_ids_of(train_tasks)
    for iteration in range(start, args.total_timesteps + 1):
        tasks = sample_groups(train_ids, args.groups_per_step, args.seed, iteration)
        tokens = draw_reward_tokens(
            len(tasks) * args.group_size, args.p_high, random.Random(args.seed * 1_000_003 + iteration)
        )
        rollouts, timing, rewards = collect_group_rollouts(
            policy,
            tokenizer,
            train_tasks,
            tasks,
            args,
            iteration,
            first_user_suffixes=[args.token_separator + t for t in tokens],
        )

        # GRPO over the whole group, high- and low-conditioned rollouts together.
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

        high = [r.reward for r, t in zip(rollouts, tokens) if t == HIGH_REWARD]
        low = [r.reward for r, t in zip(rollouts, tokens) if t == LOW_REWARD]
        metrics = train_metrics(rollouts, rewards, timing, update) | {
            "charts/learning_rate": args.learning_rate,
            "rc_grpo/high_token_fraction": len(high) / len(tokens),
        }
        if high:
            metrics["rc_grpo/success_high"] = sum(high) / len(high)
        if low:
            metrics["rc_grpo/success_low"] = sum(low) / len(low)
        if args.eval_every and iteration % args.eval_every == 0 and iteration < args.total_timesteps:
            metrics |= test_metrics(policy, tokenizer, test_tasks, args, args.token_separator + HIGH_REWARD)
        run.log(iteration, metrics)
        run.progress(iteration, metrics["charts/success_rate"])
        if run.checkpoint_due(iteration) or iteration == args.total_timesteps:
            save_policy_checkpoint(run, iteration, policy, optimizer)
    finish(args, run, policy, tokenizer, test_tasks, args.total_timesteps)


def finish(args: Args, run: Run, policy, tokenizer, test_tasks, final_step: int) -> None:
    if args.eval_episodes > 0:
        metrics = test_metrics(policy, tokenizer, test_tasks, args, args.token_separator + HIGH_REWARD)
        run.log(final_step, metrics)
        print(
            f"held-out success over {args.eval_episodes} tasks (conditioned on {HIGH_REWARD}): "
            f"{metrics['charts/test_success_rate']:.3f}"
        )
    if args.save_model and final_step > 0:
        export_model(run, policy, tokenizer)
    run.close()


if __name__ == "__main__":
    args = tyro.cli(Args)
    if args.stage not in ("rctp", "rl"):
        raise SystemExit(f"--stage must be rctp or rl, got {args.stage!r}")
    if not args.exp_name:
        args.exp_name = f"rc_grpo_{args.stage}"
    if args.stage == "rctp" and not args.resume:
        examples = args.rctp_trajectories if not args.rctp_data else len(Path(args.rctp_data).read_text().splitlines())
        args.total_timesteps = args.rctp_epochs * math.ceil(examples / args.rctp_batch_size)  # upper bound; see rctp_dataset
    run = Run(args, agent_file=__file__)
    run_rctp(run.args, run) if run.args.stage == "rctp" else run_rc_grpo(run.args, run)
