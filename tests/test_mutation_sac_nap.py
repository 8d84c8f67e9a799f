"""SAC-NaP's soft target at the points where a sign, a constant or an operator would show (mutation tests).

The agent is loaded as the module ``agents.sac_nap``, the name mutmut gives the mutants of
``agents/sac_nap.py`` (CONTRIBUTING, "Mutation testing"); ``tests/test_sac_nap.py`` holds the
agent's own tests.
"""

import pytest
import torch
from agent_runs import load_agent

sac = load_agent("sac_nap")


def test_soft_q_target_by_hand_per_transition():
    # Three critics, three transitions: the minimum sits in a different critic for each.
    next_q = torch.tensor([[5.0, 1.0, -2.0], [3.0, 2.0, -1.0], [4.0, 0.5, -3.0]])
    rewards, terminated = torch.tensor([1.0, -0.5, 2.0]), torch.tensor([0.0, 1.0, 0.0])
    log_prob, alpha, gamma = torch.tensor([-1.0, 0.5, 2.0]), torch.tensor(0.2), 0.9
    target = sac.soft_q_target(rewards, terminated, next_q, log_prob, alpha, gamma)
    expected = [1.0 + 0.9 * (3.0 - 0.2 * -1.0), -0.5, 2.0 + 0.9 * (-3.0 - 0.2 * 2.0)]
    assert target.tolist() == pytest.approx(expected, rel=1e-6)
