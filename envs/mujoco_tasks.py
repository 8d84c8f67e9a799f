"""Gymnasium's v5 MuJoCo locomotion tasks, written as torch functions of batched MuJoCo state.

Shared by the two backends that simulate many worlds in one model: ``warp`` (MuJoCo Warp, float32,
on the GPU) and ``mujoco`` (MuJoCo's native ``mujoco.batch.Batch``, float64, on CPU threads). What
only one backend uses lives in that backend (the warp backend's torch reset noise and its contact
buffer sizes are in :mod:`envs.warp_backend`).

Each task reads its parameters (reward weights, healthy ranges, noise scale, observation flags)
from a Gymnasium env instance made with the user's kwargs, so the definitions stay Gymnasium's:
this module only re-expresses ``_get_obs``, ``_get_rew``, ``is_healthy`` and ``reset_model`` of
``gymnasium/envs/mujoco/*_v5.py`` over a leading world dimension.

Every function takes a :class:`StateViews`: torch views ``(num_worlds, ...)`` of the simulator's
arrays. As in Gymnasium after ``mj_step``, ``qpos``/``qvel`` hold the integrated state while the
derived quantities (``xipos``, ``cinert``, ``cvel``, ...) come from the last forward pass, i.e.
from the state *before* the last integration. Both simulators agree on that, so the formulas
below can be applied as written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, cast

import numpy as np
import torch


class Outcome(NamedTuple):
    """What Gymnasium's ``step`` computes once the physics has run (all ``(N, ...)``)."""

    obs: torch.Tensor
    position: torch.Tensor  # the next step's ``position_before``
    x_velocity: torch.Tensor
    reward: torch.Tensor
    reward_terms: dict[str, torch.Tensor]
    terminated: torch.Tensor


@dataclass
class StateViews:
    """Torch views of the batched simulator state (zero-copy on the backend's device)."""

    qpos: torch.Tensor  # (N, nq)
    qvel: torch.Tensor  # (N, nv)
    ctrl: torch.Tensor  # (N, nu)
    xpos: torch.Tensor  # (N, nbody, 3)
    xipos: torch.Tensor  # (N, nbody, 3)
    cinert: torch.Tensor  # (N, nbody, 10)
    cvel: torch.Tensor  # (N, nbody, 6)
    qfrc_actuator: torch.Tensor  # (N, nv)
    cfrc_ext: torch.Tensor  # (N, nbody, 6)


