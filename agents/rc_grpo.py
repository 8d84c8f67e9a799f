"""RC-GRPO: reward-conditioned fine-tuning (RCTP), then GRPO with a reward token drawn per rollout.

    python agents/rc_grpo.py --env tools:bank --stage rctp                                # stage 1 from SmolLM2-135M-Instruct
    python agents/rc_grpo.py --env tools:bank --stage rl --model runs/<rctp run>/model    # stage 2 from stage 1's model

Zhong, Zhai, Song, Bian, Liu and Tan (2026), "RC-GRPO: Reward-Conditioned Group Relative Policy
Optimization for Multi-Turn Tool Calling Agents", arXiv:2602.03025 (docs/algorithms.md#rc-grpo).
In multi-turn tool use a fine-tuned policy makes the rollouts of a GRPO group alike, so the group's
binary rewards are often all equal and its normalized advantage is zero: the update vanishes.

**Reward.** An episode succeeds when every user turn passes the state, response and empty-turn
checks and every gold call was made with its name and arguments (``--require-gold-calls``, which
this agent does not let you turn off): a call with wrong arguments that still lands on the gold
state fails.

**Stage 1, RCTP** (reward-conditioned trajectory policy). Trajectories from the environment's
scripted policies (the expert, and the noisy policy with one mistake per episode, or one in each
turn with ``--rctp-noisy-every-turn``, of the kinds ``--rctp-noisy-kinds`` names, a share
``--rctp-noisy-share`` of them, half by default),
optionally with episodes sampled from the starting model itself (``--rctp-on-policy N``: its own
failures, the behaviour the low token should name; with ``--rctp-noisy-share 0`` they are the only
failures), labelled by their actual reward, shuffled and mixed 1:1 successful/failed. A reward-goal
token is appended to the first user message: ``<|high_reward|>`` on successes, ``<|low_reward|>``
on failures (with ``--reward-token-every-turn`` also to each message a later assistant message
answers, in the data, the rollouts and the evaluations alike); both are added to the tokenizer as
special tokens whose embeddings start at those of the words `` success`` and `` failure``
(``--token-init words``). With transformers' default, the mean embedding for both
(``--token-init mean``), the two rows of SmolLM2-135M differ by 1e-4 in norm against row norms of
about 3, and 17 Adam steps at lr 5e-5 move each coordinate by at most 8.5e-4: after one RCTP epoch
the model still cannot tell the tokens apart. Loss:
cross-entropy on the assistant tokens only (content and closing end-of-turn token), averaged over
all of them. Paper settings as defaults: lr 1e-5, batch 16, 5 epochs. ``total_timesteps`` is
filled in as the number of optimizer steps (epochs x batches). The model is written to
``runs/<run>/model``.

**Stage 2, RC-GRPO.** The reward tokens are stratified within each group, which is what keeps its
rollouts diverse: a share p (``--p-high``, 0.5) of the group's G rollouts is conditioned on
``<|high_reward|>`` and the rest on ``<|low_reward|>``, in a random order. The high count is pG,
rounded down or up at random by its fraction (so p is the expected share), and kept between 1 and
G - 1 when 0 < p < 1, so every group of 2 or more holds both tokens (G = 5, p = 0.5: 2 or 3 high,
each half the time; G = 4: exactly 2). With R_j the binary reward,

    A_j = (R_j - mean_g R) / (std_g R + eps)
    l_t = -min(r_t A_j, clip(r_t, 1 - c, 1 + c) A_j) + beta (exp(d_t) - d_t - 1)

at every policy token t of rollout j (r_t the probability ratio to the sampling policy, d_t the
log-ratio of the reference to the policy), averaged per rollout, then over rollouts; c = 0.2,
beta = 0.1 to the RCTP model (the model stage 2 starts from), group 5. High- and low-conditioned
rollouts behave differently (success rates mu_high and mu_low), so a group with n_h high and
n_l = G - n_h low rollouts has an expected sample variance of its rewards of at least
``n_h n_l / (G (G-1)) (mu_high - mu_low)^2``, never zero when mu_high != mu_low, and fewer groups
have zero advantage (``charts/zero_variance_fraction``, against ``agents/grpo.py``).

Evaluation (``charts/test_success_rate``) conditions on ``<|high_reward|>``; at the end of RCTP the
same held-out tasks run once more on ``<|low_reward|>`` (``rctp/low_token_success_rate``), which says
whether the tokens steer the model before any RL. Choices the paper
leaves open (flags): the token follows the first user message after a space; data from the
expert and from the noisy policy with a mistake in every episode, then balanced by actual reward;
one ``--learning-rate`` for both stages, default 1e-5 (RCTP's in the paper; stage 2 may want less,
such as GRPO's 1e-6, passed by hand). RCTP's scripted data exists for the tool suites only.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import torch
import tyro

from cleanrl_style import Run, check_range, require
from cleanrl_style.llm.args import LLMRunArgs
from cleanrl_style.llm.progress import WorkProgress
from cleanrl_style.llm.rollout import (
    RolloutSettings,
    collect_groups,
    collect_in_batches,
    evaluate_held_out,
    tokenize_conversation,
    with_first_user_suffix,
    with_turn_suffixes,
)
from cleanrl_style.llm.sft import supervised_steps
from cleanrl_style.llm.tokens import TokenLoss
from cleanrl_style.llm.train import (
    HELD_OUT_FILE,
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
from envs.text.policies import MISTAKE_KINDS, NOISY_KINDS

HIGH_REWARD, LOW_REWARD = "<|high_reward|>", "<|low_reward|>"
REWARD_TOKEN_WORDS = {HIGH_REWARD: " success", LOW_REWARD: " failure"}
"""``--token-init words``: the text whose embedding each reward token starts from"""


@dataclass
class Args(LLMRunArgs):
    stage: Literal["rctp", "rl"] = "rctp"
    """rctp (stage 1: reward-conditioned fine-tuning) or rl (stage 2: RC-GRPO)"""
    token_separator: str = " "
    """text between the first user message and its reward token"""
    reward_token_every_turn: bool = False
    """also put the reward token at the end of each message a later assistant message answers (tool
    outputs, user messages), in the RCTP data, the rollouts and the evaluations alike: the model then
    reads it just before each of its messages, not only in the first user message"""
    token_init: Literal["words", "mean"] = "words"
    """words: the reward tokens' embeddings start at those of ' success' and ' failure', so the model
    tells them apart from the first step; mean: both start at the mean embedding (nearly equal)"""
    token_lr_scale: float = 1.0
    """learning rate of the reward tokens' embedding rows as a multiple of --learning-rate (full
    fine-tune only): at a fine-tuning rate one epoch barely moves them, while prompt tuning trains
    embeddings at rates far above fine-tuning's"""
    # ---- stage 1: RCTP
    learning_rate: float = 1e-5
    """AdamW learning rate of either stage (default: the paper's RCTP value, 1e-5; stage 2 may want less, such as 1e-6)"""
    # RCTP's batches follow from the step number alone (sft.batch_order), so a resume with more
    # --rctp-epochs continues exactly as a run asked for them from the start would have.
    resume_may_change: ClassVar[frozenset[str]] = LLMRunArgs.resume_may_change | {"rctp_epochs"}
    rctp_trajectories: int = 256
    """trajectories generated for the RCTP data set (then balanced 1:1 successful/failed)"""
    rctp_batch_size: int = 16
    """trajectories per RCTP optimizer step"""
    rctp_epochs: int = 5
    """passes over the RCTP data"""
    rctp_noisy_share: float = 0.5
    """share of the scripted trajectories played by the noisy policy (one mistake per episode, mostly
    failures); the rest by the expert. 0 with --rctp-on-policy: the failures are the model's own"""
    rctp_noisy_every_turn: bool = False
    """the noisy policy errs in every turn that has gold calls, not in one: under the low token a
    mistake is then what each such turn of the data does, which greedy decoding can follow"""
    rctp_noisy_kinds: tuple[str, ...] = MISTAKE_KINDS
    """the noisy policy's mistake kinds (envs.text.policies): the default three, and gap_call, by which a
    task with a missing function or parameter is failed in its gap turn by calling tools anyway"""
    rctp_data: str = ""
    """JSONL of trajectories (envs.text.save_jsonl); empty: generate them with the scripted policies"""
    rctp_on_policy: int = 0
    """episodes sampled from the starting model on training tasks (at --temperature, no reward token)
    and added to the RCTP data, labelled by their reward; kept in runs/<run>/rctp_on_policy.jsonl"""
    rctp_max_tokens: int = 4096
    """drop training conversations longer than this many tokens"""
    # ---- stage 2: RC-GRPO
    group_size: int = 5
    """rollouts per task (G)"""
    groups_per_step: int = 4
    """tasks per iteration"""
    p_high: float = 0.5
    """share of each group's rollouts conditioned on <|high_reward|> (stratified: with 0 < p < 1 every
    group of 2 or more holds both tokens)"""
    clip_coef: float = 0.2
    """PPO clipping coefficient c"""
    kl_coef: float = 0.1
    """beta: weight of the KL to the RCTP model"""
    update_epochs: int = 1
    """optimizer steps per batch"""
    adv_eps: float = 1e-6
    """eps in (R - mean) / (std + eps)"""
    loss_aggregation: Literal["sequence", "token"] = "sequence"
    """sequence or token averaging of the loss"""
    save_model: bool = True
    """write runs/<run>/model at the end"""

    def reward_token_init(self) -> dict[str, str] | None:
        """What each reward token's embedding starts from (``add_special_tokens``' init_text)."""
        return REWARD_TOKEN_WORDS if self.token_init == "words" else None

    def rollout_settings(self) -> RolloutSettings:
        return dataclasses.replace(super().rollout_settings(), suffix_every_turn=self.reward_token_every_turn)

    def validate(self) -> None:
        check_range("p_high", self.p_high, 0, 1)  # a share of each group
        require(
            self.token_lr_scale > 0 and (self.token_lr_scale == 1.0 or self.lora_rank == 0),
            f"--token-lr-scale must be positive, and 1 with --lora-rank > 0 (LoRA trains the token rows in its own "
            f"module), got {self.token_lr_scale} with --lora-rank {self.lora_rank}",
        )
        check_range("rctp_noisy_share", self.rctp_noisy_share, 0, 1)
        require(
            bool(self.rctp_noisy_kinds) and set(self.rctp_noisy_kinds) <= set(NOISY_KINDS),
            f"--rctp-noisy-kinds takes one or more of {' '.join(NOISY_KINDS)}, "
            f"got {' '.join(self.rctp_noisy_kinds) or 'none'}",
        )
        require(
            self.require_gold_calls,
            "RC-GRPO's success requires the gold calls; --no-require-gold-calls is for grpo.py and turnsight.py",
        )
        super().validate()


