"""RC-GRPO's reward tokens and TurnSight's advantage modulation, on hand-made inputs and a tiny model."""

from __future__ import annotations

import random

import pytest
import torch

pytest.importorskip("transformers")

import rc_grpo  # noqa: E402
import turnsight  # noqa: E402
from llm_tiny_model import build_tiny_model, build_tokenizer  # noqa: E402

from cleanrl_style.llm_model import add_special_tokens  # noqa: E402
from cleanrl_style.llm_rollout import collect_rollouts, encode  # noqa: E402
from envs.text import TaskSet  # noqa: E402

HIGH, LOW = rc_grpo.HIGH_REWARD, rc_grpo.LOW_REWARD


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def tasks():
    return TaskSet(num_tasks=60, seed=0, suite_groups=[("bank",)], variants=("base",), split="train")


# ---- RC-GRPO ------------------------------------------------------------------------------------------


def test_reward_tokens_are_added_as_single_special_tokens():
    tokenizer = build_tokenizer()
    model = build_tiny_model(tokenizer)
    rows = model.get_input_embeddings().weight.shape[0]
    ids = add_special_tokens(model, tokenizer, [HIGH, LOW])
    assert len(set(ids)) == 2 and min(ids) >= rows  # new rows after the old vocabulary
    assert model.get_input_embeddings().weight.shape[0] >= max(ids) + 1
    assert encode(tokenizer, f"Book it. {HIGH}")[-1] == ids[0]  # never split into pieces
    assert add_special_tokens(model, tokenizer, [HIGH, LOW]) == ids  # adding again changes nothing


def test_rctp_data_is_one_to_one_and_each_token_sits_in_the_first_user_message(tasks):
    tokenizer = build_tokenizer()  # a fresh one: adding tokens changes it
    model = build_tiny_model(tokenizer)
    high, low = add_special_tokens(model, tokenizer, [HIGH, LOW])
    args = rc_grpo.Args(rctp_trajectories=12, seed=0)
    sequences, masks, stats = rc_grpo.rctp_dataset(args, tokenizer, tasks)
    assert len(sequences) == stats["rctp/trajectories"] >= 4
    user_header = encode(tokenizer, "<|im_start|>user\n")
    labels = []
    for ids, mask in zip(sequences, masks):
        assert ids.count(high) + ids.count(low) == 1
        at = ids.index(high) if high in ids else ids.index(low)
        first_user = next(j for j in range(len(ids)) if ids[j : j + len(user_header)] == user_header)
        assert first_user < at < mask.index(True)  # inside the first user message, before any assistant token
        assert not mask[at]  # a conditioning token, never a target
        labels.append(ids[at] == high)
    assert sum(labels) == len(labels) - sum(labels)  # 1:1 high and low


def test_reward_token_draws_follow_p_high():
    for p in (0.0, 0.3, 0.5, 1.0):
        draws = rc_grpo.draw_reward_tokens(20_000, p, random.Random(0))
        assert abs(draws.count(HIGH) / len(draws) - p) < 0.015
        assert set(draws) <= {HIGH, LOW}


def test_each_rollout_is_conditioned_on_its_own_token(tasks):
    tokenizer = build_tokenizer()
    model = build_tiny_model(tokenizer)
    high, low = add_special_tokens(model, tokenizer, [HIGH, LOW])
    tokens = [HIGH, LOW, LOW]
    rollouts, _ = collect_rollouts(
        model,
        tokenizer,
        tasks,
        [tasks.task_ids[0]] * 3,
        first_user_suffixes=[" " + t for t in tokens],
        max_new_tokens=3,
        max_assistant_messages=1,
    )
    for r, token in zip(rollouts, tokens):
        wanted, other = (high, low) if token == HIGH else (low, high)
        assert other not in r.tokens
        at = r.tokens.index(wanted)
        assert not r.policy_mask[at] and at < r.turns[0].start
        assert r.messages[1]["content"].endswith(" " + token)


# ---- TurnSight ----------------------------------------------------------------------------------------


def test_horizon_selection_takes_the_majority_sign_and_its_largest_score():
    gaps = torch.tensor(
        [
            [0.2, -0.1, 0.5],  # majority +: 0.5 (d=3)
            [-0.3, -0.6, 0.9],  # majority -: -0.6 (d=2), although |0.9| is larger
            [0.1, 0.2, 0.3],  # all agree: 0.3
            [0.0, 0.1, -0.1],  # no majority: 0
            [-0.4, -0.2, -0.1],  # all agree: -0.4 (d=1)
        ]
    )
    chosen, index, agree = turnsight.select_horizon(gaps)
    torch.testing.assert_close(chosen, torch.tensor([0.5, -0.6, 0.3, 0.0, -0.4]))
    assert index.tolist() == [2, 1, 2, -1, 0]
    assert agree.tolist() == [False, False, True, False, True]


