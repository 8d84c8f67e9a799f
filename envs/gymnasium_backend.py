"""Backend ``gymnasium``: Gymnasium's own vector env, the reference every other backend matches.

It runs any registered Gymnasium env with Box spaces (``gymnasium.register`` your own and pass its
id). Sub-environments step in this process (``sync``) or in worker processes (``async``).
With ``action_repeat=k`` each sub-environment applies every action ``k`` times (:mod:`envs.action_repeat`).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from envs.action_repeat import SIMULATOR_STEPS, RepeatAction
from envs.core import TorchVectorEnv


class GymnasiumVectorEnv(TorchVectorEnv):
    backend = "gymnasium"

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        vectorization: str = "sync",
        action_repeat: int = 1,
        **env_kwargs,
    ):
        if vectorization not in ("sync", "async"):
            raise ValueError(f"vectorization must be 'sync' or 'async', got {vectorization!r}")

        def make_env() -> gym.Env:
            env = gym.make(env_id, **env_kwargs)
            # Outside gym.make's TimeLimit, so that the time limit counts simulator steps.
            return RepeatAction(env, action_repeat) if action_repeat > 1 else env

        env_fns = [make_env for _ in range(num_envs)]
        vector_cls = gym.vector.SyncVectorEnv if vectorization == "sync" else gym.vector.AsyncVectorEnv
        self.vec = vector_cls(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        try:
            super().__init__(env_id, num_envs, self.vec.single_observation_space, self.vec.single_action_space, device)
        except Exception:
            self.vec.close()
            raise
        self._seed = seed
        self.action_repeat = action_repeat

    def _reset(self, seed: int | None) -> torch.Tensor:
        if seed is None:
            # The first reset uses the seed given to make(); later unseeded resets continue the RNGs.
            seed, self._seed = self._seed, None
        obs, _ = self.vec.reset(seed=seed)
        return torch.as_tensor(obs, dtype=torch.float32).to(self.device)

    def _step(self, actions: torch.Tensor):
        obs, reward, terminated, truncated, info = self.vec.step(actions.cpu().numpy())
        final_obs = obs
        if "_final_obs" in info and info["_final_obs"].any():
            final_obs = obs.copy()
            for i in np.flatnonzero(info["_final_obs"]):
                final_obs[i] = info["final_obs"][i]
        result = self._from_numpy(obs, reward, terminated, truncated, final_obs)
        if self.action_repeat == 1:
            return result
        return (*result, torch.as_tensor(self._simulator_steps(info)).to(self.device))

    def _simulator_steps(self, info: dict) -> np.ndarray:
        """The simulator steps each sub-environment took in this step, int64 ``(num_envs,)``.

        A sub-environment that finished reports them in ``info["final_info"]``: its ``info`` is
        already that of its reset."""
        steps = np.full(self.num_envs, self.action_repeat, dtype=np.int64)
        for source in (info, info.get("final_info", {})):
            if f"_{SIMULATOR_STEPS}" in source:
                reported = source[f"_{SIMULATOR_STEPS}"]
                steps[reported] = source[SIMULATOR_STEPS][reported]
        return steps

    def close(self) -> None:
        self.vec.close()
