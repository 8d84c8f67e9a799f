"""Log-probabilities, group statistics and the PPO-clip update for language-model policies.

Shapes: a batch of B sequences padded on the right to length T. ``mask`` (B, T) is True at the
tokens that are trained on (the policy's own tokens); a log-probability at position t is that of
token t given tokens < t (position 0 never has one).

    batch = pad_batch([r.tokens for r in rollouts], [r.policy_mask for r in rollouts], pad_id)
    logp = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.mask)   # (B, T)
    advantages = group_advantages(rewards.view(num_groups, G))                        # (groups, G)
    stats = ppo_update(model, optimizer, sequences, token_advantages, ...)             # one optimizer step
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from cleanrl_style.llm_model import unwrap


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
    tensor would dominate memory for long tool-use conversations.
    """
    base = unwrap(model)
    hidden = base.get_decoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    predicts = mask[:, 1:]  # hidden state at t-1 predicts token t
    logits = base.get_output_embeddings()(hidden[:, :-1][predicts]).float() / temperature
    chosen = torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:][predicts].unsqueeze(-1)).squeeze(-1)
    shifted = F.pad(predicts, (1, 0), value=False)
    return torch.zeros(mask.shape, dtype=chosen.dtype, device=chosen.device).masked_scatter(shifted, chosen)


def group_advantages(rewards: torch.Tensor, eps: float = 1e-6, scale: bool = True) -> torch.Tensor:
    """GRPO's advantage: ``(R_j - mean_g) / (std_g + eps)`` within each group; ``rewards`` (groups, G).

    The std is the sample std (n-1) when G > 1. A group whose rewards are all equal gets advantage 0.
    """
    centered = rewards - rewards.mean(dim=1, keepdim=True)
    if not scale or rewards.shape[1] < 2:
        return centered
    return centered / (rewards.std(dim=1, keepdim=True) + eps)


def zero_variance_fraction(rewards: torch.Tensor) -> float:
    """Fraction of groups (rows of ``rewards``) whose rewards are all equal: their advantage is zero."""
    return float((rewards.max(dim=1).values == rewards.min(dim=1).values).float().mean())


def group_reward_std(rewards: torch.Tensor) -> float:
    """Mean over groups of the within-group reward std (population std)."""
    return float(rewards.std(dim=1, unbiased=False).mean()) if rewards.shape[1] > 1 else 0.0


