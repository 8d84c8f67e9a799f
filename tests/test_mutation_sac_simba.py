"""SAC-SimBa's discount at the points where a bound, a constant or an operator would show (mutation tests).

The agent is loaded as the module ``agents.sac_simba``, the name mutmut gives the mutants of
``agents/sac_simba.py`` (CONTRIBUTING, "Mutation testing"); ``tests/test_sac_simba.py`` holds the
agent's own tests.
"""

import pytest
from agent_runs import load_agent

simba = load_agent("sac_simba")


@pytest.mark.parametrize(
    "time_limit, repeat, gamma",
    [
        (None, 1, 0.99),
        (0, 1, 0.99),
        (None, 3, 0.99),
        (1000, 1, 0.995),  # L/5 = 200: 0.995, the upper bound exactly
        (2000, 1, 0.995),  # 400: 0.9975 clipped to 0.995
        (300, 1, 59 / 60),  # 60: inside the bounds
        (600, 2, 59 / 60),  # the same in agent steps under action repeat
        (750, 3, 0.98),  # 50
        (100, 1, 0.95),  # 20: 0.95, the lower bound exactly
        (30, 1, 0.95),  # 6: 5/6 clipped to 0.95
    ],
)
def test_horizon_discount_by_hand(time_limit, repeat, gamma):
    assert simba.horizon_discount(time_limit, repeat) == pytest.approx(gamma, abs=1e-12)


def test_horizon_discount_defaults_to_no_action_repeat():
    assert simba.horizon_discount(300) == pytest.approx(59 / 60, abs=1e-12)
