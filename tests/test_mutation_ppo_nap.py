"""PPO's GAE and clipped objective by hand, at the points where a sign, a constant or an operator
would show (mutation tests).

The agent is loaded as the module ``agents.ppo_nap``, the name mutmut gives the mutants of
``agents/ppo_nap.py`` (CONTRIBUTING, "Mutation testing"); ``tests/test_ppo_nap.py`` holds the
agent's own tests.
"""

import dataclasses
import math

import pytest
import torch
from agent_runs import load_agent

ppo = load_agent("ppo_nap")


def test_gae_by_hand_through_an_episode_end_and_a_final_bootstrap():
    # Two envs, three steps, gamma 0.9 and lambda 0.8 (so gamma * lambda = 0.72).
    # env 0: the observation after the last step ends its episode (next_done = 1): no bootstrap.
    # env 1: an episode ends before step 2 (dones[2] = 1), so step 1 does not see step 2's value.
    rewards = torch.tensor([[1.0, 0.5], [0.0, -1.0], [2.0, 1.0]])
    values = torch.tensor([[0.5, 0.2], [0.1, 0.3], [-0.2, 0.4]])
    dones = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    next_value, next_done = torch.tensor([0.3, -0.5]), torch.tensor([1.0, 0.0])
    advantages, returns = ppo.gae(rewards, values, dones, next_value, next_done, 0.9, 0.8)
    # env 0: delta_2 = 2 - (-0.2) = 2.2; delta_1 = 0 + 0.9 * (-0.2) - 0.1 = -0.28; delta_0 = 1 + 0.9 * 0.1 - 0.5 = 0.59
    a0_2 = 2.2
    a0_1 = -0.28 + 0.72 * a0_2
    a0_0 = 0.59 + 0.72 * a0_1
    # env 1: delta_2 = 1 + 0.9 * (-0.5) - 0.4 = 0.15; delta_1 = -1 - 0.3 = -1.3 (episode ended);
    # delta_0 = 0.5 + 0.9 * 0.3 - 0.2 = 0.57
    a1_2 = 0.15
    a1_1 = -1.3
    a1_0 = 0.57 + 0.72 * a1_1
    expected = [[a0_0, a1_0], [a0_1, a1_1], [a0_2, a1_2]]
    assert advantages.tolist() == [pytest.approx(row, rel=1e-6) for row in expected]
    assert returns.tolist() == [pytest.approx(row, rel=1e-6) for row in (torch.tensor(expected) + values).tolist()]


def test_gae_with_lambda_one_is_the_discounted_return_minus_the_value():
    rewards = torch.tensor([[1.0], [2.0], [3.0], [4.0]])
    values = torch.tensor([[0.5], [-1.0], [2.0], [0.25]])
    advantages, returns = ppo.gae(rewards, values, torch.zeros(4, 1), torch.tensor([10.0]), torch.zeros(1), 0.5, 1.0)
    g3 = 4.0 + 0.5 * 10.0
    g2 = 3.0 + 0.5 * g3
    g1 = 2.0 + 0.5 * g2
    g0 = 1.0 + 0.5 * g1
    assert returns.flatten().tolist() == pytest.approx([g0, g1, g2, g3], rel=1e-6)
    assert advantages.flatten().tolist() == pytest.approx([g0 - 0.5, g1 + 1.0, g2 - 2.0, g3 - 0.25], rel=1e-6)


def args(**overrides):
    base = dict(clip_coef=0.2, norm_adv=False, clip_vloss=False, ent_coef=0.0, vf_coef=0.5)
    return dataclasses.replace(ppo.Args(), **(base | overrides))


def objective(ratio, advantages, a, entropy=None, newvalue=None, returns=None, old_values=None):
    old_logp = torch.tensor([-1.0, -0.5, -2.0, 0.3, -0.7])
    n = len(ratio)
    zeros = torch.zeros(n)
    return ppo.ppo_objective(
        old_logp[:n] + torch.tensor(ratio).log(),
        old_logp[:n],
        zeros if entropy is None else entropy,
        zeros if newvalue is None else newvalue,
        torch.tensor(advantages),
        zeros if returns is None else returns,
        zeros if old_values is None else old_values,
        a,
    )


RATIOS = [1.5, 1.5, 0.7, 0.7, 1.1]
ADVANTAGES = [1.0, -1.0, 2.0, -2.0, 0.5]


def test_the_clipped_surrogate_by_hand():
    # per sample max(-A r, -A clip(r, 0.8, 1.2)): -1.2, 1.5, -1.4, 1.6, -0.55
    _, pg_loss, *_ = objective(RATIOS, ADVANTAGES, args())
    assert pg_loss.item() == pytest.approx((-1.2 + 1.5 - 1.4 + 1.6 - 0.55) / 5, rel=1e-5)