class LocomotionTask:
    """Common parts: forward velocity, control cost, reset noise, the excluded x(y) positions."""

    #: number of leading qpos entries (x, or x and y) left out of the observation by default
    n_position_coords: int = 1
    #: whether the task reads ``cfrc_ext`` (then the backend runs ``rne_postconstraint``)
    needs_cfrc_ext: bool = False
    #: whether the qvel reset noise is Gaussian (Ant, HalfCheetah) rather than uniform
    gaussian_qvel_noise: bool = False

    def __init__(self, gym_env, device: torch.device, dtype: torch.dtype = torch.float32):
        self.env = gym_env
        self.device = device
        self.dtype = dtype
        self.dt = float(gym_env.dt)
        self.forward_reward_weight = float(gym_env._forward_reward_weight)
        self.ctrl_cost_weight = float(gym_env._ctrl_cost_weight)
        self.reset_noise_scale = float(gym_env._reset_noise_scale)
        self.exclude_positions = bool(gym_env._exclude_current_positions_from_observation)
        self.healthy_reward_value = float(getattr(gym_env, "_healthy_reward", 0.0))
        self.terminate_when_unhealthy = bool(getattr(gym_env, "_terminate_when_unhealthy", False))
        self.init_qpos = torch.as_tensor(gym_env.init_qpos, dtype=dtype, device=device)
        self.init_qvel = torch.as_tensor(gym_env.init_qvel, dtype=dtype, device=device)

    # ----- pieces every task defines -----
    def position(self, v: StateViews) -> torch.Tensor:
        """The position whose finite difference over ``dt`` is the forward velocity: ``(N,)`` or ``(N, 2)``."""
        return v.qpos[:, 0].clone()

    def observation(self, v: StateViews) -> torch.Tensor:
        raise NotImplementedError

    def healthy(self, v: StateViews) -> torch.Tensor:
        """Bool ``(N,)``; tasks without a healthy condition are always healthy."""
        return torch.ones(v.qpos.shape[0], dtype=torch.bool, device=v.qpos.device)

    def costs(self, v: StateViews, action: torch.Tensor) -> dict[str, torch.Tensor]:
        """The cost terms, as the negative rewards Gymnasium reports in ``info``."""
        return {"reward_ctrl": -self.ctrl_cost_weight * torch.sum(action * action, dim=-1)}

    # ----- shared -----
    def x_velocity(self, position_before: torch.Tensor, position_after: torch.Tensor) -> torch.Tensor:
        delta = position_after - position_before
        return (delta if delta.ndim == 1 else delta[:, 0]) / self.dt

    def reward(
        self, v: StateViews, action: torch.Tensor, x_velocity: torch.Tensor, healthy: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Reward ``(N,)`` and its terms under Gymnasium's ``info`` names."""
        terms = {"reward_forward": self.forward_reward_weight * x_velocity}
        if self.has_healthy_reward:
            terms["reward_survive"] = healthy.to(self.dtype) * self.healthy_reward_value
        terms.update(self.costs(v, action))
        return cast(torch.Tensor, sum(terms.values())), terms

    has_healthy_reward: bool = True

    def outcome(self, v: StateViews, action: torch.Tensor, position_before: torch.Tensor) -> Outcome:
        """Observation, forward velocity, reward and termination after a physics step, as Gymnasium's ``step``."""
        position = self.position(v)
        x_velocity = self.x_velocity(position_before, position)
        healthy = self.healthy(v)
        reward, terms = self.reward(v, action, x_velocity, healthy)
        terminated = ~healthy if self.terminate_when_unhealthy else torch.zeros_like(healthy)
        return Outcome(self.observation(v), position, x_velocity, reward, terms, terminated)

    def reset_noise_numpy(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """One fresh episode's ``(qpos, qvel)`` drawn from ``rng`` exactly as Gymnasium's ``reset_model``.

        Same draws in the same order (the qpos noise, then the qvel noise), so a generator seeded like
        a Gymnasium env's ``np_random`` gives bit-identical initial states.
        """
        s = self.reset_noise_scale
        init_qpos, init_qvel = self.env.init_qpos, self.env.init_qvel
        qpos = init_qpos + rng.uniform(low=-s, high=s, size=init_qpos.size)
        if self.gaussian_qvel_noise:
            qvel = init_qvel + s * rng.standard_normal(init_qvel.size)
        else:
            qvel = init_qvel + rng.uniform(low=-s, high=s, size=init_qvel.size)
        return qpos, qvel

    def _positions_and_velocities(self, v: StateViews) -> list[torch.Tensor]:
        start = self.n_position_coords if self.exclude_positions else 0
        return [v.qpos[:, start:], v.qvel]


class HumanoidTask(LocomotionTask):
    """``gymnasium/envs/mujoco/humanoid_v5.py``."""

    n_position_coords = 2
    needs_cfrc_ext = True

    def __init__(self, gym_env, device, dtype=torch.float32):
        super().__init__(gym_env, device, dtype)
        e = gym_env
        self.contact_cost_weight = float(e._contact_cost_weight)
        self.contact_cost_range = tuple(float(x) for x in e._contact_cost_range)
        self.healthy_z_range = tuple(float(x) for x in e._healthy_z_range)
        self.include = {
            "cinert": e._include_cinert_in_observation,
            "cvel": e._include_cvel_in_observation,
            "qfrc_actuator": e._include_qfrc_actuator_in_observation,
            "cfrc_ext": e._include_cfrc_ext_in_observation,
        }
        mass = torch.as_tensor(e.model.body_mass, dtype=dtype, device=device)
        self.mass_fraction = mass / mass.sum()  # (nbody,)

    def position(self, v):
        # mass_center(): the mass-weighted mean of the body centres of mass, x and y.
        return self.mass_fraction @ v.xipos[:, :, :2]  # (nbody,) @ (N, nbody, 2) -> (N, 2)

    def observation(self, v):
        n = v.qpos.shape[0]
        parts = self._positions_and_velocities(v)
        if self.include["cinert"]:
            parts.append(v.cinert[:, 1:].reshape(n, -1))
        if self.include["cvel"]:
            parts.append(v.cvel[:, 1:].reshape(n, -1))
        if self.include["qfrc_actuator"]:
            parts.append(v.qfrc_actuator[:, 6:])
        if self.include["cfrc_ext"]:
            parts.append(v.cfrc_ext[:, 1:].reshape(n, -1))
        return torch.cat(parts, dim=1)

    def healthy(self, v):
        low, high = self.healthy_z_range
        z = v.qpos[:, 2]
        return (low < z) & (z < high)

    def costs(self, v, action):
        contact = self.contact_cost_weight * torch.sum(v.cfrc_ext.square(), dim=(1, 2))
        contact = torch.clamp(contact, *self.contact_cost_range)
        # Gymnasium's Humanoid squares data.ctrl, which the backend sets to the clipped action.
        return {
            "reward_ctrl": -self.ctrl_cost_weight * torch.sum(v.ctrl.square(), dim=-1),
            "reward_contact": -contact,
        }


class AntTask(LocomotionTask):
    """``gymnasium/envs/mujoco/ant_v5.py``."""

    n_position_coords = 2
    gaussian_qvel_noise = True

    def __init__(self, gym_env, device, dtype=torch.float32):
        super().__init__(gym_env, device, dtype)
        e = gym_env
        self.contact_cost_weight = float(e._contact_cost_weight)
        self.contact_force_range = tuple(float(x) for x in e._contact_force_range)
        self.healthy_z_range = tuple(float(x) for x in e._healthy_z_range)
        self.include_cfrc_ext = bool(e._include_cfrc_ext_in_observation)
        self.main_body = int(e.data.body(e._main_body).id)
        self.needs_cfrc_ext = True  # the contact cost reads it even when the observation does not

    def position(self, v):
        return v.xpos[:, self.main_body, :2].clone()

    def _contact_forces(self, v):
        return torch.clamp(v.cfrc_ext, *self.contact_force_range)

    def observation(self, v):
        parts = self._positions_and_velocities(v)
        if self.include_cfrc_ext:
            parts.append(self._contact_forces(v)[:, 1:].reshape(v.qpos.shape[0], -1))
        return torch.cat(parts, dim=1)

    def healthy(self, v):
        low, high = self.healthy_z_range
        finite = torch.isfinite(v.qpos).all(dim=1) & torch.isfinite(v.qvel).all(dim=1)
        z = v.qpos[:, 2]
        return finite & (low <= z) & (z <= high)

    def costs(self, v, action):
        contact = self.contact_cost_weight * torch.sum(self._contact_forces(v).square(), dim=(1, 2))
        return {
            "reward_ctrl": -self.ctrl_cost_weight * torch.sum(action.square(), dim=-1),
            "reward_contact": -contact,
        }


class HalfCheetahTask(LocomotionTask):
    """``gymnasium/envs/mujoco/half_cheetah_v5.py``: no healthy reward, never terminates."""

    gaussian_qvel_noise = True
    has_healthy_reward = False

    def observation(self, v):
        return torch.cat(self._positions_and_velocities(v), dim=1)


class _PlanarWalkerTask(LocomotionTask):
    """Hopper and Walker2d: observation velocities clipped to [-10, 10], z and angle in range."""

    def __init__(self, gym_env, device, dtype=torch.float32):
        super().__init__(gym_env, device, dtype)
        self.healthy_z_range = tuple(float(x) for x in gym_env._healthy_z_range)
        self.healthy_angle_range = tuple(float(x) for x in gym_env._healthy_angle_range)

    def observation(self, v):
        position, velocity = self._positions_and_velocities(v)
        return torch.cat([position, torch.clamp(velocity, -10.0, 10.0)], dim=1)

    def healthy(self, v):
        z, angle = v.qpos[:, 1], v.qpos[:, 2]
        (z_low, z_high), (a_low, a_high) = self.healthy_z_range, self.healthy_angle_range
        return (z_low < z) & (z < z_high) & (a_low < angle) & (angle < a_high)


class HopperTask(_PlanarWalkerTask):
    """``gymnasium/envs/mujoco/hopper_v5.py``: also every state entry but x and z within a range."""

    def __init__(self, gym_env, device, dtype=torch.float32):
        super().__init__(gym_env, device, dtype)
        self.healthy_state_range = tuple(float(x) for x in gym_env._healthy_state_range)

    def healthy(self, v):
        state = torch.cat([v.qpos, v.qvel], dim=1)[:, 2:]
        low, high = self.healthy_state_range
        in_range = ((low < state) & (state < high)).all(dim=1)
        return in_range & super().healthy(v)


class Walker2dTask(_PlanarWalkerTask):
    """``gymnasium/envs/mujoco/walker2d_v5.py``."""


TASKS: dict[str, type[LocomotionTask]] = {
    "Humanoid-v5": HumanoidTask,
    "Ant-v5": AntTask,
    "HalfCheetah-v5": HalfCheetahTask,
    "Hopper-v5": HopperTask,
    "Walker2d-v5": Walker2dTask,
}

# Gymnasium kwargs that only concern rendering, which the batched backends do not do.
RENDER_KWARGS = (
    "render_mode",
    "width",
    "height",
    "camera_id",
    "camera_name",
    "default_camera_config",
    "max_geom",
    "visual_options",
)


def check_task_request(env_id: str, env_kwargs: dict, backend: str, alternatives: str, error: type[Exception]) -> None:
    """Raise ``error`` naming the alternatives for an id without a task here or a rendering kwarg."""
    if env_id not in TASKS:
        raise error(f"{env_id!r}: the {backend} backend implements {', '.join(TASKS)}. Use {alternatives}.")
    rendering = [k for k in RENDER_KWARGS if k in env_kwargs]
    if rendering:
        raise error(
            f"{env_id}: rendering ({', '.join(rendering)}) is not supported by the {backend} backend. Use {alternatives}."
        )
