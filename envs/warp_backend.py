"""Backend ``warp``: thousands of MuJoCo worlds stepped by MuJoCo Warp on one device.

One ``put_model`` and one batched ``Data`` with ``nworld = num_envs``; observations, rewards,
termination and resets are torch operations on zero-copy views (``wp.to_torch``) of that data, so
on a GPU nothing leaves the device: no host round trip per step.

- Tasks: Humanoid, Ant, HalfCheetah, Hopper and Walker2d, v5, with Gymnasium's definitions
  (:mod:`envs.mujoco_tasks`). The model is Gymnasium's own XML. MuJoCo Warp implements the Newton
  and CG solvers only, so a model asking for PGS (Gymnasium's humanoid.xml) runs with Newton.
- Reset: finished worlds (and only those) are reset inside ``step`` to the initial state plus
  Gymnasium's reset noise, then one forward pass computes their first observation.
- On CUDA the physics step (``frame_skip`` MuJoCo steps) and the reset forward pass are captured
  once in CUDA graphs and replayed on torch's current stream.
- Contact and constraint buffers are sized from the model (:func:`contact_buffer_sizes`);
  a world that overflows them raises :class:`WarpOverflowError` instead of running on with
  contacts or constraints missing.
- A model feature MuJoCo Warp does not implement raises :class:`WarpUnsupportedError`.
"""

from __future__ import annotations

import copy
import warnings

import gymnasium as gym
import mujoco
import numpy as np
import torch

from envs.core import TorchVectorEnv
from envs.mujoco_tasks import TASKS, LocomotionTask, StateViews, check_task_request

ALTERNATIVES = "backend='envpool' (Gymnasium's MuJoCo ids on CPU threads) or backend='gymnasium' (any model)"


class WarpUnsupportedError(ValueError):
    """A task, option or model feature the MuJoCo Warp backend does not implement."""


class WarpOverflowError(RuntimeError):
    """A world needed more contacts or constraint rows than the buffers hold."""


def warp_supports(env_id: str) -> bool:
    return env_id in TASKS


# ----- contact and constraint buffer sizes -------------------------------------------------------

# Most contacts MuJoCo's collision functions return for a geom resting on a plane.
_PLANE_CONTACTS = {
    mujoco.mjtGeom.mjGEOM_SPHERE: 1,
    mujoco.mjtGeom.mjGEOM_ELLIPSOID: 1,
    mujoco.mjtGeom.mjGEOM_CAPSULE: 2,
}
_OTHER_PLANE_CONTACTS = 4  # box, cylinder, convex mesh


def _can_collide(mjm: mujoco.MjModel, g1: int, g2: int) -> bool:
    """MuJoCo's default filter: contype/conaffinity bits, other body, not welded, not parent-child."""
    if not (mjm.geom_contype[g1] & mjm.geom_conaffinity[g2] or mjm.geom_contype[g2] & mjm.geom_conaffinity[g1]):
        return False
    b1, b2 = mjm.body_weldid[mjm.geom_bodyid[g1]], mjm.body_weldid[mjm.geom_bodyid[g2]]
    if b1 == b2:
        return False
    filter_parent = not (mjm.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_FILTERPARENT)
    p1, p2 = mjm.body_weldid[mjm.body_parentid[b1]], mjm.body_weldid[mjm.body_parentid[b2]]
    return not (filter_parent and b1 != 0 and b2 != 0 and (p1 == b2 or p2 == b1))


