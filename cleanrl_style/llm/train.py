"""Setting up, checkpointing and exporting a language-model policy, and the loop helpers the LLM agents share.

    setup = build_policy(model="", device="cpu", learning_rate=1e-6, run=run)
    setup.policy, setup.tokenizer, setup.reference, setup.optimizer, setup.start_iteration
    ref = reference_logprobs(setup.policy, setup.reference, sequences, masks, pad_id, micro_batch_size=4)
    losses = policy_update(setup, sequences, masks, advantages, loss_fn, kl_coef=0.1, update_epochs=1,
                           micro_batch_size=4, max_grad_norm=1.0, aggregation="sequence", temperature=1.0, precision="fp32",
                           sampling_logp=generation_logprobs(rollouts, settings))
    save_policy_checkpoint(run, iteration, setup.policy, setup.optimizer)
    export_model(run, setup.policy, setup.tokenizer, step=iteration)    # runs/<run>/model: a folder --model accepts

The reference is the model the run started from (the initial policy for GRPO and TurnSight's
``--teacher initial``, the RCTP model for RC-GRPO): a frozen copy, or with LoRA the base model itself with the
adapters switched off (no second copy in memory). On resume it is rebuilt from ``--model``, and
only the trained weights and the optimizer come from the checkpoint. Weights and optimizer state
are always float32; ``bf16`` precision is autocast around the forward passes.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cleanrl_style.llm.model import add_lora, add_special_tokens, load_causal_lm, save_model_folder, unwrap
from cleanrl_style.llm.parking import ParkedModule, ParkedOptimizerState, resident
from cleanrl_style.llm.progress import WorkProgress
from cleanrl_style.llm.rollout import RolloutSettings, evaluate_held_out, rollout_stats
from cleanrl_style.llm.tokens import TokenLoss, batched_logprobs, gradient_step
from cleanrl_style.runs.checkpoint import CHECKPOINT_NAME, PREVIOUS_NAME, CheckpointError, load_checkpoint, save_checkpoint


@dataclass
class PolicySetup:
    """What ``build_policy`` returns: ``reference`` is None when LoRA provides it (adapters off),
    or when it was not asked for (``with_reference=False``); a ``ParkedModule`` when parked
    (read it through ``reference_logprobs`` or ``parking.resident``)."""

    policy: Any
    tokenizer: Any
    reference: Any
    optimizer: torch.optim.Optimizer
    start_iteration: int
    parked_state: ParkedOptimizerState | None = None


def trainable_state(model: Any) -> dict[str, torch.Tensor]:
    """The weights being trained: LoRA adapters (and trainable token rows) only, or the whole model."""
    if hasattr(model, "peft_config"):
        names = {n for n, p in model.named_parameters() if p.requires_grad}
        return {k: v for k, v in model.state_dict().items() if k in names}
    return model.state_dict()


MODEL_FOLDER = "model"
"""``<run>/model``: the exported model, and a finished full fine-tune's weights (``export_model``)"""
HELD_OUT_FILE = "held_out.csv"
"""each final held-out episode's outcome, one row per task (``rollout.HELD_OUT_COLUMNS``)"""
MMAP_THRESHOLD_BYTES = 1 << 20
PARKED_STATE_FILE = "optimizer_state.parked.pt"
"""a full fine-tune's AdamW moments between steps (``build_policy``'s ``park_dir``), removed at the end"""
PARKED_REFERENCE_FILE = "reference.parked.pt"
"""a full fine-tune's frozen reference between its passes, removed at the end"""


