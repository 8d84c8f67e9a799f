"""Setting up, checkpointing and exporting a language-model policy for the LLM agents.

    policy, tokenizer, reference, optimizer, start = build_policy(args, run)      # restores --resume
    ref = reference_logprobs(policy, reference, sequences, masks, tokenizer.pad_token_id, 4)
    save_policy_checkpoint(run, iteration, policy, optimizer)
    export_model(run, policy, tokenizer)         # runs/<run>/model: a folder --model accepts

The reference is the model the run started from (the initial policy for GRPO and TurnSight's
teacher, the RCTP model for RC-GRPO): a frozen copy, or with LoRA the base model itself with the
adapters switched off (no second copy in memory). On resume it is rebuilt from ``--model``, and
only the trained weights and the optimizer come from the checkpoint.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from typing import Any

import torch

from cleanrl_style.llm_losses import batched_logprobs
from cleanrl_style.llm_model import add_lora, add_special_tokens, default_dtype, load_causal_lm, save_model_folder


def trainable_state(model: Any) -> dict[str, torch.Tensor]:
    """The weights being trained: LoRA adapters (and trainable token rows) only, or the whole model."""
    if hasattr(model, "peft_config"):
        names = {n for n, p in model.named_parameters() if p.requires_grad}
        return {k: v for k, v in model.state_dict().items() if k in names}
    return model.state_dict()


def build_policy(args: Any, run: Any, special_tokens: Sequence[str] = ()) -> tuple[Any, Any, Any, torch.optim.Optimizer, int]:
    """Load ``args.model``, add ``special_tokens``, wrap with LoRA if asked, make the reference and the optimizer.

    Returns ``(policy, tokenizer, reference, optimizer, start_iteration)``; ``reference`` is None
    when LoRA provides it (adapters disabled). A ``run.checkpoint`` is restored into policy and optimizer.
    """
    dtype = default_dtype(args.device)
    policy, tokenizer = load_causal_lm(args.model or None, device=args.device, dtype=dtype)
    token_ids = add_special_tokens(policy, tokenizer, list(special_tokens)) if special_tokens else []
    policy.generation_config.pad_token_id = tokenizer.pad_token_id
    reference = None
    if args.lora_rank > 0:
        policy = add_lora(policy, args.lora_rank, args.lora_alpha, trainable_token_ids=token_ids or None)
    else:
        reference = copy.deepcopy(policy).eval().requires_grad_(False)
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.learning_rate, weight_decay=args.weight_decay)
    start_iteration = 1
    if run.checkpoint is not None:
        missing = policy.load_state_dict(run.checkpoint["policy"], strict=False)
        if args.lora_rank == 0 and (missing.missing_keys or missing.unexpected_keys):
            raise RuntimeError(f"checkpoint does not match the model: {missing}")
        optimizer.load_state_dict(run.checkpoint["optimizer"])
        start_iteration = int(run.checkpoint["iteration"]) + 1
    policy.eval()
    return policy, tokenizer, reference, optimizer, start_iteration


def reference_logprobs(
    policy: Any,
    reference: Any,
    sequences: Sequence[Sequence[int]],
    masks: Sequence[Sequence[bool]],
    pad_id: int,
    micro_batch_size: int,
    temperature: float = 1.0,
) -> list[torch.Tensor]:
    """Per-token log-probs under the reference model (``batched_logprobs`` of the frozen copy or the adapter-free base)."""
    if reference is not None:
        return batched_logprobs(reference, sequences, masks, pad_id, micro_batch_size, temperature)
    with policy.disable_adapter():
        return batched_logprobs(policy, sequences, masks, pad_id, micro_batch_size, temperature)


def save_policy_checkpoint(run: Any, iteration: int, policy: Any, optimizer: torch.optim.Optimizer, **extra: Any) -> None:
    run.save(iteration, iteration=iteration, policy=trainable_state(policy), optimizer=optimizer.state_dict(), **extra)


def export_model(run: Any, policy: Any, tokenizer: Any) -> None:
    """Write ``<run>/model``, an ordinary transformers folder (LoRA merged) for ``--model`` of a later stage."""
    save_model_folder(policy, tokenizer, run.dir / "model")


def sample_groups(task_ids: Sequence[int], num_groups: int, seed: int, iteration: int) -> list[int]:
    """``num_groups`` distinct training tasks for an iteration.

    A pure function of (seed, iteration), so a resumed run draws the same."""
    rng = random.Random(seed * 1_000_003 + iteration)
    return rng.sample(list(task_ids), min(num_groups, len(task_ids)))