# ---- the algorithm: reward tokens, RCTP data and loss, group advantages, clipped loss ---------------


def reward_token(success: bool) -> str:
    return HIGH_REWARD if success else LOW_REWARD


def high_token_count(group_size: int, p_high: float, rng: random.Random) -> int:
    """How many of a group's rollouts get ``<|high_reward|>``: ``p_high * group_size`` rounded down
    or up at random by its fraction (its mean is exact), then, for 0 < p_high < 1, kept within
    [1, group_size - 1] so that a group of 2 or more holds both tokens."""
    exact = p_high * group_size
    count = math.floor(exact)
    count += rng.random() < exact - count
    if 0 < p_high < 1 and group_size >= 2:
        count = min(max(count, 1), group_size - 1)
    return count


def draw_reward_tokens(num_groups: int, group_size: int, p_high: float, rng: random.Random) -> list[str]:
    """Stage 2: the goal token of each rollout, group after group, stratified within each group
    (``high_token_count`` high ones, the rest low, in a random order)."""
    if not 0 <= p_high <= 1:
        raise ValueError(f"p_high is a share of each group and must be in [0, 1], got {p_high}")
    tokens: list[str] = []
    for _ in range(num_groups):
        high = high_token_count(group_size, p_high, rng)
        group = [HIGH_REWARD] * high + [LOW_REWARD] * (group_size - high)
        rng.shuffle(group)
        tokens += group
    return tokens


