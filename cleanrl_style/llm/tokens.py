"""Token-level mechanics of training a language-model policy: log-probabilities of chosen tokens,
and one optimizer step of any per-token loss over many sequences.

The losses themselves (GRPO's clipped objective, RCTP's cross-entropy, TurnSight's modulated
advantages) are the algorithms and live in the agent files; they are functions of per-token
log-probabilities that :func:`gradient_step` calls micro-batch by micro-batch.

Shapes: a batch of B sequences padded on the right to length T. ``mask`` (B, T) is True at the
tokens that are trained on (the policy's own tokens); a log-probability at position t is that of
token t given tokens < t (position 0 never has one).

    batch = pad_batch([r.tokens for r in rollouts], [r.policy_mask for r in rollouts], pad_id)
    logp = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.mask)   # (B, T)
    ref = batched_logprobs(reference, sequences, masks, pad_id, micro_batch_size=4)   # no gradient, one tensor each
    stats = gradient_step(model, optimizer, sequences, masks, pad_id, my_token_loss,
                          per_token={"advantages": token_advantages}, micro_batch_size=4)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils.checkpoint

from cleanrl_style.llm.decoder import MIN_SHARED_PREFIX, scoring_prefix_length, shared_prefix_hidden, shared_prefix_supported
from cleanrl_style.llm.model import autocast, unwrap
from cleanrl_style.llm.progress import WorkProgress


@dataclass
class TokenBatch:
    """Right-padded token ids (B, T), attention mask (B, T) and trained-token mask (B, T, bool)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    mask: torch.Tensor