def return_freed_memory_to_the_system() -> bool:
    """Make glibc give large freed blocks back to the system; True where it took the setting.

    glibc serves allocations below its mmap threshold from the heap, and raises that threshold
    each time a large mapped block is freed, so after the first update the activations' tensors
    come from the heap and stay resident when freed: each iteration's generation and update then
    pile on what the last one left (SmolLM2, 8 episodes, GRPO: peak RSS 4.28 GB after the first
    update, 5.35 after the second). Fixing the threshold at 1 MB (``mallopt(M_MMAP_THRESHOLD)``,
    which also stops the adjustment) maps every larger tensor on its own and unmaps it when freed
    (3.16 and 3.52 GB). Nothing changes off glibc."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(-3, MMAP_THRESHOLD_BYTES))  # -3: M_MMAP_THRESHOLD in glibc's malloc.h


def enable_activation_checkpointing(model: Any) -> None:
    """Recompute each decoder layer in the backward pass (non-reentrant), under the name the installed
    transformers gives it (``activation_checkpointing_enable`` from 5.x, ``gradient_checkpointing_enable`` before)."""
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def build_policy(
    model: str,
    device: str,
    learning_rate: float,
    *,
    weight_decay: float = 0.0,
    lora_rank: int = 0,
    lora_alpha: float = 32.0,
    special_tokens: Sequence[str] = (),
    special_token_init: Mapping[str, str] | None = None,
    run: Any = None,
    with_reference: bool = True,
    gradient_checkpointing: bool = False,
    special_token_lr_scale: float = 1.0,
    park_dir: str | Path | None = None,
) -> PolicySetup:
    """Load ``model`` (empty: the offline SmolLM2), add ``special_tokens`` (a token named in
    ``special_token_init`` starts at the embedding of that text: ``add_special_tokens``), wrap with LoRA if
    ``lora_rank`` > 0, make the reference and an AdamW optimizer, and restore ``run.checkpoint``
    when ``run`` (a ``Run``) resumes one.

    ``gradient_checkpointing`` recomputes each decoder layer's activations in the backward pass
    instead of keeping them (transformers' ``gradient_checkpointing_enable``, non-reentrant).

    ``special_token_lr_scale`` trains the special tokens' embedding rows at that multiple of
    ``learning_rate`` (``scale_row_updates``; a full fine-tune only).

    ``with_reference=False`` skips the frozen copy of a fully trained model (a second model's
    memory) for a run that never reads the reference (no KL term); with LoRA the reference is the
    adapter-free base either way.

    ``park_dir`` (a full fine-tune only): keep AdamW's moments and the frozen reference in files
    there while no step or reference pass reads them (``parking``: ``PARKED_STATE_FILE`` and
    ``PARKED_REFERENCE_FILE``), instead of resident through generation and the backward pass.

    A finished full fine-tune's checkpoint holds no weights but names its model folder in
    ``run.dir`` (``export_model``); the weights are read from there.

    Raises:
        RuntimeError: the checkpoint's weights do not fit the model.
        CheckpointError: the checkpoint names a model folder that is not there.
        ValueError: ``special_token_lr_scale`` not positive, or other than 1 with LoRA or without special tokens.
    """
    if not special_token_lr_scale > 0:  # 0 would freeze the rows, a negative scale reverse their steps
        raise ValueError(
            f"special_token_lr_scale multiplies the learning rate and must be positive, got {special_token_lr_scale}"
        )
    if special_token_lr_scale != 1.0 and (lora_rank > 0 or not special_tokens):
        raise ValueError(
            "a learning-rate scale for the special tokens' rows needs special tokens and a full fine-tune "
            f"(got {len(special_tokens)} special tokens, LoRA rank {lora_rank}): leave the scale at 1, or train without LoRA"
        )
    return_freed_memory_to_the_system()
    policy, tokenizer = load_causal_lm(model or None, device=device, dtype=torch.float32)
    token_ids = add_special_tokens(policy, tokenizer, list(special_tokens), special_token_init) if special_tokens else []
    reference = None
    if lora_rank > 0:
        policy = add_lora(policy, lora_rank, lora_alpha, trainable_token_ids=token_ids or None)
    elif with_reference:
        reference = copy.deepcopy(policy).eval().requires_grad_(False)
        if park_dir is not None:
            reference = ParkedModule(reference, Path(park_dir) / PARKED_REFERENCE_FILE)
    if gradient_checkpointing:
        enable_activation_checkpointing(unwrap(policy))
    params = [p for p in policy.parameters() if p.requires_grad]
    # Fused: one kernel per parameter updates it and its moments in place. The single-tensor AdamW
    # allocates a temporary the size of each parameter (the embedding's 113 MB for SmolLM2): its
    # step peaked 216 MB higher and took 1.69x as long (benchmarks/llm_adamw_step.py).
    fused = params[0].device.type in ("cpu", "cuda") if params else None
    optimizer = torch.optim.AdamW(params, lr=learning_rate, weight_decay=weight_decay, fused=fused)
    if special_token_lr_scale != 1.0:
        scale_row_updates(optimizer, policy.get_input_embeddings().weight, token_ids, special_token_lr_scale)
    parked_state = None
    if park_dir is not None and lora_rank == 0:  # LoRA's moments are a few MB: nothing to gain
        parked_state = ParkedOptimizerState(optimizer, Path(park_dir) / PARKED_STATE_FILE)
    start_iteration = 1
    checkpoint = run.checkpoint if run is not None else None
    if checkpoint is not None:
        missing = policy.load_state_dict(policy_weights(checkpoint, run.dir), strict=False)
        if lora_rank == 0 and (missing.missing_keys or missing.unexpected_keys):
            raise RuntimeError(f"checkpoint does not match the model: {missing}")
        optimizer.load_state_dict(checkpoint["optimizer"])
        start_iteration = int(checkpoint["iteration"]) + 1
    policy.eval()
    return PolicySetup(policy, tokenizer, reference, optimizer, start_iteration, parked_state)


def scale_row_updates(optimizer: torch.optim.Optimizer, weight: torch.Tensor, rows: Sequence[int], scale: float) -> None:
    """Multiply every later ``optimizer.step()``'s change to ``weight[rows]`` by ``scale``.

    An AdamW step changes a weight by ``-lr * (weight_decay * w + m_hat / (sqrt(v_hat) + eps))``,
    which is proportional to ``lr``, so for AdamW this is exactly training those rows at ``scale * lr``
    (the moments do not depend on the rate). RC-GRPO uses it for the reward tokens' embedding rows:
    one epoch of 16 steps at lr 5e-5 moves each element by at most 8e-4, against the 0.1 its rows
    measure (SmolLM2), while prompt tuning trains embeddings at far higher rates."""
    index = torch.as_tensor(list(rows), dtype=torch.long)
    before: list[torch.Tensor] = []

    def keep(_optimizer: Any, _args: Any, _kwargs: Any) -> None:
        before.append(weight.detach()[index].clone())

    def scale_change(_optimizer: Any, _args: Any, _kwargs: Any) -> None:
        old = before.pop()
        with torch.no_grad():
            weight[index] = old + scale * (weight[index] - old)

    optimizer.register_step_pre_hook(keep)
    optimizer.register_step_post_hook(scale_change)


def release_training_state(setup: PolicySetup) -> None:
    """Free what only training needs, once a run has taken its last step and saved its checkpoint:
    AdamW's moments (1.08 GB for SmolLM2 trained in full; the checkpoint holds them), the gradients
    and the frozen reference (0.54 GB). The final evaluation then runs without them; a resumed run
    reads them back from the checkpoint and the model. Parked files are removed."""
    setup.optimizer.state.clear()
    if setup.parked_state is not None:
        setup.parked_state.discard()
    setup.policy.zero_grad(set_to_none=True)
    if isinstance(setup.reference, ParkedModule):
        setup.reference.discard()
    setup.reference = None


def peak_rss_gib() -> float:
    """The process's peak resident memory so far in GiB (2^30 bytes; ``getrusage``'s ``ru_maxrss``
    is KiB on Linux, bytes on macOS), logged as ``memory/peak_rss_gib``."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**30 if sys.platform == "darwin" else peak / 2**20