def is_noisy(k: int, noisy_share: float) -> bool:
    """Whether scripted episode ``k`` is the noisy policy's: spread evenly, ``floor(count * share)``
    of the first ``count`` (share 0.5: the odd ``k``)."""
    return math.floor((k + 1) * noisy_share) > math.floor(k * noisy_share)


def scripted_episodes(
    family,
    count: int,
    seed: int,
    noisy_share: float = 0.5,
    every_turn: bool = False,
    kinds: tuple[str, ...] = MISTAKE_KINDS,
) -> list[tuple[list[dict[str, str]], float]]:
    """``count`` episodes of the expert (successes) and, a share ``noisy_share`` spread among them, of
    the noisy policy with one mistake per episode, or one in each turn with gold calls
    (``every_turn``), of the given ``kinds`` (mostly failures), on random training tasks; (messages,
    reward) each."""
    from envs.text import ExpertPolicy, NoisyPolicy, rollout

    if family.kind != "tools":
        raise SystemExit(f"RCTP's scripted trajectories exist for the tool suites (tools:...), not {family.name!r}")
    env = family.make_env()
    rng = random.Random(seed)
    episodes = []
    for k in range(count):
        noisy = is_noisy(k, noisy_share)
        policy = (
            NoisyPolicy(mistake_prob=1.0, kinds=kinds, seed=seed * 7919 + k, every_turn=every_turn)
            if noisy
            else ExpertPolicy()
        )
        trajectory = rollout(env, policy, seed=k, options=family.reset_options(rng.choice(family.train_ids)))
        episodes.append((trajectory.messages, trajectory.reward))
    return episodes