def pad_batch(
    sequences: Sequence[Sequence[int]], masks: Sequence[Sequence[bool]], pad_id: int, device: torch.device | str = "cpu"
) -> TokenBatch:
    """Right-pad token id lists and their masks into tensors."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.bool)
    for i, (seq, m) in enumerate(zip(sequences, masks)):
        ids[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        attention[i, : len(seq)] = 1
        mask[i, : len(m)] = torch.tensor(m, dtype=torch.bool)
    mask[:, 0] = False  # the first token has no prediction
    return TokenBatch(ids.to(device), attention.to(device), mask.to(device))


def token_logprobs(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, mask: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """log pi(token_t | tokens_<t) at the masked positions, 0 elsewhere; (B, T) float32.

    The vocabulary projection is applied only at the masked positions: a full (B, T, vocab) logit
    tensor would dominate memory for long tool-use conversations. Where the rows start with the
    same tokens (a group's prompt, the system prompt and tool schemas of a batch), a Llama-family
    model runs that prefix once instead of once per row (``decoder.shared_prefix_hidden``; at least
    ``MIN_SHARED_PREFIX`` tokens, ending before the first scored token's predicting column).
    """
    base = unwrap(model)
    prefix = scoring_prefix_length(input_ids, attention_mask, mask) if shared_prefix_supported(base) else 0
    if prefix < MIN_SHARED_PREFIX:
        prefix = 0
        hidden = base.get_decoder()(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    else:
        hidden = shared_prefix_hidden(base, input_ids, attention_mask, prefix)
    # Columns prefix.. of the batch; no scored token is predicted from inside the prefix.
    predicts = mask[:, prefix + 1 :]  # hidden state at t-1 predicts token t
    chosen = chosen_logprobs(
        base.get_output_embeddings(), hidden[:, :-1][predicts], input_ids[:, prefix + 1 :][predicts], temperature
    )
    shifted = F.pad(predicts, (prefix + 1, 0), value=False)
    return torch.zeros(mask.shape, dtype=chosen.dtype, device=chosen.device).masked_scatter(shifted, chosen)


LOGIT_CHUNK = 512
"""scored tokens per vocabulary projection in ``chosen_logprobs``"""


def _chosen(head: Any, hidden: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = head(hidden).float() / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def chosen_logprobs(head: Any, hidden: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(head(hidden) / temperature) at ``targets``, for hidden states (n, hidden) and
    target ids (n,); (n,) float32.

    The logits of n scored tokens take n x vocabulary floats (SmolLM2: 197 KB a token), and the
    log-softmax and its gradient as much again each (one 4,096-token episode with 1,873 scored
    tokens: its pass peaks 0.59 GiB lower chunked, ``benchmarks/llm_sequence_cost.py``). Past
    ``LOGIT_CHUNK`` tokens they are computed a chunk at a time, and under gradient each
    chunk is recomputed in the backward pass (non-reentrant checkpointing) instead of kept, so at
    most one chunk's logits exist at once. Each row's value is the same computation either way."""
    if len(targets) <= LOGIT_CHUNK:
        return _chosen(head, hidden, targets, temperature)
    parts = []
    for start in range(0, len(targets), LOGIT_CHUNK):
        h, t = hidden[start : start + LOGIT_CHUNK], targets[start : start + LOGIT_CHUNK]
        if torch.is_grad_enabled() and h.requires_grad:
            parts.append(torch.utils.checkpoint.checkpoint(_chosen, head, h, t, temperature, use_reentrant=False))
        else:
            parts.append(_chosen(head, h, t, temperature))
    return torch.cat(parts)


def prefix_order(sequences: Sequence[Sequence[int]]) -> list[int]:
    """Indices of ``sequences`` in lexicographic order of their tokens: micro-batches cut from this
    order put sequences that start alike together, so their shared prefix (``token_logprobs``) is
    longer. Sums over micro-batches do not depend on the order, apart from rounding."""
    return sorted(range(len(sequences)), key=lambda i: tuple(sequences[i]))


MAX_PADDING_RATIO = 2.0
"""``micro_batches`` closes a micro-batch early rather than let its padded size (rows x longest
row) pass this multiple of its real tokens."""


def micro_batches(order: Sequence[int], lengths: Sequence[int], max_rows: int) -> list[list[int]]:
    """Consecutive cuts of ``order`` (``prefix_order``) of at most ``max_rows`` sequences, each
    closed early where the next sequence would take its padded size past ``MAX_PADDING_RATIO``
    times its real tokens. Every row of a micro-batch is padded to its longest, and attention costs
    the square of that width: one 4,096-token episode cut in with three of 600 tokens makes all four
    rows 4,096 wide. Sums over micro-batches do not depend on the cut, apart from rounding."""
    if max_rows < 1:
        raise ValueError(f"micro_batch_size must be at least 1, got {max_rows}")
    batches: list[list[int]] = []
    current: list[int] = []
    longest = real = 0
    for i in order:
        n = lengths[i]
        if current and (len(current) == max_rows or (len(current) + 1) * max(longest, n) > MAX_PADDING_RATIO * (real + n)):
            batches.append(current)
            current, longest, real = [], 0, 0
        current.append(i)
        longest, real = max(longest, n), real + n
    if current:
        batches.append(current)
    return batches


def masked_mean_per_sequence(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over each sequence's masked tokens; (B,)."""
    return (values * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)


@torch.no_grad()
def batched_logprobs(
    model: Any,
    sequences: Sequence[Sequence[int]],
    masks: Sequence[Sequence[bool]],
    pad_id: int,
    micro_batch_size: int,
    temperature: float = 1.0,
    precision: str = "fp32",
    progress: WorkProgress | None = None,
    stage_name: str = "log-probs",
) -> list[torch.Tensor]:
    """``token_logprobs`` for many sequences, micro-batched (``micro_batches``), without
    gradient; one (len_i,) float32 tensor each, in the order of ``sequences``."""
    device = next(model.parameters()).device
    out: list[torch.Tensor] = [torch.empty(0)] * len(sequences)
    cuts = micro_batches(prefix_order(sequences), [len(s) for s in sequences], micro_batch_size)
    with (progress or WorkProgress(enabled=False)).stage(stage_name, total=len(cuts), unit="micro-batch") as stage:
        for k, idx in enumerate(cuts, 1):
            batch = pad_batch([sequences[i] for i in idx], [masks[i] for i in idx], pad_id, device)
            with autocast(precision, device):
                logp = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.mask, temperature)
            for row, i in enumerate(idx):
                out[i] = logp[row, : len(sequences[i])].float().cpu()
            stage.update(k)
    return out


TokenLoss = Callable[[torch.Tensor, dict[str, torch.Tensor]], tuple[torch.Tensor, dict[str, torch.Tensor]]]
"""``(logp, extras) -> (loss, statistics)``: ``logp`` (B, T) with gradient; ``extras`` maps each
name of ``gradient_step``'s ``per_token`` to its (B, T) padded tensor; ``loss`` is (B, T) per
token; each statistic (B, T) is averaged over the trained tokens for the log."""

AGGREGATIONS = ("sequence", "token")


def gradient_step(
    model: Any,
    optimizer: torch.optim.Optimizer,
    sequences: Sequence[Sequence[int]],
    masks: Sequence[Sequence[bool]],
    pad_id: int,
    loss_fn: TokenLoss,
    *,
    per_token: dict[str, Sequence[torch.Tensor]] | None = None,
    micro_batch_size: int = 4,
    temperature: float = 1.0,
    max_grad_norm: float = 1.0,
    aggregation: str = "sequence",
    precision: str = "fp32",
    progress: WorkProgress | None = None,
) -> dict[str, float]:
    """One optimizer step of a per-token loss over all sequences, gradients accumulated over
    micro-batches (``micro_batches``).

    Args:
        sequences, masks: Token ids and trained-token masks, one list each per sequence.
        loss_fn: The algorithm's per-token loss (see ``TokenLoss``).
        per_token: Named per-token inputs of the loss (advantages, old or reference log-probs), one
            (len_i,) tensor per sequence; padded like the batch and passed to ``loss_fn``.
        temperature: Log-probabilities are those of ``softmax(logits / temperature)``.
        max_grad_norm: Global gradient-norm clip before the step.
        aggregation: ``sequence``: mean over each sequence's trained tokens, then over sequences
            (GRPO); ``token``: mean over every trained token of the batch.
        precision: ``fp32``, or ``bf16`` autocast (float32 weights, gradients and optimizer state).

    Returns:
        ``loss`` (the batch's), each statistic's mean over trained tokens, and ``grad_norm``.
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    per_token = per_token or {}
    device = next(model.parameters()).device
    model.train()
    optimizer.zero_grad(set_to_none=True)
    total_tokens = max(sum(sum(m[1:]) for m in masks), 1)
    loss_sum, sums = 0.0, dict[str, float]()
    cuts = micro_batches(prefix_order(sequences), [len(s) for s in sequences], micro_batch_size)
    with (progress or WorkProgress(enabled=False)).stage("update", total=len(cuts), unit="micro-batch") as stage:
        for k, idx in enumerate(cuts, 1):
            batch = pad_batch([sequences[i] for i in idx], [masks[i] for i in idx], pad_id, device)
            width = batch.input_ids.shape[1]
            extras = {
                name: torch.stack([F.pad(values[i].float(), (0, width - len(values[i]))) for i in idx]).to(device)
                for name, values in per_token.items()
            }
            with autocast(precision, device):
                logp = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.mask, temperature)
            loss_tokens, stats = loss_fn(logp.float(), extras)
            m = batch.mask.float()
            if aggregation == "sequence":
                loss = masked_mean_per_sequence(loss_tokens, m).sum() / len(sequences)
            else:
                loss = (loss_tokens * m).sum() / total_tokens
            loss.backward()
            loss_sum += loss.item()
            for name, values in stats.items():
                sums[name] = sums.get(name, 0.0) + float((values.detach() * m).sum())
            stage.update(k)
    grad_norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    return {"loss": loss_sum, **{name: value / total_tokens for name, value in sums.items()}, "grad_norm": float(grad_norm)}