def ppo_clip_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_coef: float,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token loss ``-min(ratio * A, clip(ratio, 1-c, 1+c) * A) + kl_coef * KL`` (B, T).

    KL to the reference uses the non-negative, unbiased estimator ``exp(d) - d - 1`` with
    ``d = log pi_ref - log pi``. Also returns per-token clip indicator and KL (no gradient).
    """
    log_ratio = logp - old_logp
    ratio = log_ratio.exp()
    surrogate = torch.min(ratio * advantages, ratio.clamp(1 - clip_coef, 1 + clip_coef) * advantages)
    loss = -surrogate
    kl = torch.zeros_like(logp)
    if ref_logp is not None:
        d = ref_logp - logp
        kl = d.exp() - d - 1
        if kl_coef:
            loss = loss + kl_coef * kl
    return loss, {
        "clipped": ((ratio - 1).abs() > clip_coef).float().detach(),
        "kl": kl.detach(),
        "approx_kl": ((ratio - 1) - log_ratio).detach(),
    }


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
) -> list[torch.Tensor]:
    """``token_logprobs`` for many sequences, micro-batched, without gradient; one (len_i,) tensor each."""
    device = next(model.parameters()).device
    out: list[torch.Tensor] = []
    for start in range(0, len(sequences), micro_batch_size):
        seqs, ms = sequences[start : start + micro_batch_size], masks[start : start + micro_batch_size]
        batch = pad_batch(seqs, ms, pad_id, device)
        logp = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.mask, temperature).cpu()
        out += [logp[i, : len(s)] for i, s in enumerate(seqs)]
    return out


def ppo_update(
    model: Any,
    optimizer: torch.optim.Optimizer,
    sequences: Sequence[Sequence[int]],
    masks: Sequence[Sequence[bool]],
    advantages: Sequence[torch.Tensor],
    pad_id: int,
    *,
    clip_coef: float = 0.2,
    kl_coef: float = 0.0,
    ref_logps: Sequence[torch.Tensor] | None = None,
    old_logps: Sequence[torch.Tensor] | None = None,
    micro_batch_size: int = 4,
    temperature: float = 1.0,
    max_grad_norm: float = 1.0,
    loss_aggregation: str = "sequence",
) -> dict[str, float]:
    """One optimizer step of the PPO-clip loss over all sequences (gradients accumulated over micro-batches).

    Args:
        sequences, masks: Token ids and policy-token masks of each rollout.
        advantages: One (len_i,) tensor per rollout (the episode advantage broadcast over its
            tokens, or per-turn values such as TurnSight's).
        ref_logps: Reference-model log-probs (for the KL term and its logging); None skips KL.
        old_logps: Log-probs of the policy that sampled the data. None: the data is on-policy for
            this step (one step per batch), so the old log-probs are the current ones, detached;
            the ratio is then 1 and the clip inactive, exactly as in GRPO with one update per batch.
        loss_aggregation: ``sequence`` (mean over each rollout's tokens, then over rollouts: the
            GRPO paper) or ``token`` (mean over all tokens of the batch).
    """
    if loss_aggregation not in ("sequence", "token"):
        raise ValueError(f"loss_aggregation must be 'sequence' or 'token', got {loss_aggregation!r}")
    device = next(model.parameters()).device
    model.train()
    optimizer.zero_grad(set_to_none=True)
    total_sequences = len(sequences)
    total_tokens = max(sum(sum(m[1:]) for m in masks), 1)
    sums = {"loss": 0.0, "clipfrac": 0.0, "kl": 0.0, "approx_kl": 0.0}
    for start in range(0, len(sequences), micro_batch_size):
        idx = range(start, min(start + micro_batch_size, len(sequences)))
        batch = pad_batch([sequences[i] for i in idx], [masks[i] for i in idx], pad_id, device)
        width = batch.input_ids.shape[1]

        def padded(tensors: Sequence[torch.Tensor] | None, idx=idx, width=width) -> torch.Tensor | None:
            if tensors is None:
                return None
            return torch.stack([F.pad(tensors[i].float(), (0, width - len(tensors[i]))) for i in idx]).to(device)

        logp = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.mask, temperature)
        old = padded(old_logps) if old_logps is not None else logp.detach()
        loss_tokens, info = ppo_clip_token_loss(logp, old, padded(advantages), clip_coef, padded(ref_logps), kl_coef)
        m = batch.mask.float()
        if loss_aggregation == "sequence":
            loss = masked_mean_per_sequence(loss_tokens, m).sum() / total_sequences
        else:
            loss = (loss_tokens * m).sum() / total_tokens
        loss.backward()
        sums["loss"] += loss.item()
        for key, name in (("clipfrac", "clipped"), ("kl", "kl"), ("approx_kl", "approx_kl")):
            sums[key] += float((info[name] * m).sum())
    grad_norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    return {
        "policy_loss": sums["loss"],
        "clipfrac": sums["clipfrac"] / total_tokens,
        "kl": sums["kl"] / total_tokens,
        "approx_kl": sums["approx_kl"] / total_tokens,
        "grad_norm": float(grad_norm),
    }


def sft_step(
    model: Any,
    optimizer: torch.optim.Optimizer,
    sequences: Sequence[Sequence[int]],
    masks: Sequence[Sequence[bool]],
    pad_id: int,
    micro_batch_size: int = 4,
    max_grad_norm: float = 1.0,
) -> dict[str, float]:
    """One optimizer step of cross-entropy on the masked tokens (mean over all masked tokens of the batch)."""
    device = next(model.parameters()).device
    model.train()
    optimizer.zero_grad(set_to_none=True)
    total_tokens = max(sum(sum(m[1:]) for m in masks), 1)
    loss_sum, correct = 0.0, 0.0
    for start in range(0, len(sequences), micro_batch_size):
        batch = pad_batch(sequences[start : start + micro_batch_size], masks[start : start + micro_batch_size], pad_id, device)
        logp = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.mask)
        loss = -(logp * batch.mask).sum() / total_tokens
        loss.backward()
        loss_sum += loss.item()
        correct += float(((logp > -0.6931) & batch.mask).sum())  # p > 1/2 means the argmax is the target
    grad_norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    return {"sft_loss": loss_sum, "token_accuracy_lower_bound": correct / total_tokens, "grad_norm": float(grad_norm)}