def on_policy_episodes(args: Args, run: Run, policy, tokenizer, family, progress) -> list[tuple[list[dict[str, str]], float]]:
    """``--rctp-on-policy`` episodes of the starting model on random training tasks, as (messages,
    reward). Written once to the run folder and read back on resume: a resumed run's policy is no
    longer the starting model."""
    from envs.text import load_jsonl

    path = run.dir / "rctp_on_policy.jsonl"
    if not path.exists():
        rng = random.Random(args.seed * 7919 + 1)
        task_ids = [rng.choice(family.train_ids) for _ in range(args.rctp_on_policy)]
        progress.prefix = "RCTP on-policy data"
        # --generation-batch-size at a time, as the held-out evaluation: all 160 at once peaked at 12.2 GiB resident
        rollouts, _ = collect_in_batches(
            policy,
            tokenizer,
            family,
            task_ids,
            args.rollout_settings(),
            batch_size=args.generation_batch_size,
            seed=args.seed * 7919 + 1,
            progress=progress,
        )
        part = path.with_suffix(".part")
        with open(part, "w", encoding="utf-8") as f:
            for r in rollouts:
                f.write(json.dumps({"task_id": r.task_id, "messages": r.messages, "reward": r.reward}) + "\n")
        part.replace(path)
    episodes = [(t["messages"], float(t["reward"])) for t in load_jsonl(path)]
    successes = sum(reward >= 1.0 for _, reward in episodes)
    print(f"RCTP on-policy data: {len(episodes)} episodes of the starting model, {successes} successful ({path})")
    return episodes


