"""Symphony's formulas at the points where a sign, a constant or an operator would show (mutation tests).

The agent is loaded as the module ``agents.symphony``, the name mutmut gives the mutants of
``agents/symphony.py`` (CONTRIBUTING, "Mutation testing"); ``tests/test_symphony.py`` holds the
agent's own tests.
"""

import math

import pytest
import torch
from agent_runs import load_agent

sym = load_agent("symphony")


def test_rehse_and_rehae_by_hand():
    e = torch.tensor([-3.0, -0.5, 0.0, 0.5, 3.0])
    assert sym.rehse(e).tolist() == pytest.approx([x * math.tanh(x / 2) for x in e.tolist()], abs=1e-7)
    assert sym.rehae(e).tolist() == pytest.approx([abs(x) * math.tanh(x / 2) for x in e.tolist()], abs=1e-7)


def test_big_omega_by_hand_and_clamped_below_one():
    x = torch.tensor([-0.9, -0.5, 0.0, 0.3, 0.5])
    assert sym.big_omega(x).tolist() == pytest.approx([math.log((1 + v) / (1 - v)) for v in x.tolist()], rel=1e-5)
    at_one = sym.big_omega(torch.tensor([1.0, 2.0]))  # clamped to 1 - 1e-6
    assert at_one.tolist() == pytest.approx([math.log((2 - 1e-6) / 1e-6)] * 2, rel=1e-3)
    assert torch.isfinite(at_one).all()


def test_small_omega_by_hand():
    x = torch.tensor([0.0, 0.25, 0.5, 1.0])
    assert sym.small_omega(x).tolist() == pytest.approx([0.0, 0.25 * math.log(0.25), 0.5 * math.log(0.5), 0.0], abs=1e-7)


def test_swaddling_by_hand_as_a_batch_mean():
    scale, beta = torch.tensor([0.5, 0.8, 0.0]), torch.tensor([0.4, 0.7, 0.5])
    omega = lambda v: math.log((1 + v) / (1 - v))
    xlogx = lambda v: v * math.log(v) if v > 0 else 0.0
    terms = [omega(s ** (1 / b)) + b * xlogx(s) + omega(b**2) for s, b in zip(scale.tolist(), beta.tolist())]
    assert sym.swaddling(scale, beta).item() == pytest.approx(sum(terms) / 3, rel=1e-5)
    s, b = torch.tensor([0.5, 0.8], requires_grad=True), torch.tensor([0.4, 0.7], requires_grad=True)
    sym.swaddling(s, b).backward()
    # d/dB: omega(S) + 2B * 2 / (1 - B^4), halved by the mean; nothing through S^(1/B)
    expected = [(sv * math.log(sv) + 4 * bv / (1 - bv**4)) / 2 for sv, bv in ((0.5, 0.4), (0.8, 0.7))]
    assert b.grad.tolist() == pytest.approx(expected, rel=1e-5)


def test_node_weights_by_hand():
    for num in (1, 3, 5):
        w = [math.tanh((math.pi * (1 - n / num)) ** math.e) for n in range(num)]
        weights = sym.node_weights(num)
        assert weights.dtype == torch.float32
        assert weights.tolist() == pytest.approx([x / sum(w) for x in w], rel=1e-6)


def test_sorted_node_target_by_hand():
    nodes = torch.tensor([[3.0, 1.0, 2.0], [-1.0, 5.0, 0.0]])
    weights = torch.tensor([0.5, 0.3, 0.2])
    expected = [1 * 0.5 + 2 * 0.3 + 3 * 0.2, -1 * 0.5 + 0 * 0.3 + 5 * 0.2]
    assert sym.sorted_node_target(nodes, weights).tolist() == pytest.approx(expected, rel=1e-6)


def test_temporal_advantage_by_hand_with_its_floor_and_detached_baseline():
    q_next = torch.tensor([10.0, 4.0, -2.0, 0.001], requires_grad=True)
    q_bar, a, eps = torch.tensor([6.0, 6.0, 6.0, -0.001]), 0.25, 0.01
    advantage, q_t = sym.temporal_advantage(q_next, q_bar, a, eps)
    expected_qt = [a * qb + (1 - a) * q for q, qb in zip(q_next.tolist(), q_bar.tolist())]
    assert q_t.tolist() == pytest.approx(expected_qt, rel=1e-6)
    expected = [(q - t) / max(abs(t), eps) for q, t in zip(q_next.tolist(), expected_qt)]
    assert advantage.tolist() == pytest.approx(expected, rel=1e-5)
    assert not q_t.requires_grad
    advantage.sum().backward()
    # Q_T is detached: dA/dq' = 1 / max(|Q_T|, eps)
    assert q_next.grad.tolist() == pytest.approx([1 / max(abs(t), eps) for t in expected_qt], rel=1e-5)


def test_node_weights_are_computed_in_float64_and_rounded_once():
    # float32 arithmetic would miss these by up to 3e-8.
    for num in (3, 5, 16, 384):
        w = [math.tanh((math.pi * (1 - n / num)) ** math.e) for n in range(num)]
        expected = torch.tensor([x / math.fsum(w) for x in w], dtype=torch.float64).float()
        assert torch.allclose(sym.node_weights(num), expected, rtol=0, atol=1e-9)
