"""The torch-native vector-environment contract every backend implements.

Contract (identical on every backend, checked by ``tests/test_env_contract.py`` and by
``python -m envs.check``):

``reset(seed=None) -> (obs, info)``
    ``obs``: float32 tensor ``(num_envs, *obs_shape)`` on ``device``. A ``seed`` re-seeds the
    sub-environments with ``seed, seed + 1, ...``.

``step(actions) -> (obs, reward, terminated, truncated, info)``
    ``actions``: tensor ``(num_envs, *act_shape)`` (any float dtype, any device); it is clipped to
    the action space bounds, as every agent here expects. ``reward``: float32 ``(num_envs,)``;
    ``terminated`` / ``truncated``: bool ``(num_envs,)``.

    Non-finite actions (NaN, +-inf) raise :class:`NonFiniteActionError` naming the
    sub-environments that got them, before anything is stepped: clamping would turn NaN into
    NaN rewards and returns, and a diverged policy is better stopped than trained on them. With
    ``nonfinite_actions="clip"`` (``envs.make(..., nonfinite_actions="clip")``) NaN becomes 0 and
    +-inf the bound instead.

    Same-step autoreset: a sub-environment whose episode ended in this step is reset inside
    ``step``, so ``obs`` already holds the first observation of its next episode. ``info`` always
    holds these tensors on ``device``:

    - ``final_obs`` ``(num_envs, *obs_shape)``: the observation the step reached *before* any
      reset. For sub-environments that did not finish it equals ``obs``. Bootstrapping on
      truncation uses ``V(final_obs)``.
    - ``done`` bool ``(num_envs,)``: ``terminated | truncated``.
    - ``episode_return`` float32 / ``episode_length`` int64 ``(num_envs,)``: return and length of
      the episode that finished in this step, 0 where ``done`` is False. The length counts
      simulator steps, also under action repeat (:mod:`envs.action_repeat`).

A backend implements ``_reset`` and ``_step`` on torch tensors; this base class does the action
clipping, the dtype/device checks and the episode statistics once for all of them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch


class EnvRequestError(ValueError):
    """A request ``envs.make`` cannot serve (unknown env, unsupported space, backend or size); the
    message names the fix. Command-line agents report it as a usage error (``cleanrl_style.runs.cli``)."""


class EnvSpaceError(EnvRequestError):
    """An environment whose spaces the suite's agents cannot handle."""


class NonFiniteActionError(ValueError):
    """``step`` got NaN or infinite actions; ``sub_envs`` lists the sub-environments that did."""

    def __init__(self, message: str, sub_envs: list[int]):
        super().__init__(message)
        self.sub_envs = sub_envs


NONFINITE_ACTION_RULES = ("raise", "clip")


def check_spaces(env_id: str, observation_space: gym.Space, action_space: gym.Space) -> None:
    """Raise :class:`EnvSpaceError` naming the offending space unless both are bounded-action Boxes."""
    if not isinstance(observation_space, gym.spaces.Box):
        raise EnvSpaceError(
            f"{env_id}: observation space {observation_space} is not a Box. The vector-env contract "
            "returns observations as one float tensor; flatten Dict/Tuple/Discrete observations with a "
            "Gymnasium wrapper (e.g. gymnasium.wrappers.FlattenObservation) before registering the env."
        )
    if not isinstance(action_space, gym.spaces.Box):
        raise EnvSpaceError(
            f"{env_id}: action space {action_space} is not a Box. The agents in this suite are "
            "continuous-control agents (Gaussian/tanh policies); discrete action spaces are not supported."
        )
    if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
        raise EnvSpaceError(
            f"{env_id}: action space {action_space} has infinite bounds. Actions are clipped to the "
            "bounds and tanh policies are scaled to them, so every bound must be finite."
        )


