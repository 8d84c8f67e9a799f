"""Supervised warm start of a language model on scripted expert traces, before GRPO or TurnSight.

    python -m cleanrl_style.llm.sft --env python-math --crash-first 0.5 --test-kinds 5 6
    python cleanrl_style/llm/sft.py --env tools:bank --trajectories 128      # the same file as a sweep's agent path

Traces come from the environment's scripted expert on random training tasks: on ``python-math``
``envs.text.PythonReasoningExpert``, whose first call crashes in a share ``--crash-first`` of the
episodes (a misspelled ``print``: it reads the error and fixes the call in its next message) and
whose program prints a wrong number in a share ``--silent-mistake`` (it boxes it: reward 0); on the
tool suites ``envs.text.ExpertPolicy``. So the warm-started model writes episodes of 2-3 turns of
differing quality, which is what turn-level credit (TurnSight) needs to be tested on.

Loss: cross-entropy on the assistant tokens only (content and closing end-of-turn token), averaged
over all of a batch's assistant tokens; ``--epochs`` passes over the traces in batches of
``--batch-size``, a fresh order each epoch (``supervised_steps``, which RC-GRPO's RCTP stage runs
too, on its reward-conditioned data). ``total_timesteps`` is filled in as the number of
optimizer steps. Held-out success is evaluated greedily every ``--eval-every`` steps and at the end
(``--test-kinds`` holds whole python-math problem kinds out of training); the model is written to
``runs/<run>/model``, which ``--model`` of the agents then loads. Calibrate a warm start by the
held-out success it reaches, through ``--epochs``, ``--trajectories`` and ``--learning-rate``.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import tyro

from cleanrl_style.llm.args import LLMRunArgs
from cleanrl_style.llm.progress import WorkProgress
from cleanrl_style.llm.rollout import evaluate_held_out, tokenize_conversation
from cleanrl_style.llm.tokens import gradient_step
from cleanrl_style.llm.train import build_policy, finish, peak_rss_gib, release_training_state, save_policy_checkpoint
from cleanrl_style.runs.cli import check_range
from cleanrl_style.runs.run import Run

Episode = tuple[list[dict[str, str]], float]


@dataclass
class Args(LLMRunArgs):
    learning_rate: float = 2e-5
    """AdamW learning rate"""
    trajectories: int = 256
    """expert traces generated on random training tasks"""
    crash_first: float = 0.5
    """python-math: share of traces whose first call crashes and is fixed in the next message"""
    silent_mistake: float = 0.0
    """python-math: share of traces whose program prints a wrong number, which the expert boxes (reward 0)"""
    batch_size: int = 16
    """traces per optimizer step"""
    epochs: int = 1
    """passes over the traces"""
    # Batches follow from the step number alone (batch_order): a resume with more --epochs continues
    # exactly as a run asked for them from the start would have.
    resume_may_change: ClassVar[frozenset[str]] = LLMRunArgs.resume_may_change | {"epochs"}
    max_tokens: int = 4096
    """drop traces longer than this many tokens"""
    save_model: bool = True
    """write runs/<run>/model at the end"""

    def validate(self) -> None:
        check_range("crash_first", self.crash_first, 0, 1)
        check_range("silent_mistake", self.silent_mistake, 0, 1)
        if self.trajectories < 1 or self.batch_size < 1 or self.epochs < 1:
            raise SystemExit(
                f"error: --trajectories, --batch-size and --epochs must be >= 1, got "
                f"{self.trajectories}, {self.batch_size} and {self.epochs}"
            )
        super().validate()


def expert_episodes(
    family: Any, count: int, seed: int, crash_first: float = 0.0, silent_mistake: float = 0.0
) -> list[Episode]:
    """``count`` scripted expert episodes on random training tasks of ``family``, as (messages, reward)."""
    from envs.text import ExpertPolicy, PythonReasoningExpert, rollout

    rng = random.Random(seed)
    if family.kind == "tools":
        policy: Any = ExpertPolicy()
    else:
        policy = PythonReasoningExpert(crash_first=crash_first, silent_mistake=silent_mistake, seed=seed)
    env = family.make_env()
    episodes = []
    for k in range(count):
        trajectory = rollout(env, policy, seed=seed * 100_003 + k, options=family.reset_options(rng.choice(family.train_ids)))
        episodes.append((trajectory.messages, trajectory.reward))
    return episodes


def sft_dataset(episodes: list[Episode], tokenizer: Any, max_tokens: int) -> tuple[list[list[int]], list[list[bool]]]:
    """Token ids and assistant-token masks of each episode no longer than ``max_tokens``."""
    sequences, masks = [], []
    for messages, _ in episodes:
        ids, mask = tokenize_conversation(tokenizer, messages)
        if len(ids) <= max_tokens:
            sequences.append(ids)
            masks.append(mask)
    if not sequences:
        raise SystemExit(f"every trace is longer than --max-tokens {max_tokens}; raise it")
    return sequences, masks


def cross_entropy_loss(logp: torch.Tensor, extras: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The negative log-likelihood of each assistant token; the fraction above 1/2 (the target is
    then the argmax) is logged as a lower bound on token accuracy."""
    return -logp, {"token_accuracy_lower_bound": (logp > math.log(0.5)).float()}


