"""Any backend of the vector-env contract as a Stable-Baselines3 ``VecEnv``.

    from stable_baselines3 import PPO
    import envs
    from envs.sb3_adapter import SB3VecEnv

    venv = SB3VecEnv(envs.make("Humanoid", num_envs=1024, backend="warp", device="cuda"))
    PPO("MlpPolicy", venv).learn(1_000_000)

SB3 works on numpy arrays, so each step copies observations, rewards and dones to the host (on a
GPU backend that is one transfer per step, not per sub-environment). What SB3 expects and this
adapter provides, as ``DummyVecEnv`` does:

- ``step_wait`` returns ``(obs, rewards, dones, infos)`` with ``dones = terminated | truncated``
  and ``obs`` already the first observation of the next episode for finished sub-environments;
- ``infos[i]["terminal_observation"]``: the last observation of the finished episode;
- ``infos[i]["TimeLimit.truncated"]``: ``truncated and not terminated`` (SB3 bootstraps on it);
- ``infos[i]["episode"] = {"r", "l", "t"}`` at the end of an episode, as SB3's ``Monitor`` writes,
  so ``rollout/ep_rew_mean`` is logged without wrapping anything.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices

from envs.core import TorchVectorEnv


class SB3VecEnv(VecEnv):
    """Stable-Baselines3 view of a :class:`~envs.core.TorchVectorEnv` (numpy in, numpy out)."""

    def __init__(self, env: TorchVectorEnv):
        self.env = env
        self.render_mode = None
        self._actions: torch.Tensor | None = None
        self._start = time.time()
        super().__init__(env.num_envs, env.single_observation_space, env.single_action_space)

    # ----- stepping ------------------------------------------------------------------------
    def reset(self) -> np.ndarray:
        # SB3's seed(s) stores s, s + 1, ...; the contract seeds sub-environment i with s + i too.
        seed = self._seeds[0]
        obs, _ = self.env.reset(seed=seed)
        self._reset_seeds()
        self._reset_options()
        return obs.cpu().numpy()

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = torch.as_tensor(np.asarray(actions), dtype=torch.float32)

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        if self._actions is None:
            raise RuntimeError("step_wait() called without step_async(actions)")
        obs, reward, terminated, truncated, info = self.env.step(self._actions)
        self._actions = None
        obs_np = obs.cpu().numpy()
        done = info["done"].cpu().numpy()
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        if done.any():
            final_obs = info["final_obs"].cpu().numpy()
            terminated_np, truncated_np = terminated.cpu().numpy(), truncated.cpu().numpy()
            returns, lengths = info["episode_return"].cpu().numpy(), info["episode_length"].cpu().numpy()
            elapsed = round(time.time() - self._start, 6)
            for i in np.flatnonzero(done):
                infos[i]["terminal_observation"] = final_obs[i]
                infos[i]["TimeLimit.truncated"] = bool(truncated_np[i] and not terminated_np[i])
                infos[i]["episode"] = {"r": float(returns[i]), "l": int(lengths[i]), "t": elapsed}
        return obs_np, reward.cpu().numpy().astype(np.float32), done, infos

    def close(self) -> None:
        self.env.close()

    # ----- attribute access: the vector env is one object, not num_envs of them --------------
    def _indices(self, indices: VecEnvIndices) -> Sequence[int]:
        if indices is None:
            return range(self.num_envs)
        if isinstance(indices, int):
            return [indices]
        return list(indices)

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """The attribute of the wrapped vector env, once per requested index."""
        target = self if attr_name == "render_mode" else self.env
        value = getattr(target, attr_name)
        return [value for _ in self._indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Sets the attribute on the wrapped vector env (shared by all sub-environments)."""
        setattr(self.env, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        """Calls the method once on the wrapped vector env; the result is repeated per index."""
        result = getattr(self.env, method_name)(*method_args, **method_kwargs)
        return [result for _ in self._indices(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        # Sub-environments of a torch-native backend carry no Gymnasium wrappers.
        return [False for _ in self._indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        raise NotImplementedError(
            "SB3VecEnv does not render; record videos with the gymnasium backend (envs.make(..., backend='gymnasium'))."
        )
