"""Action repeat: ``envs.make(env_id, ..., action_repeat=k)`` applies each action for ``k`` simulator steps.

One ``step()`` of the vector env is then one agent step: each sub-environment steps its simulator
``k`` times with the same action and returns the last observation, the sum of the ``k`` rewards,
and the last ``terminated`` / ``truncated``. A sub-environment whose episode ends within the ``k``
steps stops there (its remaining repeats are not taken), and the same-step autoreset, ``final_obs``
and the episode statistics of :mod:`envs.core` apply to that agent step as to any other.

The time limit counts simulator steps: the repeat wraps the env that Gymnasium's ``max_episode_steps``
already limits, so a 1,000-step DeepMind Control episode is 500 agent steps at ``k = 2``.
``info["episode_return"]`` is the episode's true return (every simulator step's reward) and
``info["episode_length"]`` its length in simulator steps, the same numbers as without the repeat.

The ``gymnasium`` backend repeats actions (inside each sub-environment, so that one that ends
mid-repeat stops alone); ``backend="auto"`` picks it when ``k > 1``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

# The info key through which each sub-environment reports the simulator steps one agent step took.
SIMULATOR_STEPS = "simulator_steps"


class RepeatAction(gym.Wrapper):
    """Apply each action ``repeat`` times, stopping at the end of the episode; rewards summed."""

    def __init__(self, env: gym.Env, repeat: int):
        super().__init__(env)
        self.repeat = repeat

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        total_reward, taken = 0.0, 0  # summed in float64, in simulator order
        while taken < self.repeat:
            obs, reward, terminated, truncated, info = self.env.step(action)
            total_reward += float(reward)
            taken += 1
            if terminated or truncated:
                break
        return obs, total_reward, bool(terminated), bool(truncated), {**info, SIMULATOR_STEPS: taken}