def rctp_dataset(
    episodes: list[tuple[list[dict[str, str]], float]],
    tokenizer,
    separator: str,
    max_tokens: int,
    seed: int = 0,
    every_turn: bool = False,
) -> tuple[list[list[int]], list[list[bool]]]:
    """Successful and failed episodes, each list shuffled (``seed``), then 1:1 and interleaved, each
    conditioned on the token of its outcome (appended to the first user message or, ``every_turn``,
    to every message an assistant message answers); token ids and assistant-token masks.

    Raises:
        SystemExit: the episodes hold no success or no failure.
    """
    good = [e for e in episodes if e[1] >= 1.0]
    bad = [e for e in episodes if e[1] < 1.0]
    if not good or not bad:
        raise SystemExit(f"RCTP needs successful and failed trajectories; got {len(good)} and {len(bad)}")
    # Shuffled before the 1:1 cut, so the kept failures mix their sources (scripted and on-policy).
    rng = random.Random(seed)
    rng.shuffle(good)
    rng.shuffle(bad)
    sequences, masks = [], []
    for messages, reward in [x for pair in zip(good, bad) for x in pair]:  # zip stops at the shorter: 1:1
        place = with_turn_suffixes if every_turn else with_first_user_suffix
        ids, mask = tokenize_conversation(tokenizer, place(messages, separator + reward_token(reward >= 1.0)))
        if len(ids) <= max_tokens:
            sequences.append(ids)
            masks.append(mask)
    return sequences, masks