def reference_logprobs(
    policy: Any,
    reference: Any,
    sequences: Sequence[Sequence[int]],
    masks: Sequence[Sequence[bool]],
    pad_id: int,
    micro_batch_size: int,
    temperature: float = 1.0,
    precision: str = "fp32",
    progress: WorkProgress | None = None,
    stage_name: str = "reference log-probs",
) -> list[torch.Tensor]:
    """Per-token log-probs under the reference model (the frozen copy, or the adapter-free base)."""
    kwargs: dict[str, Any] = dict(temperature=temperature, precision=precision, progress=progress, stage_name=stage_name)
    if reference is not None:
        with resident(reference) as model:
            return batched_logprobs(model, sequences, masks, pad_id, micro_batch_size, **kwargs)
    with policy.disable_adapter():
        return batched_logprobs(policy, sequences, masks, pad_id, micro_batch_size, **kwargs)


def policy_weights(checkpoint: dict[str, Any], run_dir: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's policy state dict, read from the run's model folder when the checkpoint
    names that folder instead of holding the weights (``export_model``)."""
    weights = checkpoint["policy"]
    if not isinstance(weights, str):
        return weights
    folder = run_dir / weights
    if not (folder / "config.json").exists():
        raise CheckpointError(
            f"this checkpoint keeps its weights in the run's model folder {folder}, which is missing or incomplete: "
            "restore that folder (or start a new run)"
        )
    model, _ = load_causal_lm(str(folder), dtype=torch.float32)
    return model.state_dict()


def save_policy_checkpoint(run: Any, iteration: int, policy: Any, optimizer: torch.optim.Optimizer, **extra: Any) -> None:
    run.save(iteration, iteration=iteration, policy=trainable_state(policy), optimizer=optimizer.state_dict(), **extra)


def export_model(run: Any, policy: Any, tokenizer: Any, step: int) -> None:
    """Write ``<run>/model``, an ordinary transformers folder (LoRA merged) for ``--model`` of a later stage.

    For a full fine-tune the run's checkpoint then names that folder in place of its own copy of
    the weights (its optimizer state, step and RNG stay), and the previous checkpoint (another full
    copy) is removed, so a finished run keeps one copy of the model on disk; ``build_policy`` reads
    the weights back from the folder on resume; only a checkpoint of ``step``, the step the exported
    weights are from, is rewritten so. A LoRA run's checkpoint holds only the adapters and is left
    as it is.
    """
    folder = save_model_folder(policy, tokenizer, run.dir / MODEL_FOLDER)
    path = run.dir / CHECKPOINT_NAME
    if hasattr(policy, "peft_config") or not path.exists():
        return
    state = load_checkpoint(path, mmap=True)  # the weights left unread; the rest is copied over
    if isinstance(state["policy"], str) or state["global_step"] != step:
        return  # already pointing there, or from another step than these weights
    state["policy"] = folder.name
    save_checkpoint(path, state, keep_previous=False)
    # the checkpoint before it held a second full copy; the model folder is the weights now
    (run.dir / PREVIOUS_NAME).unlink(missing_ok=True)


def sample_groups(task_ids: Sequence[int], num_groups: int, seed: int, iteration: int) -> list[int]:
    """``num_groups`` distinct training tasks for an iteration.

    A pure function of (seed, iteration), so a resumed run draws the same."""
    rng = random.Random(seed * 1_000_003 + iteration)
    return rng.sample(list(task_ids), min(num_groups, len(task_ids)))


def iteration_seed(seed: int, iteration: int) -> int:
    """Seed of an iteration's environment resets and sampling (a resumed run draws the same)."""
    return seed * 1_000_003 + iteration * 1000


def group_reward_statistics(rewards: torch.Tensor) -> dict[str, float]:
    """For rewards shaped (groups, G): the fraction of groups whose rewards are all equal (their
    group-normalized advantage is zero, so they teach nothing) and the mean within-group std."""
    equal = rewards.max(dim=1).values == rewards.min(dim=1).values
    return {
        "charts/zero_variance_fraction": float(equal.float().mean()),
        "charts/group_reward_std": float(rewards.std(dim=1, unbiased=False).mean()) if rewards.shape[1] > 1 else 0.0,
    }


def rollout_metrics(rollouts: Sequence[Any], rewards: torch.Tensor, timing: dict[str, float]) -> dict[str, float]:
    """What every LLM agent logs about an iteration's rollouts (``charts/*``)."""
    stats = rollout_stats(rollouts)
    return {
        "charts/success_rate": stats["success_rate"],
        **group_reward_statistics(rewards),
        "charts/turns_per_episode": stats["turns_per_episode"],
        "charts/tool_errors_per_episode": stats["tool_errors_per_episode"],
        "charts/cut_fraction": stats["cut_fraction"],
        "charts/tokens_per_second": timing["tokens_per_second"],
        "charts/generated_tokens": timing["generated_tokens"],
        "memory/peak_rss_gib": peak_rss_gib(),
    }


def generation_logprobs(rollouts: Sequence[Any], settings: RolloutSettings) -> list[torch.Tensor] | None:
    """The sampling policy's log-probabilities for the loss's ratio, where generation does not
    reproduce the training forward: at ``bf16`` generation, each token's log-probability when it
    was sampled (``Rollout.sampling_logprobs``; 0 at tokens the policy did not sample, which the
    loss never reads). None at ``fp32`` generation, whose log-probabilities equal the loss's own
    (to 1e-4 nats), so that the ratio is 1 with one optimizer step.

    With them the ratio is pi_theta / pi_bf16 at every token, the importance weight from the
    policy that drew the token to the one trained, clipped at 1 +- c like any PPO ratio."""
    if settings.precision == "fp32":
        return None
    return [torch.tensor(r.sampling_logprobs, dtype=torch.float32) for r in rollouts]


def policy_update(
    setup: PolicySetup,
    sequences: Sequence[Sequence[int]],
    masks: Sequence[Sequence[bool]],
    advantages: Sequence[torch.Tensor],
    loss_fn: TokenLoss,
    *,
    kl_coef: float,
    update_epochs: int,
    micro_batch_size: int,
    max_grad_norm: float,
    aggregation: str,
    temperature: float,
    precision: str,
    progress: WorkProgress | None = None,
    sampling_logp: Sequence[torch.Tensor] | None = None,
) -> dict[str, float]:
    """The token-level optimization of the GRPO family for one batch, as ``losses/*`` metrics.

    ``advantages`` holds one (len_i,) tensor per sequence (the algorithm's credit); ``loss_fn`` reads
    them with the reference log-probs (computed when ``kl_coef`` > 0) and the sampling policy's
    log-probs ``old_logp``: ``sampling_logp`` when given (the generation-time log-probs of
    :func:`generation_logprobs`), else computed when ``update_epochs`` > 1 (with one epoch the
    ratio is 1). Then ``update_epochs`` gradient steps; the metrics are the last step's.
    """
    policy, pad_id = setup.policy, setup.tokenizer.pad_token_id
    per_token: dict[str, Sequence[torch.Tensor]] = {"advantages": advantages}
    common: dict[str, Any] = dict(temperature=temperature, precision=precision, progress=progress)
    if kl_coef > 0:
        per_token["ref_logp"] = reference_logprobs(
            policy, setup.reference, sequences, masks, pad_id, micro_batch_size, **common
        )
    if sampling_logp is not None:
        if [len(lp) for lp in sampling_logp] != [len(seq) for seq in sequences]:
            raise ValueError("sampling_logp needs one log-probability per token of each sequence")
        per_token["old_logp"] = sampling_logp
    elif update_epochs > 1:
        per_token["old_logp"] = batched_logprobs(policy, sequences, masks, pad_id, micro_batch_size, **common)
    update: dict[str, float] = {}
    for _ in range(update_epochs):
        update = gradient_step(
            policy,
            setup.optimizer,
            sequences,
            masks,
            pad_id,
            loss_fn,
            per_token=per_token,
            micro_batch_size=micro_batch_size,
            max_grad_norm=max_grad_norm,
            aggregation=aggregation,
            **common,
        )
    return {
        "losses/policy_loss": update["loss"],
        "losses/kl": update.get("kl", 0.0),
        "losses/clipfrac": update["clipfrac"],
        "losses/approx_kl": update["approx_kl"],
        "losses/grad_norm": update["grad_norm"],
    }


def finish(
    run: Any,
    policy: Any,
    tokenizer: Any,
    family: Any,
    final_step: int,
    *,
    eval_episodes: int,
    eval_settings: RolloutSettings,
    save_model: bool,
    first_user_suffix: str = "",
    progress: WorkProgress | None = None,
) -> None:
    """The end of an LLM run: held-out evaluation at ``final_step`` (if ``eval_episodes`` > 0; each
    episode's outcome also goes to ``runs/<run>/held_out.csv``), the
    exported model folder (if ``save_model`` and anything was trained), and closing the logs."""
    if eval_episodes > 0:
        if progress is not None:
            progress.prefix = "final"
        metrics = evaluate_held_out(
            policy,
            tokenizer,
            family,
            eval_episodes,
            eval_settings,
            first_user_suffix=first_user_suffix,
            progress=progress,
            record=run.dir / HELD_OUT_FILE,
            step=final_step,
        )
        run.log(final_step, metrics | {"memory/peak_rss_gib": peak_rss_gib()})
        suffix = f" (conditioned on {first_user_suffix.strip()})" if first_user_suffix else ""
        print(f"held-out success over {eval_episodes} tasks{suffix}: {metrics['charts/test_success_rate']:.3f}")
    if save_model and final_step > 0:
        export_model(run, policy, tokenizer, step=final_step)
    run.close()