def test_the_clipped_surrogate_with_normalized_advantages_by_hand():
    # mean 0.1, deviations 0.9, -1.1, 1.9, -2.1, 0.4; unbiased std sqrt(10.2 / 4)
    std = math.sqrt(10.2 / 4)
    _, pg_loss, *_ = objective(RATIOS, ADVANTAGES, args(norm_adv=True))
    per_sample = [-0.9 * 1.2, 1.1 * 1.5, -1.9 * 0.7, 2.1 * 0.8, -0.4 * 1.1]
    assert pg_loss.item() == pytest.approx(sum(per_sample) / 5 / std, rel=1e-5)


def test_the_diagnostics_by_hand():
    _, _, _, _, old_approx_kl, approx_kl, clipfrac = objective(RATIOS, ADVANTAGES, args(clip_coef=0.25))
    logr = [math.log(r) for r in RATIOS]
    assert old_approx_kl.item() == pytest.approx(-sum(logr) / 5, rel=1e-5)
    assert approx_kl.item() == pytest.approx(sum(r - 1 - lr for r, lr in zip(RATIOS, logr)) / 5, rel=1e-5)
    assert clipfrac.item() == pytest.approx(4 / 5)  # 1.1 is inside [0.75, 1.25]; 0.7 and 1.5 are not


def test_a_ratio_exactly_at_the_clip_edge_is_not_counted_as_clipped():
    old_logp = torch.tensor(-1.0)  # objective()'s first old log-prob: the float32 ratio the objective computes
    ratio = ((old_logp + torch.tensor(1.25).log()) - old_logp).exp()
    edge = (ratio - 1.0).abs().item()
    *_, clipfrac = objective([1.25, 2.0], [1.0, 1.0], args(clip_coef=edge))
    assert clipfrac.item() == 0.5


def test_advantages_with_almost_no_spread_are_damped_not_amplified_or_flipped():
    # std = sqrt(2) * 1e-9, far below the 1e-8 that guards the division
    a = 1e-9 / (math.sqrt(2) * 1e-9 + 1e-8)
    _, pg_loss, *_ = objective([1.1, 0.9], [1e-9, -1e-9], args(norm_adv=True))
    assert pg_loss.item() == pytest.approx((-a * 1.1 + a * 0.9) / 2, rel=1e-4)


def test_the_value_loss_clipped_and_not_by_hand():
    # the value moves by +0.5, +1.5, -0.5, -0.5 from 0.5; the clip keeps it within 0.2 of it
    newvalue, old_values = torch.tensor([1.0, 2.0, 0.0, 0.0]), torch.full((4,), 0.5)
    returns = torch.tensor([2.0, 0.0, 1.0, -1.0])
    kwargs = dict(newvalue=newvalue, returns=returns, old_values=old_values)
    # unclipped errors 1, 4, 1, 1; clipped values 0.7, 0.7, 0.3, 0.3 -> errors 1.69, 0.49, 0.49, 1.69
    _, _, v_clipped, *_ = objective([1.0] * 4, [0.0] * 4, args(clip_vloss=True), **kwargs)
    assert v_clipped.item() == pytest.approx(0.5 * (1.69 + 4.0 + 1.0 + 1.69) / 4, rel=1e-5)
    _, _, v_plain, *_ = objective([1.0] * 4, [0.0] * 4, args(clip_vloss=False), **kwargs)
    assert v_plain.item() == pytest.approx(0.5 * 7.0 / 4, rel=1e-5)


def test_the_total_loss_weighs_the_three_terms():
    entropy = torch.tensor([1.5, 2.5, 2.0, 3.0, 1.0])
    kwargs = dict(entropy=entropy, newvalue=torch.full((5,), 2.0), returns=torch.zeros(5))
    loss, pg_loss, v_loss, entropy_loss, *_ = objective(RATIOS, ADVANTAGES, args(ent_coef=0.1, vf_coef=0.25), **kwargs)
    assert entropy_loss.item() == pytest.approx(2.0) and v_loss.item() == pytest.approx(2.0)
    assert loss.item() == pytest.approx(pg_loss.item() - 0.1 * 2.0 + 0.25 * 2.0, rel=1e-5)


def test_the_loss_gradient_follows_the_advantage_sign_and_stops_at_the_clip():
    # d loss / d log-prob: -A r / n inside the clip range, 0 where the clipped term is the maximum
    logp = torch.tensor([1.5, 1.5, 0.7, 0.7, 1.1]).log().requires_grad_()
    _, pg_loss, *_ = ppo.ppo_objective(
        logp, torch.zeros(5), torch.zeros(5), torch.zeros(5), torch.tensor(ADVANTAGES), torch.zeros(5), torch.zeros(5), args()
    )
    pg_loss.backward()
    assert logp.grad.tolist() == pytest.approx([0.0, 1.5 / 5, -1.4 / 5, 0.0, -0.55 / 5], rel=1e-5)
