"""The shared LLM plumbing: rollout tokens and their policy mask, log-probs, group statistics, PPO-clip.

A tiny randomly initialized Llama (tests/llm_tiny_model.py) stands in for a real model; a
scripted "model" that writes the expert's messages makes the token bookkeeping checkable exactly.
"""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("transformers")

from llm_tiny_model import build_tiny_model, build_tokenizer  # noqa: E402

from cleanrl_style.llm_losses import (
    group_advantages,
    group_reward_std,
    pad_batch,
    ppo_clip_token_loss,
    ppo_update,  # noqa: E402
    token_logprobs,
    zero_variance_fraction,
)
from cleanrl_style.llm_rollout import collect_rollouts, encode, stop_token_ids, tokenize_conversation  # noqa: E402
from envs.text import ExpertPolicy, TaskSet, ToolUseEnv, rollout  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def tiny(tokenizer):
    return build_tiny_model(tokenizer)


@pytest.fixture(scope="module")
def tasks():
    return TaskSet(num_tasks=60, seed=0, suite_groups=[("bank",)], variants=("base",), split="train")


class ScriptedLM(torch.nn.Module):
    """Answers the k-th assistant message of a conversation with ``responses[k]`` (token ids), like ``generate``."""

    def __init__(self, responses: list[list[int]], pad_id: int):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.responses, self.pad_id = responses, pad_id
        self.assistant_header: list[int] = []

    def forward(self, **_):  # the collector's shared-prefix prefill: nothing to cache for a script
        return None

    def generate(self, input_ids, attention_mask, max_new_tokens, **_):
        rows = []
        for ids, attention in zip(input_ids.tolist(), attention_mask.tolist()):
            ids = [t for t, a in zip(ids, attention) if a]
            h = self.assistant_header
            k = sum(ids[j : j + len(h)] == h for j in range(len(ids))) - 1  # the generation prompt is one of them
            rows.append(self.responses[k][:max_new_tokens])
        width = max(len(r) for r in rows)
        new = torch.tensor([r + [self.pad_id] * (width - len(r)) for r in rows])
        return torch.cat([input_ids, new], dim=1)


def expert_messages(tasks, task_id):
    return rollout(ToolUseEnv(tasks), ExpertPolicy(), options={"task_id": task_id}).messages


def scripted_model(tokenizer, tasks, task_id):
    messages = expert_messages(tasks, task_id)
    eos = tokenizer.eos_token_id
    responses = [encode(tokenizer, m["content"]) + [eos] for m in messages if m["role"] == "assistant"]
    model = ScriptedLM(responses, tokenizer.pad_token_id)
    model.assistant_header = encode(tokenizer, "<|im_start|>assistant\n")
    return model, messages


def test_policy_mask_covers_exactly_the_generated_assistant_tokens(tokenizer, tasks):
    task_id = tasks.task_ids[3]
    model, messages = scripted_model(tokenizer, tasks, task_id)
    rollouts, timing = collect_rollouts(model, tokenizer, tasks, [task_id, task_id], max_new_tokens=400)
    expected_ids, expected_mask = tokenize_conversation(tokenizer, messages)
    for r in rollouts:
        assert r.reward == 1.0 and r.messages == messages
        assert r.tokens == expected_ids and r.policy_mask == expected_mask
        policy_tokens = [t for t, m in zip(r.tokens, r.policy_mask) if m]
        assert policy_tokens == [t for response in model.responses for t in response]
        for turn, response in zip(r.turns, model.responses):  # each turn's span is exactly its generated message
            assert r.tokens[turn.start : turn.end] == response and all(r.policy_mask[turn.start : turn.end])
    assert timing["generated_tokens"] == 2 * sum(len(x) for x in model.responses)


def test_tokenize_conversation_masks_assistant_content_and_its_stop_token_only(tokenizer, tasks):
    messages = expert_messages(tasks, tasks.task_ids[0])
    ids, mask = tokenize_conversation(tokenizer, messages)
    assert tokenizer.decode(ids) == tokenizer.apply_chat_template(messages, tokenize=False)
    trained = tokenizer.decode([t for t, m in zip(ids, mask) if m])
    eos = tokenizer.decode([tokenizer.eos_token_id])
    assert trained == "".join(m["content"] + eos for m in messages if m["role"] == "assistant")


def test_batched_generation_matches_one_rollout_at_a_time(tokenizer, tiny, tasks):
    ids = [tasks.task_ids[0], tasks.task_ids[1], tasks.task_ids[2]]
    kwargs = dict(greedy=True, max_new_tokens=6, max_assistant_messages=2)
    together, _ = collect_rollouts(tiny, tokenizer, tasks, ids, **kwargs)
    alone, _ = collect_rollouts(tiny, tokenizer, tasks, ids, generation_batch_size=1, **kwargs)
    assert [r.tokens for r in together] == [r.tokens for r in alone]
    assert [r.policy_mask for r in together] == [r.policy_mask for r in alone]


