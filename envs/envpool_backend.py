"""Backend ``envpool``: envpool's C++ thread pool (MuJoCo and classic-control ids it implements).

envpool resets a finished sub-environment on the *next* ``step`` call (it ignores that call's
action). The contract wants same-step autoreset, so after a step with finished sub-environments
this backend resets exactly those (``reset(env_id=...)``) before returning: the next step is then
an ordinary step for every sub-environment, and ``final_obs`` holds the pre-reset observation.
"""

from __future__ import annotations

from functools import lru_cache

import gymnasium as gym
import numpy as np
import torch

from envs.core import TorchVectorEnv


@lru_cache(maxsize=1)
def _envpool_ids() -> frozenset[str]:
    import envpool

    return frozenset(envpool.list_all_envs())


def envpool_supports(env_id: str) -> bool:
    """True for the continuous-control ids envpool implements (MuJoCo and classic control)."""
    if env_id not in _envpool_ids() or env_id not in gym.registry:
        return False
    entry_point = str(gym.spec(env_id).entry_point)
    return "mujoco" in entry_point or entry_point.endswith(("PendulumEnv", "Continuous_MountainCarEnv"))


class EnvpoolVectorEnv(TorchVectorEnv):
    backend = "envpool"

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        num_threads: int = 0,
        **env_kwargs,
    ):
        import envpool

        self.num_threads = num_threads

        # envpool seeds sub-environment i with seed + i, as Gymnasium does.
        self.pool = envpool.make(
            env_id,
            env_type="gymnasium",
            num_envs=num_envs,
            seed=0 if seed is None else seed,
            num_threads=num_threads,
            **env_kwargs,
        )
        obs_space = self.pool.observation_space
        # envpool reports float64 spaces; the contract delivers float32.
        obs_space = gym.spaces.Box(obs_space.low.astype(np.float32), obs_space.high.astype(np.float32), dtype=np.float32)
        act_space = self.pool.action_space
        act_space = gym.spaces.Box(act_space.low.astype(np.float32), act_space.high.astype(np.float32), dtype=np.float32)
        super().__init__(env_id, num_envs, obs_space, act_space, device)

    def _reset(self, seed: int | None) -> torch.Tensor:
        if seed is not None:
            obs, _ = self.pool.reset(seed=[seed + i for i in range(self.num_envs)])
        else:
            obs, _ = self.pool.reset()
        return torch.as_tensor(obs, dtype=torch.float32).to(self.device)

    def _step(self, actions: torch.Tensor):
        action_array = actions.cpu().numpy().astype(np.float64)
        obs, reward, terminated, truncated, _ = self.pool.step(action_array)
        final_obs = obs
        done_ids = np.flatnonzero(terminated | truncated)
        if done_ids.size:
            obs = obs.copy()  # final_obs keeps the pre-reset rows
            reset_obs, reset_info = self.pool.reset(done_ids)
            obs[reset_info["env_id"]] = reset_obs
        return self._from_numpy(obs, reward, terminated, truncated, final_obs)

    def close(self) -> None:
        close = getattr(self.pool, "close", None)
        if close is not None:
            close()
