"""A batch of text environments stepped together.

    vec = TextVectorEnv([lambda: ToolUseEnv(seed=0)] * 8)
    observations, infos = vec.reset(seed=0, options=[{"task_id": 5}] * 8)   # a GRPO group
    observations, rewards, terminated, truncated, infos = vec.step(messages)

Observations are conversations (lists of messages), so they are returned as a Python list with
one entry per env, as are the infos; rewards and the done flags are numpy arrays of shape
``(num_envs,)``.

Two ways to finish episodes:

- ``autoreset=False`` (default, the usual shape of an LLM rollout: reset a group, step until
  every member is done): a finished env is not stepped again; its action is ignored (pass
  None) and it keeps returning its final observation and info with reward 0 and
  ``info["already_done"] = True``. ``all_done`` says when the batch is finished;
  ``end_episodes`` marks episodes that the caller cut short as finished too.
- ``autoreset=True`` (for throughput and streaming data): a finished env is reset within the
  same step; the returned observation starts the new episode, and the finished episode's last
  observation and info are in ``info["final_observation"]`` and ``info["final_info"]``.

``num_threads > 1`` steps envs in a thread pool: useful for the Python-reasoning env, whose
steps wait on sandbox processes; tool-use steps are pure Python and gain nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym
import numpy as np

Conversation = list[dict[str, str]]


class TextVectorEnv:
    """Steps ``num_envs`` text environments (``ToolUseEnv`` or ``PythonReasoningEnv``) as one batch."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], autoreset: bool = False, num_threads: int = 1) -> None:
        if not env_fns:
            raise ValueError("need at least one env")
        if num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        self.envs = [fn() for fn in env_fns]
        self.num_envs = len(self.envs)
        self.autoreset = autoreset
        self._pool = ThreadPoolExecutor(num_threads) if num_threads > 1 else None
        self.done = np.zeros(self.num_envs, dtype=bool)
        self._last: list[tuple[Conversation, bool, bool, dict[str, Any]]] = []
        self.single_observation_space = self.envs[0].observation_space
        self.single_action_space = self.envs[0].action_space

    @property
    def all_done(self) -> bool:
        return bool(self.done.all())

    def _map(self, fn: Callable[[int], Any]) -> list[Any]:
        if self._pool is None:
            return [fn(i) for i in range(self.num_envs)]
        return list(self._pool.map(fn, range(self.num_envs)))

    def _per_env(self, value: Any, name: str) -> list[Any]:
        if isinstance(value, (list, tuple)):
            if len(value) != self.num_envs:
                raise ValueError(f"{name}: got {len(value)} entries for {self.num_envs} envs")
            return list(value)
        return [value] * self.num_envs

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
    ) -> tuple[list[Conversation], list[dict[str, Any]]]:
        """Reset every env. ``seed``: one int (env i gets seed + i) or one per env; ``options``: one
        dict for all or one per env (e.g. the same ``task_id`` for a group)."""
        seeds = [seed + i for i in range(self.num_envs)] if isinstance(seed, int) else self._per_env(seed, "seed")
        option_list = self._per_env(options, "options")
        results = self._map(lambda i: self.envs[i].reset(seed=seeds[i], options=option_list[i]))
        self.done[:] = False
        self._last = [(obs, False, False, info) for obs, info in results]
        return [r[0] for r in results], [r[1] for r in results]

    def step(
        self, actions: Sequence[str | None]
    ) -> tuple[list[Conversation], np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """Step every env that is not done with its message; returns per-env lists and (num_envs,) arrays."""
        if len(actions) != self.num_envs:
            raise ValueError(f"got {len(actions)} actions for {self.num_envs} envs")
        if not self._last:
            raise RuntimeError("call reset() before step()")

        def one(i: int) -> tuple[Conversation, float, bool, bool, dict[str, Any]]:
            if self.done[i]:
                obs, term, trunc, info = self._last[i]
                return obs, 0.0, term, trunc, info | {"already_done": True}
            obs, reward, term, trunc, info = self.envs[i].step(actions[i])
            if (term or trunc) and self.autoreset:
                new_obs, new_info = self.envs[i].reset()
                return new_obs, float(reward), term, trunc, new_info | {"final_observation": obs, "final_info": info}
            return obs, float(reward), term, trunc, info

        results = self._map(one)
        rewards = np.array([r[1] for r in results], dtype=np.float32)
        terminated = np.array([r[2] for r in results], dtype=bool)
        truncated = np.array([r[3] for r in results], dtype=bool)
        if not self.autoreset:
            self.done |= terminated | truncated
        self._last = [(r[0], r[2], r[3], r[4]) for r in results]
        return [r[0] for r in results], rewards, terminated, truncated, [r[4] for r in results]

    def end_episodes(self, indices: Sequence[int]) -> None:
        """Treat these envs' episodes as finished although the envs did not end them (a collector's
        length limit cut them short): they are not stepped again until the next reset."""
        if self.autoreset:
            raise RuntimeError("end_episodes needs autoreset=False (with autoreset, episodes continue into new ones)")
        self.done[list(indices)] = True

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for env in self.envs:
            env.close()


def make_tool_use_vector_env(num_envs: int, autoreset: bool = False, **env_kwargs: Any) -> TextVectorEnv:
    """``num_envs`` copies of ``ToolUseEnv(**env_kwargs)`` sharing one task set (generated once)."""
    from envs.text.env import ToolUseEnv
    from envs.text.tasks import TaskSet

    if "tasks" not in env_kwargs:
        task_set_keys = ("split", "num_tasks", "seed", "suite_groups", "variants")
        defaults: dict[str, Any] = {"split": "train", "num_tasks": 1000, "seed": 0}
        set_kwargs = defaults | {k: env_kwargs.pop(k) for k in task_set_keys if k in env_kwargs}
        env_kwargs["tasks"] = TaskSet(**set_kwargs)
    return TextVectorEnv([lambda: ToolUseEnv(**env_kwargs)] * num_envs, autoreset=autoreset)