def test_rollouts_are_cut_at_the_assistant_message_limit(tokenizer, tiny, tasks):
    rollouts, _ = collect_rollouts(tiny, tokenizer, tasks, [tasks.task_ids[0]] * 2, max_new_tokens=4, max_assistant_messages=1)
    for r in rollouts:
        assert len(r.turns) == 1 and r.done and (r.cut or r.reward in (0.0, 1.0))
        assert sum(r.policy_mask) == r.turns[0].end - r.turns[0].start <= 4


def test_token_logprobs_equal_a_full_softmax_at_masked_positions(tokenizer, tiny):
    batch = pad_batch(
        [[5, 6, 7, 8, 9], [10, 11, 12]], [[False, False, True, True, False], [False, True, True]], tokenizer.pad_token_id
    )
    with torch.no_grad():
        logp = token_logprobs(tiny, batch.input_ids, batch.attention_mask, batch.mask)
        full = torch.log_softmax(tiny(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.float(), -1)
    for b, t in batch.mask.nonzero().tolist():
        assert logp[b, t].item() == pytest.approx(full[b, t - 1, batch.input_ids[b, t]].item(), abs=1e-5)
    assert (logp[~batch.mask] == 0).all() and batch.mask.sum() == 4


def test_group_advantages_on_hand_made_rewards():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    adv = group_advantages(rewards, eps=0.0)
    s = math.sqrt(3) / 2  # (1 - 0.5) / sqrt(1/3): sample std of [1,0,0,1] is sqrt(1/3)
    torch.testing.assert_close(adv[0], torch.tensor([s, -s, -s, s]))
    assert (group_advantages(rewards)[1] == 0).all()  # equal rewards: no signal
    torch.testing.assert_close(adv[2], torch.tensor([-0.5, -0.5, -0.5, 1.5]))  # mean 0.25, sample std 0.5


def test_zero_variance_fraction_counts_groups_with_equal_rewards():
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 1.0]])
    assert zero_variance_fraction(rewards) == 0.5
    assert zero_variance_fraction(torch.zeros(3, 5)) == 1.0
    assert group_reward_std(torch.tensor([[1.0, 0.0], [1.0, 1.0]])) == pytest.approx(0.25)


def test_ppo_clip_loss_clips_the_ratio_and_kl_vanishes_at_the_reference():
    logp = torch.log(torch.tensor([[0.5, 0.5, 0.5]]))
    old = torch.log(torch.tensor([[0.25, 0.5, 1.0]]))  # ratios 2, 1, 0.5
    loss, info = ppo_clip_token_loss(logp, old, torch.tensor([[1.0, 1.0, -1.0]]), clip_coef=0.2, ref_logp=logp, kl_coef=0.1)
    torch.testing.assert_close(loss, torch.tensor([[-1.2, -1.0, 0.8]]))  # min(r A, clip(r) A), negated
    torch.testing.assert_close(info["clipped"], torch.tensor([[1.0, 0.0, 1.0]]))
    assert (info["kl"] == 0).all()
    _, info = ppo_clip_token_loss(logp, logp, torch.zeros(1, 3), 0.2, ref_logp=logp - 0.5)
    assert (info["kl"] > 0).all()  # exp(d) - d - 1 > 0 for d != 0


def test_ppo_update_raises_the_likelihood_of_positive_advantage_tokens(tokenizer):
    model = build_tiny_model(tokenizer, seed=3)
    sequences = [[5, 6, 7, 8, 9, 10], [5, 6, 7, 11, 12, 13]]
    masks = [[False, False, False, True, True, True]] * 2
    advantages = [torch.full((6,), 1.0), torch.full((6,), -1.0)]
    batch = pad_batch(sequences, masks, tokenizer.pad_token_id)
    with torch.no_grad():
        before = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.mask).sum(1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    stats = ppo_update(model, optimizer, sequences, masks, advantages, tokenizer.pad_token_id, micro_batch_size=1)
    with torch.no_grad():
        after = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.mask).sum(1)
    assert after[0] > before[0] and after[1] < before[1]
    assert stats["clipfrac"] == 0.0 and stats["grad_norm"] > 0


def test_stop_tokens_include_the_chat_end_of_turn(tokenizer):
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in stop_token_ids(tokenizer)


def test_shared_prefix_prefill_gives_the_same_greedy_tokens(tokenizer, tiny, tasks, monkeypatch):
    import cleanrl_style.llm_rollout as llm_rollout

    rows = [
        encode(tokenizer, text)
        for text in (
            "<|im_start|>system\nYou are a banker.<|im_end|>\n" * 3 + tail for tail in ("hello", "a longer second tail", "x")
        )
    ]
    assert llm_rollout._shared_prefix_length(rows) >= llm_rollout.MIN_SHARED_PREFIX
    assert llm_rollout._shared_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2  # one token of each row is left to feed
    kwargs = dict(max_new_tokens=5, temperature=1.0, top_p=1.0, greedy=True)
    shared = llm_rollout.generate_batch(tiny, tokenizer, rows, **kwargs)
    monkeypatch.setattr(llm_rollout, "MIN_SHARED_PREFIX", 10**9)  # plain left-padded batch
    plain = llm_rollout.generate_batch(tiny, tokenizer, rows, **kwargs)
    assert shared == plain and all(len(r) > 0 for r in shared)