def group_advantages(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """``(R_j - mean_g) / (std_g + eps)`` within each group, high- and low-conditioned rollouts together."""
    centered = rewards - rewards.mean(dim=1, keepdim=True)
    if rewards.shape[1] < 2:
        return centered
    return centered / (rewards.std(dim=1, keepdim=True) + eps)


def clipped_token_loss(clip_coef: float, kl_coef: float) -> TokenLoss:
    """The clipped surrogate plus ``kl_coef`` times the KL estimate to the RCTP model, per token."""

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


# ---- the two stages ---------------------------------------------------------------------------------


def run_rctp(args: Args, run: Run) -> None:
    setup = build_policy(
        args.model,
        args.device,
        args.learning_rate,
        weight_decay=args.weight_decay,
        lora_rank=args.lora_rank,
        lora_alpha=args.lora_alpha,
        gradient_checkpointing=args.gradient_checkpointing,
        park_dir=args.park_dir(run),
        special_tokens=(HIGH_REWARD, LOW_REWARD),
        special_token_init=args.reward_token_init(),
        special_token_lr_scale=args.token_lr_scale,
        run=run,
        with_reference=False,  # RCTP is supervised: no KL term, no frozen copy in memory
    )
    policy, tokenizer = setup.policy, setup.tokenizer
    family, eval_settings = args.task_family(), args.eval_settings()
    progress = WorkProgress(bar=args.progress_bar)
    if args.rctp_data:
        from envs.text import load_jsonl

        episodes = [(t["messages"], float(t["reward"])) for t in load_jsonl(args.rctp_data)]
    else:
        episodes = scripted_episodes(
            family,
            args.rctp_trajectories,
            args.seed,
            args.rctp_noisy_share,
            args.rctp_noisy_every_turn,
            args.rctp_noisy_kinds,
        )
    if args.rctp_on_policy:
        episodes += on_policy_episodes(args, run, policy, tokenizer, family, progress)
    sequences, masks = rctp_dataset(
        episodes, tokenizer, args.token_separator, args.rctp_max_tokens, args.seed, args.reward_token_every_turn
    )
    # args.total_timesteps was an estimate before the data was balanced and filtered
    total = supervised_steps(
        run,
        setup,
        sequences,
        masks,
        batch_size=args.rctp_batch_size,
        epochs=args.rctp_epochs,
        seed=args.seed,
        learning_rate=args.learning_rate,
        micro_batch_size=args.micro_batch_size,
        max_grad_norm=args.max_grad_norm,
        precision=args.precision,
        eval_every=args.eval_every,
        evaluate=lambda: evaluate_held_out(
            policy,
            tokenizer,
            family,
            args.eval_episodes,
            eval_settings,
            first_user_suffix=args.token_separator + HIGH_REWARD,
            progress=progress,
        ),
        epoch_metric="rctp/epoch",
        first_step_metrics={"rctp/trajectories": len(sequences)},
        progress=progress,
        label="RCTP",
    )
    release_training_state(setup)
    if args.eval_episodes > 0:
        # Whether the tokens steer, before any RL: the same held-out tasks conditioned on the low token
        # (finish() evaluates the high one); RC-GRPO's groups need the two to differ.
        progress.prefix = "final, low token"
        low = evaluate_held_out(
            policy,
            tokenizer,
            family,
            args.eval_episodes,
            eval_settings,
            first_user_suffix=args.token_separator + LOW_REWARD,
            progress=progress,
            record=run.dir / HELD_OUT_FILE,
            step=total,
        )
        low_success = low["charts/test_success_rate"]
        run.log(total, {"rctp/low_token_success_rate": low_success})
        print(f"held-out success over {args.eval_episodes} tasks (conditioned on {LOW_REWARD}): {low_success:.3f}")
    finish(
        run,
        policy,
        tokenizer,
        family,
        total,
        eval_episodes=args.eval_episodes,
        eval_settings=eval_settings,
        save_model=args.save_model,
        first_user_suffix=args.token_separator + HIGH_REWARD,
        progress=progress,
    )


def run_rc_grpo(args: Args, run: Run) -> None:
    setup = build_policy(
        args.model,
        args.device,
        args.learning_rate,
        weight_decay=args.weight_decay,
        lora_rank=args.lora_rank,
        lora_alpha=args.lora_alpha,
        gradient_checkpointing=args.gradient_checkpointing,
        park_dir=args.park_dir(run),
        special_tokens=(HIGH_REWARD, LOW_REWARD),
        special_token_init=args.reward_token_init(),
        special_token_lr_scale=args.token_lr_scale,
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
        tasks = sample_groups(family.train_ids, args.groups_per_step, args.seed, iteration)
        rng = random.Random(args.seed * 1_000_003 + iteration)
        tokens = draw_reward_tokens(len(tasks), args.group_size, args.p_high, rng)
        rollouts, timing, rewards = collect_groups(
            policy,
            tokenizer,
            family,
            tasks,
            args.group_size,
            settings,
            seed=iteration_seed(args.seed, iteration),
            first_user_suffixes=[args.token_separator + t for t in tokens],
            progress=progress,
        )

        # GRPO over the whole group, high- and low-conditioned rollouts together.
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

        high = [r.reward for r, t in zip(rollouts, tokens) if t == HIGH_REWARD]
        low = [r.reward for r, t in zip(rollouts, tokens) if t == LOW_REWARD]
        metrics = (
            rollout_metrics(rollouts, rewards, timing)
            | losses
            | {
                "charts/learning_rate": args.learning_rate,
                "rc_grpo/high_token_fraction": len(high) / len(tokens),
                "time/iteration_seconds": time.perf_counter() - started,
                "time/iteration_cpu_seconds": time.process_time() - cpu_started,
            }
        )
        if high:
            metrics["rc_grpo/success_high"] = sum(high) / len(high)
        if low:
            metrics["rc_grpo/success_low"] = sum(low) / len(low)
        if args.eval_every and iteration % args.eval_every == 0 and iteration < args.total_timesteps:
            metrics |= evaluate_held_out(
                policy,
                tokenizer,
                family,
                args.eval_episodes,
                eval_settings,
                first_user_suffix=args.token_separator + HIGH_REWARD,
                progress=progress,
            )
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
        first_user_suffix=args.token_separator + HIGH_REWARD,
        progress=progress,
    )


if __name__ == "__main__":
    args = tyro.cli(Args)
    args.validate()
    if not args.exp_name:
        args.exp_name = f"rc_grpo_{args.stage}"
    if args.stage == "rctp" and not args.resume:
        examples = args.rctp_trajectories if not args.rctp_data else len(Path(args.rctp_data).read_text().splitlines())
        examples += args.rctp_on_policy
        args.total_timesteps = args.rctp_epochs * math.ceil(examples / args.rctp_batch_size)  # upper bound; see run_rctp
    run = Run(args, agent_file=__file__)
    run_rctp(run.args, run) if run.args.stage == "rctp" else run_rc_grpo(run.args, run)
