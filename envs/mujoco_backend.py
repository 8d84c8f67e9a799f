"""Backend ``mujoco``: MuJoCo's own batch of simulations (``mujoco.batch.Batch``) on CPU threads.

The five v5 locomotion tasks (Humanoid, Ant, HalfCheetah, Hopper, Walker2d) run as rows of one
``Batch`` stepped on a thread pool inside MuJoCo, with no Python loop over sub-environments; the
task definitions (observation, reward, termination) are Gymnasium's, written once over batched
state in :mod:`envs.mujoco_tasks` and evaluated here in float64 on views of the batch's arrays.

It is Gymnasium, bit for bit where the arithmetic allows: the model is Gymnasium's (its XML and
kwargs, its PGS solver), each sub-environment draws its reset noise from a NumPy generator seeded
as Gymnasium seeds env ``i`` (``seed + i``), in Gymnasium's order, and ``cfrc_ext`` is computed as
Gymnasium computes it, with ``mj_rnePostConstraint`` after the step (a batch does not compute it;
each simulation's data is copied out for that call). ``tests/test_mujoco_backend.py`` steps it
beside Gymnasium's own vector env.

Why it exists: exact Gymnasium semantics at envpool's speed or better. MuJoCo 4.0 steps the same
model faster than envpool's bundled MuJoCo, which pays for the Python here: Humanoid with 8 envs
(PPO's setting) runs at 1.2x envpool's steps/s, with 64-256 envs on par
(``python benchmarks/env_throughput.py``); ``auto`` picks it for these tasks.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, cast

import gymnasium as gym
import numpy as np
import torch

from envs.core import TorchVectorEnv
from envs.mujoco_tasks import TASKS, StateViews, check_task_request

if TYPE_CHECKING:
    from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

ALTERNATIVES = "backend='envpool' or backend='gymnasium' (any registered MuJoCo env)"


class MujocoBatchUnsupportedError(ValueError):
    """An env or option the ``mujoco`` backend does not implement."""


def mujoco_batch_supports(env_id: str) -> bool:
    """True for the task ids this backend implements, when ``mujoco.batch`` is importable."""
    if env_id not in TASKS:
        return False
    try:
        import mujoco.batch  # noqa: F401  (MuJoCo 4.0 and newer)
    except ImportError:
        return False
    return True


class MujocoBatchVectorEnv(TorchVectorEnv):
    """Gymnasium's v5 locomotion tasks on ``mujoco.batch.Batch``; see the module docstring.

    Args:
        env_id: one of ``Humanoid-v5``, ``Ant-v5``, ``HalfCheetah-v5``, ``Hopper-v5``, ``Walker2d-v5``.
        num_envs: number of simulations.
        device: where the returned tensors live (the simulation runs on the CPU).
        seed: sub-environment ``i`` is seeded with ``seed + i`` at the first ``reset()``.
        num_threads: MuJoCo batch threads (0: one per CPU).
        max_episode_steps: truncation (default: the Gymnasium spec's, 1000).
        env_kwargs: Gymnasium's own kwargs of the env (reward weights, ranges, ``xml_file``, ...).
    """

    backend = "mujoco"

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        num_threads: int = 0,
        max_episode_steps: int | None = None,
        **env_kwargs,
    ):
        import mujoco
        from mujoco.batch import Batch

        check_task_request(env_id, env_kwargs, "mujoco", ALTERNATIVES, MujocoBatchUnsupportedError)
        # The Gymnasium env is only read (model, spaces, parameters); it is never stepped.
        self._gym_env = cast("MujocoEnv", gym.make(env_id, **env_kwargs).unwrapped)
        self._mujoco = mujoco
        model = self._gym_env.model
        self._model = model
        self.task = TASKS[env_id](self._gym_env, torch.device("cpu"), torch.float64)
        # persistent: every simulation keeps its whole MjData (memory grows with num_envs), so that
        # get_data() hands over the derived fields mj_rnePostConstraint needs. Only for cfrc_ext.
        self._batch = Batch(model, nsim=num_envs, nthread=num_threads, persistent=self.task.needs_cfrc_ext)
        self.num_threads = num_threads
        obs_space = self._gym_env.observation_space
        obs_space = gym.spaces.Box(-np.inf, np.inf, shape=obs_space.shape, dtype=np.float32)
        super().__init__(env_id, num_envs, obs_space, self._gym_env.action_space, device)

        self.frame_skip = int(self._gym_env.frame_skip)
        limit = max_episode_steps or gym.spec(env_id).max_episode_steps
        assert limit is not None, f"{env_id} has no time limit"  # the five tasks' specs have 1000
        self.max_episode_steps = int(limit)
        b = self._batch
        self._qpos, self._qvel, self._ctrl = b.bind("qpos"), b.bind("qvel"), b.bind("ctrl")
        self._cfrc_ext = np.zeros((num_envs, model.nbody, 6))
        self._scratch = mujoco.MjData(model)
        with warnings.catch_warnings():
            # Derived fields are read-only arrays the batch refreshes in place; torch only reads them.
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            view = lambda array: torch.from_numpy(array)  # noqa: E731  (zero-copy, stays live)
            self.state = StateViews(
                qpos=view(self._qpos),
                qvel=view(self._qvel),
                ctrl=view(self._ctrl),
                xpos=view(b.bind("xpos")),
                xipos=view(b.bind("xipos")),
                cinert=view(b.bind("cinert")),
                cvel=view(b.bind("cvel")),
                qfrc_actuator=view(b.bind("qfrc_actuator")),
                cfrc_ext=view(self._cfrc_ext),
            )
        self._seed = seed
        self._rngs: list[np.random.Generator] = []
        self._elapsed = np.zeros(num_envs, dtype=np.int64)
        self._position = self.task.position(self.state)
        self.reward_terms: dict[str, torch.Tensor] = {}

    # ----- physics ---------------------------------------------------------------------------
    def _rne_post_constraint(self, ids) -> None:
        """``cfrc_ext`` as Gymnasium has it after ``mj_step``: ``mj_rnePostConstraint`` on each simulation."""
        data, model = self._scratch, self._model
        for i in ids:
            self._batch.get_data(int(i), data)
            self._mujoco.mj_rnePostConstraint(model, data)
            self._cfrc_ext[i] = data.cfrc_ext

    def _reset_simulations(self, ids: np.ndarray) -> None:
        """Gymnasium's ``reset`` for the simulations ``ids``: mj_resetData, reset noise, mj_forward."""
        self._batch.reset(ids, stage=self._mujoco.mjtStage.mjSTAGE_NONE)
        for i in ids:
            self._qpos[i], self._qvel[i] = self.task.reset_noise_numpy(self._rngs[i])
        self._batch.forward(ids)
        # mj_forward does not compute cfrc_ext, and mj_resetData zeroed it: Gymnasium observes zeros.
        self._cfrc_ext[ids] = 0.0
        self._elapsed[ids] = 0
        new_position = self.task.position(self.state)
        index = torch.as_tensor(ids)
        self._position[index] = new_position[index]

    def set_state(self, qpos, qvel) -> torch.Tensor:
        """Load ``(N, nq)`` / ``(N, nv)`` states, run ``mj_forward``, return the float32 observation.

        For tests and analysis, as Gymnasium's ``set_state``: ``cfrc_ext`` is not recomputed, the
        episode counters are kept.
        """
        self._qpos[:] = np.asarray(qpos, dtype=np.float64)
        self._qvel[:] = np.asarray(qvel, dtype=np.float64)
        self._batch.forward()
        self._position = self.task.position(self.state)
        return self.task.observation(self.state).to(torch.float32)

    # ----- the contract ----------------------------------------------------------------------
    def _reset(self, seed: int | None) -> torch.Tensor:
        if seed is None:
            seed, self._seed = self._seed, None
        if seed is not None or not self._rngs:
            # As Gymnasium's vector envs: sub-environment i draws from np_random(seed + i).
            seeds = [None] * self.num_envs if seed is None else [seed + i for i in range(self.num_envs)]
            self._rngs = [gym.utils.seeding.np_random(s)[0] for s in seeds]
        self._reset_simulations(np.arange(self.num_envs))
        return self.task.observation(self.state).to(torch.float32).to(self.device)

    def _step(self, actions: torch.Tensor):
        action = actions.cpu()
        self._ctrl[:] = action.numpy()
        self._batch.step(nstep=self.frame_skip)
        task, s = self.task, self.state
        if task.needs_cfrc_ext:
            self._rne_post_constraint(range(self.num_envs))

        final_obs, self._position, _, reward, self.reward_terms, terminated = task.outcome(s, action, self._position)
        final_obs = final_obs.to(torch.float32)
        self._elapsed += 1
        truncated = torch.from_numpy(self._elapsed >= self.max_episode_steps)
        done_ids = np.flatnonzero((terminated | truncated).numpy())
        obs = final_obs
        if done_ids.size:
            self._reset_simulations(done_ids)
            obs = final_obs.clone()
            obs[done_ids] = task.observation(s)[done_ids].to(torch.float32)
        to = lambda tensor: tensor.to(self.device)  # noqa: E731
        return to(obs), to(reward.to(torch.float32)), to(terminated), to(truncated), to(final_obs)

    def close(self) -> None:
        self._gym_env.close()