def test_sibling_normalization_has_zero_mean_unit_std():
    z = turnsight.normalize_over_siblings(torch.tensor([0.1, 0.4, -0.2, 0.7, 0.0]), eps=0.0)
    assert z.mean().abs() < 1e-6 and (z.std(unbiased=False) - 1).abs() < 1e-5
    assert (turnsight.normalize_over_siblings(torch.tensor([0.3]), 1e-6) == 0).all()


@pytest.mark.parametrize("eps_w,lam", [(0.5, 0.5), (0.9, 1.0), (0.2, 0.3)])
def test_weights_stay_in_band_and_never_flip_an_advantage(eps_w, lam):
    g = torch.Generator().manual_seed(0)
    advantages = torch.randn(10_000, generator=g) * 3
    advantages[:100] = 0.0
    z = torch.randn(10_000, generator=g) * 50  # far beyond the tanh's range
    w = turnsight.modulation_weights(torch.sign(advantages), z, eps_w)
    assert (w >= 1 - eps_w).all() and (w <= 1 + eps_w).all()
    modulated = turnsight.modulate(advantages, w, lam)
    assert (torch.sign(modulated) == torch.sign(advantages)).all()
    assert (modulated[:100] == 0).all()


def test_weights_reward_hindsight_agreement_and_sharpen_penalties():
    z = torch.tensor([2.0, -2.0])
    up = turnsight.modulation_weights(torch.tensor([1.0, 1.0]), z, 0.5)
    down = turnsight.modulation_weights(torch.tensor([-1.0, -1.0]), z, 0.5)
    assert up[0] > 1 > up[1]  # A > 0: turns the hindsight teacher endorses get more credit
    assert down[1] > 1 > down[0]  # A < 0: turns the teacher disowns get more of the blame


def test_hindsight_block_holds_turns_k_to_k_plus_d_minus_1(tokenizer, tasks):
    model = build_tiny_model(tokenizer)
    rollouts, _ = collect_rollouts(model, tokenizer, tasks, [tasks.task_ids[0]], max_new_tokens=3, max_assistant_messages=4)
    r = rollouts[0]
    for j, turn in enumerate(r.turns):
        turn.content = f"CALLS-{j}"
        turn.tool_outputs = [f"OUT-{j}"]
    args = turnsight.Args()
    text = turnsight.hindsight_message(r, 1, 2, args)["content"]
    assert "CALLS-1" in text and "OUT-1" in text and "CALLS-2" in text and "OUT-2" in text
    assert "CALLS-0" not in text and "CALLS-3" not in text
    assert "CALLS-3" in turnsight.hindsight_message(r, 3, 3, args)["content"]  # clipped at the last turn


def test_turnsight_advantages_modulate_each_turn_without_flipping_signs(tokenizer, tasks):
    policy, teacher = build_tiny_model(tokenizer, seed=0), build_tiny_model(tokenizer, seed=1)
    ids = [tasks.task_ids[0]] * 3 + [tasks.task_ids[1]] * 3
    rollouts, _ = collect_rollouts(policy, tokenizer, tasks, ids, max_new_tokens=4, max_assistant_messages=2)
    advantages = torch.tensor([1.0, -0.5, -0.5, 0.0, 0.0, 0.0])  # the second group has zero variance
    args = turnsight.Args(micro_batch_size=8)
    token_adv, stats = turnsight.turnsight_advantages(policy, teacher, tokenizer, rollouts, advantages, 2, args)
    for r, a, adv in zip(rollouts, advantages, token_adv):
        for turn in r.turns:
            span = adv[turn.start : turn.end]
            assert (span == span[0]).all()  # one value per turn
            assert torch.sign(span[0]) == torch.sign(a)
            if a != 0:
                assert 1 - args.lam * args.eps_w <= (span[0] / a).item() <= 1 + args.lam * args.eps_w
        outside = torch.ones(len(r.tokens), dtype=torch.bool)
        for turn in r.turns:
            outside[turn.start : turn.end] = False
        assert (adv[outside] == a).all()
    assert 1 - args.eps_w <= stats["turnsight/weight_min"] <= stats["turnsight/weight_max"] <= 1 + args.eps_w
    assert stats["turnsight/modulated_turns"] == sum(len(r.turns) for r in rollouts[:3])