def contact_buffer_sizes(mjm: mujoco.MjModel) -> tuple[int, int]:
    """``(nconmax, njmax)`` per world, from the model's geometry and constraints.

    The contact budget lets every geom that can touch a plane (the floor) rest on it at once with
    its largest contact count, plus one contact per pair of geoms that can touch each other; the
    constraint budget gives each of those contacts its rows (pyramidal cone: ``2 (condim - 1)``,
    elliptic: ``condim``, frictionless: 1) and adds joint and tendon limits, friction loss and
    equality rows. Worlds that exceed it are detected (see ``WarpVectorEnv``), not run on.
    """
    planes = {g for g in range(mjm.ngeom) if mjm.geom_type[g] == mujoco.mjtGeom.mjGEOM_PLANE}
    others = [g for g in range(mjm.ngeom) if g not in planes]
    plane_contacts = 0
    self_touching = 0
    condim = 1
    for g in others:
        if any(_can_collide(mjm, g, p) for p in planes):
            plane_contacts += _PLANE_CONTACTS.get(int(mjm.geom_type[g]), _OTHER_PLANE_CONTACTS)
            condim = max(condim, int(mjm.geom_condim[g]), *(int(mjm.geom_condim[p]) for p in planes))
        if any(_can_collide(mjm, g, h) for h in others if h != g):
            self_touching += 1
            condim = max(condim, int(mjm.geom_condim[g]))
    pair_contacts = _OTHER_PLANE_CONTACTS * mjm.npair
    if mjm.npair:
        condim = max(condim, int(np.max(mjm.pair_dim)))
    nconmax = max(plane_contacts + (self_touching + 1) // 2 + pair_contacts, 1)
    if condim == 1:
        rows = 1
    elif mjm.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC:
        rows = condim
    else:
        rows = 2 * (condim - 1)
    limits = int(np.sum(mjm.jnt_limited)) + int(np.sum(mjm.tendon_limited))
    friction = int(np.sum(mjm.dof_frictionloss > 0)) + int(np.sum(mjm.tendon_frictionloss > 0))
    njmax = nconmax * rows + limits + friction + 6 * mjm.neq
    return int(nconmax), int(njmax)


def reset_noise(task: LocomotionTask, generator: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(qpos, qvel)`` of ``n`` fresh episodes: the task's initial state plus Gymnasium's reset noise.

    The torch twin of :meth:`envs.mujoco_tasks.LocomotionTask.reset_noise_numpy` (same distributions,
    drawn on the env's device from ``generator``, so resets never leave the device).
    """
    s = task.reset_noise_scale
    nq, nv = task.init_qpos.numel(), task.init_qvel.numel()
    qpos = task.init_qpos + (torch.rand(n, nq, generator=generator, device=task.device) * 2 - 1) * s
    if task.gaussian_qvel_noise:
        qvel = task.init_qvel + s * torch.randn(n, nv, generator=generator, device=task.device)
    else:
        qvel = task.init_qvel + (torch.rand(n, nv, generator=generator, device=task.device) * 2 - 1) * s
    return qpos, qvel


# Overflow bits that mean lost contacts or constraint rows (not the solver's iteration limit).
_BUFFER_OVERFLOW_NAMES = ("NEFC", "NJMAX_NNZ", "BROADPHASE", "NARROWPHASE", "CCD", "HFIELD", "NVMAX", "EPA_HORIZON")


class WarpVectorEnv(TorchVectorEnv):
    """MuJoCo Warp vector env; see the module docstring.

    After each step, ``reward_terms`` holds the step's reward terms ``(N,)`` under Gymnasium's
    ``info`` names (``reward_forward``, ``reward_ctrl``, ...) and ``x_velocity`` the forward
    velocity; ``state`` holds torch views of the simulator arrays (:class:`StateViews`).

    Args:
        env_id: one of ``Humanoid-v5``, ``Ant-v5``, ``HalfCheetah-v5``, ``Hopper-v5``, ``Walker2d-v5``.
        num_envs: number of worlds.
        device: ``cpu`` (warp's CPU device: slow, for tests) or ``cuda[:i]``.
        seed: seeds the reset-noise generator.
        nconmax, njmax: contacts / constraint rows per world (default: sized from the model).
        use_graph: capture and replay CUDA graphs (default: on CUDA).
        sync_overflow_check: check the overflow flags on the host right after every physics step
            (always so on the CPU). Default on CUDA: the flag is copied to the host asynchronously
            and read once the copy has landed, a step or two later, so the stream never stalls.
        max_episode_steps: truncation (default: the Gymnasium spec's, 1000).
        env_kwargs: Gymnasium's own kwargs of the env (reward weights, ranges, ``xml_file``, ...).
    """

    backend = "warp"

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        nconmax: int | None = None,
        njmax: int | None = None,
        use_graph: bool | None = None,
        sync_overflow_check: bool | None = None,
        max_episode_steps: int | None = None,
        **env_kwargs,
    ):
        check_task_request(env_id, env_kwargs, "warp", ALTERNATIVES, WarpUnsupportedError)
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device.type not in ("cpu", "cuda"):
            raise WarpUnsupportedError(f"warp backend runs on 'cpu' or 'cuda', not {device}. Use {ALTERNATIVES}.")

        # The Gymnasium env is only read (model, spaces, parameters); it is never stepped.
        self._gym_env = gym.make(env_id, **env_kwargs).unwrapped
        try:
            self._build(env_id, num_envs, device, seed, nconmax, njmax, use_graph, sync_overflow_check, max_episode_steps)
        except BaseException:
            self._gym_env.close()
            raise

    def _build(self, env_id, num_envs, device, seed, nconmax, njmax, use_graph, sync_overflow_check, max_episode_steps):
        import mujoco_warp as mjw
        import warp as wp

        mjm = copy.copy(self._gym_env.model)
        self.solver_note = None
        if mjm.opt.solver == mujoco.mjtSolver.mjSOL_PGS:
            # MuJoCo Warp has Newton and CG only; Gymnasium's humanoid.xml asks for PGS.
            mjm.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
            self.solver_note = "the model asks for the PGS solver, which MuJoCo Warp lacks: it runs with Newton"
        self.mj_model = mjm

        wp.init()
        if device.type == "cuda" and not wp.is_cuda_available():
            raise WarpUnsupportedError(f"warp finds no CUDA device for {device}; use device='cpu' or {ALTERNATIVES}.")
        self._wp = wp
        self._mjw = mjw
        self._wp_device = wp.get_device("cpu" if device.type == "cpu" else f"cuda:{device.index}")
        self._default_nconmax, self._default_njmax = contact_buffer_sizes(mjm)
        self.nconmax = nconmax or self._default_nconmax
        self.njmax = njmax or self._default_njmax
        with wp.ScopedDevice(self._wp_device):
            try:
                self._m = mjw.put_model(mjm)
            except (NotImplementedError, ValueError) as err:
                raise WarpUnsupportedError(
                    f"{env_id}: MuJoCo Warp does not implement a feature of this model: {err} Use {ALTERNATIVES}."
                ) from err
            self._d = mjw.make_data(mjm, nworld=num_envs, nconmax=self.nconmax, njmax=self.njmax)
            # make_data fills the arrays on warp's stream; torch reads them on its own.
            wp.synchronize_device(self._wp_device)

        obs_space = self._gym_env.observation_space
        obs_space = gym.spaces.Box(-np.inf, np.inf, shape=obs_space.shape, dtype=np.float32)
        super().__init__(env_id, num_envs, obs_space, self._gym_env.action_space, device)

        self.task = TASKS[env_id](self._gym_env, self.device)
        self.frame_skip = int(self._gym_env.frame_skip)
        self.max_episode_steps = int(max_episode_steps or gym.spec(env_id).max_episode_steps)
        d = self._d
        t = wp.to_torch
        self.state = StateViews(
            qpos=t(d.qpos),
            qvel=t(d.qvel),
            ctrl=t(d.ctrl),
            xpos=t(d.xpos),
            xipos=t(d.xipos),
            cinert=t(d.cinert),
            cvel=t(d.cvel),
            qfrc_actuator=t(d.qfrc_actuator),
            cfrc_ext=t(d.cfrc_ext),
        )
        self._qacc_warmstart = t(d.qacc_warmstart)
        self._act = t(d.act) if mjm.na else None
        self._time = t(d.time)
        self._overflow = t(d.overflow)
        overflow_type = mjw.OverflowType
        self._overflow_bits = int(np.bitwise_or.reduce([int(getattr(overflow_type, n)) for n in _BUFFER_OVERFLOW_NAMES]))

        self._generator = torch.Generator(device=self.device)
        self._seed = seed
        self._generator.manual_seed(seed if seed is not None else int(np.random.SeedSequence().entropy % 2**63))
        self._elapsed = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self._position = self.task.position(self.state)
        self.reward_terms: dict[str, torch.Tensor] = {}
        self.x_velocity = torch.zeros(num_envs, device=self.device)

        self._cuda = self.device.type == "cuda"
        self.use_graph = self._cuda if use_graph is None else bool(use_graph)
        if self.use_graph and not self._cuda:
            raise WarpUnsupportedError("use_graph=True needs a CUDA device (CUDA graphs).")
        self.sync_overflow_check = (not self._cuda) if sync_overflow_check is None else bool(sync_overflow_check)
        self._graphs: dict[str, object] = {}
        self._stream_cache: dict[int, object] = {}
        if self._cuda:
            self._overflow_host = torch.zeros((), dtype=torch.bool, pin_memory=True)
            self._overflow_event = torch.cuda.Event()
            self._overflow_pending = False
        if self.use_graph:
            self._capture_graphs()

    # ----- physics ---------------------------------------------------------------------------
    def _physics_step(self) -> None:
        for _ in range(self.frame_skip):
            self._mjw.step(self._m, self._d)
        if self.task.needs_cfrc_ext:
            # Gymnasium calls mj_rnePostConstraint after mj_step: cfrc_ext is not filled otherwise.
            self._mjw.rne_postconstraint(self._m, self._d)

    def _forward(self) -> None:
        self._mjw.forward(self._m, self._d)

    def _torch_stream(self):
        """Torch's current stream on this device as a warp stream (cached per handle)."""
        stream = torch.cuda.current_stream(self.device)
        key = stream.cuda_stream
        if key not in self._stream_cache:
            self._stream_cache[key] = self._wp.stream_from_torch(stream)
        return self._stream_cache[key]

    def _run(self, name: str) -> None:
        """Run ``physics`` or ``forward``: a graph replay on CUDA, direct launches otherwise."""
        fn = self._physics_step if name == "physics" else self._forward
        wp = self._wp
        if not self._cuda:
            with wp.ScopedDevice(self._wp_device):
                fn()
        elif self.use_graph:
            # Replayed on torch's stream, so it is ordered after the torch writes to ctrl/qpos.
            wp.capture_launch(self._graphs[name], stream=self._torch_stream())
        else:
            with wp.ScopedDevice(self._wp_device), wp.ScopedStream(self._torch_stream(), sync_enter=False):
                fn()

    def _capture_graphs(self) -> None:
        wp = self._wp
        torch.cuda.synchronize(self.device)
        with wp.ScopedDevice(self._wp_device):
            # One eager pass compiles and loads every kernel first: nothing may load during capture.
            self._physics_step()
            self._forward()
            wp.synchronize_device(self._wp_device)
            try:
                self._capture_each()
            except Exception as err:  # conditional graph nodes need a CUDA 12.4+ driver
                warnings.warn(
                    f"CUDA graph capture with conditional nodes failed ({err}); capturing the solver's "
                    "iterations unrolled instead (m.opt.graph_conditional = False).",
                    stacklevel=2,
                )
                self._m.opt.graph_conditional = False
                self._capture_each()
            wp.synchronize_device(self._wp_device)
        # The warm-up moved the worlds; the first reset() restores them.

    def _capture_each(self) -> None:
        wp = self._wp
        for name, fn in (("physics", self._physics_step), ("forward", self._forward)):
            # Captured on warp's own (non-default) stream, replayed on torch's. The warm-up loaded
            # what the step uses: do not load every module warp knows (minutes).
            with wp.ScopedCapture(device=self._wp_device, force_module_load=False) as capture:
                fn()
            self._graphs[name] = capture.graph

    # ----- overflow --------------------------------------------------------------------------
    def _check_overflow(self) -> None:
        bad = (self._overflow & self._overflow_bits) != 0
        if self._cuda and not self.sync_overflow_check:
            # Read the flag copied after an earlier step once that copy has landed: no stall.
            if self._overflow_pending and self._overflow_event.query():
                self._overflow_pending = False
                if bool(self._overflow_host):
                    self._raise_overflow()
            if not self._overflow_pending:
                self._overflow_host.copy_(bad.any(), non_blocking=True)
                self._overflow_event.record()
                self._overflow_pending = True
        elif bad.any():
            self._raise_overflow()

    def _raise_overflow(self) -> None:
        flags = self._overflow.cpu().numpy()
        worlds = np.flatnonzero(flags & self._overflow_bits)
        kinds = sorted(
            {n for n in _BUFFER_OVERFLOW_NAMES for w in worlds if flags[w] & int(getattr(self._mjw.OverflowType, n))}
        )
        raise WarpOverflowError(
            f"{self.env_id}: world(s) {worlds[:8].tolist()} overflowed MuJoCo Warp's buffers ({', '.join(kinds)}): "
            f"contacts or constraint rows were dropped. The buffers hold nconmax={self.nconmax} contacts and "
            f"njmax={self.njmax} constraint rows per world; pass larger values to envs.make(..., nconmax=..., njmax=...)."
        )

    # ----- state -----------------------------------------------------------------------------
    def _reset_worlds(self, mask: torch.Tensor) -> None:
        """Reset the worlds in ``mask`` (bool ``(N,)``) as Gymnasium's ``reset`` does, without a host sync."""
        s = self.state
        qpos, qvel = reset_noise(self.task, self._generator, self.num_envs)
        col = mask[:, None]
        # mj_resetData: qpos0 (init_qpos), zero velocity, control, warm start and time; then the noise.
        s.qpos.copy_(torch.where(col, qpos, s.qpos))
        s.qvel.copy_(torch.where(col, qvel, s.qvel))
        s.ctrl.masked_fill_(col, 0.0)
        self._qacc_warmstart.masked_fill_(col, 0.0)
        self._time.masked_fill_(mask, 0.0)
        if self._act is not None:
            self._act.masked_fill_(col, 0.0)
        # mj_forward for the new states (the other worlds' integrated state is left as it is).
        self._run("forward")
        # After a reset Gymnasium's cfrc_ext is zero: mj_forward does not compute it.
        s.cfrc_ext.masked_fill_(mask[:, None, None], 0.0)
        self._elapsed.masked_fill_(mask, 0)
        new_position = self.task.position(s)
        mask_p = mask if new_position.ndim == 1 else col
        self._position = torch.where(mask_p, new_position, self._position)

    def set_state(self, qpos, qvel, qacc_warmstart=None) -> torch.Tensor:
        """Load ``(N, nq)`` / ``(N, nv)`` states into all worlds, run a forward pass, return the obs.

        For tests and analysis: derived quantities are recomputed at the given state (``mj_forward``),
        ``cfrc_ext`` is not (as after Gymnasium's ``set_state``), the episode counters are kept.
        """
        s = self.state
        s.qpos.copy_(torch.as_tensor(qpos, dtype=torch.float32))
        s.qvel.copy_(torch.as_tensor(qvel, dtype=torch.float32))
        if qacc_warmstart is not None:
            self._qacc_warmstart.copy_(torch.as_tensor(qacc_warmstart, dtype=torch.float32))
        self._run("forward")
        self._position = self.task.position(s)
        return self.task.observation(s)

    @property
    def elapsed_steps(self) -> torch.Tensor:
        """Steps taken in each world's current episode, int64 ``(N,)`` (writable, for tests)."""
        return self._elapsed

    # ----- the contract ----------------------------------------------------------------------
    def _reset(self, seed: int | None) -> torch.Tensor:
        if seed is None:
            seed, self._seed = self._seed, None
        if seed is not None:
            self._generator.manual_seed(seed)
        self._reset_worlds(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        return self.task.observation(self.state)

    def _step(self, actions: torch.Tensor):
        s = self.state
        s.ctrl.copy_(actions)
        self._run("physics")
        self._check_overflow()

        final_obs, self._position, self.x_velocity, reward, self.reward_terms, terminated = self.task.outcome(
            s, actions, self._position
        )
        self._elapsed += 1
        truncated = self._elapsed >= self.max_episode_steps
        done = terminated | truncated
        # On CUDA the reset runs unconditionally (masked): asking done.any() would stall the stream.
        if self._cuda or bool(done.any()):
            self._reset_worlds(done)
            obs = torch.where(done[:, None], self.task.observation(s), final_obs)
        else:
            obs = final_obs
        return obs, reward.to(torch.float32), terminated, truncated, final_obs

    def close(self) -> None:
        self._graphs.clear()
        self._gym_env.close()