def batch_order(count: int, batch_size: int, seed: int, step: int) -> list[int]:
    """The trace indices of optimizer step ``step`` (1-based): epochs of a fresh permutation each."""
    per_epoch = math.ceil(count / batch_size)
    epoch, batch = divmod(step - 1, per_epoch)
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed * 1000 + epoch)).tolist()
    return order[batch * batch_size : (batch + 1) * batch_size]


def supervised_steps(
    run: Run,
    setup: Any,
    sequences: list[list[int]],
    masks: list[list[bool]],
    *,
    batch_size: int,
    epochs: int,
    seed: int,
    learning_rate: float,
    micro_batch_size: int,
    max_grad_norm: float,
    precision: str,
    eval_every: int = 0,
    evaluate: Any = None,
    epoch_metric: str = "",
    first_step_metrics: dict[str, float] | None = None,
    progress: WorkProgress | None = None,
    label: str = "SFT",
) -> int:
    """``epochs`` passes of cross-entropy steps over ``sequences`` in batches of ``batch_size``
    (``batch_order``), from ``setup.start_iteration`` (a resumed run goes on where it stopped): each
    step logged, ``evaluate()``'s metrics every ``eval_every`` steps before the last, a checkpoint
    when due and at the last. Returns the number of steps."""
    total = epochs * math.ceil(len(sequences) / batch_size)
    progress = progress or WorkProgress(enabled=False)
    for step in range(setup.start_iteration, total + 1):
        started, cpu_started = time.perf_counter(), time.process_time()
        progress.prefix = f"{label} step {step}/{total}"
        chosen = batch_order(len(sequences), batch_size, seed, step)
        stats = gradient_step(
            setup.policy,
            setup.optimizer,
            [sequences[i] for i in chosen],
            [masks[i] for i in chosen],
            setup.tokenizer.pad_token_id,
            cross_entropy_loss,
            micro_batch_size=micro_batch_size,
            max_grad_norm=max_grad_norm,
            aggregation="token",
            precision=precision,
            progress=progress,
        )
        metrics = {
            "losses/sft_loss": stats["loss"],
            "losses/token_accuracy_lower_bound": stats["token_accuracy_lower_bound"],
            "losses/grad_norm": stats["grad_norm"],
            "charts/learning_rate": learning_rate,
            "time/iteration_seconds": time.perf_counter() - started,
            "time/iteration_cpu_seconds": time.process_time() - cpu_started,
            "memory/peak_rss_gib": peak_rss_gib(),
        }
        if epoch_metric:
            metrics[epoch_metric] = (step - 1) // math.ceil(len(sequences) / batch_size)
        if step == 1 and first_step_metrics:
            metrics |= first_step_metrics
        if eval_every and step % eval_every == 0 and step < total and evaluate is not None:
            metrics |= evaluate()
        run.log(step, metrics)
        run.progress(step)
        if run.checkpoint_due(step) or step == total:
            save_policy_checkpoint(run, step, setup.policy, setup.optimizer)
    return total


def main(args: Args) -> None:
    if not args.resume:
        args.total_timesteps = args.epochs * math.ceil(args.trajectories / args.batch_size)  # at most; see below
    run = Run(args, agent_file=__file__)
    args = run.args  # on --resume, the saved run's arguments: its data is rebuilt from them
    family = args.task_family()
    episodes = expert_episodes(family, args.trajectories, args.seed, args.crash_first, args.silent_mistake)
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
        with_reference=False,
    )
    policy, tokenizer = setup.policy, setup.tokenizer
    sequences, masks = sft_dataset(episodes, tokenizer, args.max_tokens)
    progress = WorkProgress(bar=args.progress_bar)
    successes = sum(reward >= 1.0 for _, reward in episodes)
    print(f"SFT data: {len(sequences)} traces kept of {len(episodes)} ({successes} successful)")
    total = supervised_steps(
        run,
        setup,
        sequences,
        masks,
        batch_size=args.batch_size,
        epochs=args.epochs,
        seed=args.seed,
        learning_rate=args.learning_rate,
        micro_batch_size=args.micro_batch_size,
        max_grad_norm=args.max_grad_norm,
        precision=args.precision,
        eval_every=args.eval_every,
        evaluate=lambda: evaluate_held_out(
            policy, tokenizer, family, args.eval_episodes, args.eval_settings(), progress=progress
        ),
        progress=progress,
    )
    release_training_state(setup)
    finish(
        run,
        policy,
        tokenizer,
        family,
        total,
        eval_episodes=args.eval_episodes,
        eval_settings=args.eval_settings(),
        save_model=args.save_model,
        progress=progress,
    )


if __name__ == "__main__":
    cli_args = tyro.cli(Args)
    cli_args.validate()
    main(cli_args)