class TorchVectorEnv(ABC):
    """Base class of the vector-env contract (see the module docstring)."""

    backend: str = "abstract"
    # Simulator steps per step(): each action is applied this many times (envs.make(..., action_repeat=k)).
    action_repeat: int = 1
    # What step() does with NaN or infinite actions: "raise" (the contract's default) or "clip".
    nonfinite_actions: str = "raise"

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        single_observation_space: gym.Space,
        single_action_space: gym.Space,
        device: torch.device | str = "cpu",
    ):
        check_spaces(env_id, single_observation_space, single_action_space)  # both Boxes, or it raises
        self.env_id = env_id
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.single_observation_space = cast(gym.spaces.Box, single_observation_space)
        self.single_action_space = cast(gym.spaces.Box, single_action_space)
        self.action_low = torch.as_tensor(self.single_action_space.low, dtype=torch.float32, device=self.device)
        self.action_high = torch.as_tensor(self.single_action_space.high, dtype=torch.float32, device=self.device)
        self._episode_return = torch.zeros(num_envs, dtype=torch.float32, device=self.device)
        self._episode_length = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        # Episodes finished since construction, counted on device (read only when asked: no sync per step).
        self._episodes_finished = torch.zeros((), dtype=torch.int64, device=self.device)

    # ----- what a backend implements -----------------------------------------------------------
    @abstractmethod
    def _reset(self, seed: int | None) -> torch.Tensor:
        """Reset every sub-environment; return obs ``(num_envs, *obs_shape)`` float32 on device."""

    @abstractmethod
    def _step(self, actions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Step with clipped float32 actions on device, autoresetting finished sub-environments.

        Returns ``(obs, reward, terminated, truncated, final_obs)`` as described in the module
        docstring (``final_obs`` equal to ``obs`` where nothing finished). A backend that repeats
        actions adds a sixth tensor, int64 ``(num_envs,)``: the simulator steps each sub-environment
        took, which ``episode_length`` counts.
        """

    def close(self) -> None:  # noqa: B027 - backends without resources need nothing  # pragma: no cover
        pass

    def _from_numpy(self, obs, reward, terminated, truncated, final_obs) -> tuple[torch.Tensor, ...]:
        """A host backend's NumPy step result as the contract's tensors on ``self.device``."""
        as_tensor = lambda array, dtype: torch.as_tensor(array, dtype=dtype).to(self.device)  # noqa: E731
        return (
            as_tensor(obs, torch.float32),
            as_tensor(reward, torch.float32),
            as_tensor(terminated, torch.bool),
            as_tensor(truncated, torch.bool),
            as_tensor(final_obs, torch.float32),
        )

    # ----- the contract --------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        obs = self._reset(seed)
        self._episode_return.zero_()
        self._episode_length.zero_()
        return obs, {}

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        actions = torch.as_tensor(actions, device=self.device, dtype=torch.float32)
        expected = (self.num_envs, *self.single_action_space.shape)
        if tuple(actions.shape) != expected:
            raise ValueError(
                f"{self.env_id}: step() got actions of shape {tuple(actions.shape)}, expected {expected} "
                "(num_envs, *action_shape)."
            )
        finite = torch.isfinite(actions).flatten(1).all(dim=1)
        if not bool(finite.all()):
            if self.nonfinite_actions == "raise":
                bad = torch.nonzero(~finite).flatten().tolist()
                raise NonFiniteActionError(
                    f"{self.env_id}: the actions of sub-environment(s) {bad} are not finite (NaN or inf), usually "
                    "a diverged policy (check the losses and the learning rate); envs.make(..., nonfinite_actions='clip') "
                    "maps NaN to 0 and inf to the bounds instead",
                    bad,
                )
            actions = torch.nan_to_num(actions, nan=0.0)
        actions = torch.clamp(actions, self.action_low, self.action_high)
        obs, reward, terminated, truncated, final_obs, *simulator_steps = self._step(actions)
        done = terminated | truncated
        self._episode_return += reward
        self._episode_length += simulator_steps[0] if simulator_steps else 1
        info = {
            "final_obs": final_obs,
            "done": done,
            "episode_return": torch.where(done, self._episode_return, 0.0),
            "episode_length": torch.where(done, self._episode_length, 0),
        }
        self._episode_return.masked_fill_(done, 0.0)
        self._episode_length.masked_fill_(done, 0)
        self._episodes_finished += done.sum()
        return obs, reward, terminated, truncated, info

    def random_actions(self) -> torch.Tensor:
        """Actions drawn uniformly within the bounds, ``(num_envs, *action_shape)`` on the env's device."""
        shape = (self.num_envs, *self.action_low.shape)
        return self.action_low + (self.action_high - self.action_low) * torch.rand(shape, device=self.device)

    @property
    def episodes_finished(self) -> int:
        """Episodes finished by all sub-environments since the env was made (what ``--video-every`` counts)."""
        return int(self._episodes_finished)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env_id!r}, num_envs={self.num_envs}, device={self.device})"
