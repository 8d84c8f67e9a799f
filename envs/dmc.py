"""DeepMind Control Suite tasks as Gymnasium envs: ``envs.make("dmc:cheetah-run", ...)``.

``dmc:<domain>-<task>`` names a task of ``dm_control.suite`` (``dmc:cheetah-run``, ``dmc:walker-walk``,
``dmc:dog-run``, ``dmc:humanoid_CMU-stand``; an unknown name lists all 51). On first use it is
registered with Gymnasium as ``dmc/<domain>-<task>-v0``: the suite's environment wrapped by shimmy's
``DmControlCompatibilityV0``, its dict of observations flattened into one vector (in the suite's key
order), and a 1,000-step time limit, the episode length every suite task except LQR already has
(20 s of control at 50 Hz, or the task's equivalent). Rewards are the suite's, in [0, 1] per step.
Episodes end by truncation at the time limit; no suite task terminates earlier.

Only the ``gymnasium`` backend runs them (``auto`` picks it). Rendering (``render_mode="rgb_array"``,
``width``, ``height``, ``camera_id``) goes through dm_control's own off-screen renderer; camera 0 is
each task's default view.

**Task cycles** (non-stationary training on one embodiment): ``dmc:<domain>-<task>.<task>...-every<N>``,
for example ``dmc:walker-stand.walk.run-every25000``, is one env that runs the listed tasks of the
domain in turn, N steps each, over and over: visit v (counted from 0) runs task ``v mod k``. The
tasks must share observation and action spaces (they do within a domain: walker's stand, walk and
run differ only in their reward). Each sub-environment counts its own steps and switches task at
the first reset after N of them, so N must be a multiple of the 1,000-step episode and the switch
falls between episodes; with ``--num-envs 8``, a visit spans 8N of the agent's steps (all
sub-environments step together). ``info["task"]`` and ``info["visit"]`` name the running task and
visit (``cycle_visits`` gives the tasks and the agent steps per visit).

Needs ``pip install -e ".[dmc]"`` (dm-control and shimmy).

dm-control's bindings index MuJoCo's model and data by a table of field names generated for the
MuJoCo it was released with; that table lists a few flex fields (deformable bodies, which no suite
task has) that MuJoCo 4.0 no longer has, so the fields the installed MuJoCo lacks are dropped from
it before the first task is built (all 51 tasks then reset and step). Under MuJoCo 4.0 the suite's
models also use a deprecated compiler attribute (``settotalmass``); the compiler's warning about
it, one per environment built, is not repeated on the log.
"""

from __future__ import annotations

import difflib
import logging
import os
from functools import cache

import gymnasium as gym

PREFIX = "dmc:"
GYM_NAMESPACE = "dmc/"
EPISODE_STEPS = 1000
CYCLE_MARK = "-every"  # dmc:<domain>-<task>.<task>...-every<steps per visit>


def is_dmc(env_id: str) -> bool:
    return env_id.startswith((PREFIX, GYM_NAMESPACE))


def default_gl_platform() -> str | None:
    """The MuJoCo GL platform to set when ``MUJOCO_GL`` is unset: EGL (off-screen, no display) where
    libEGL is installed; otherwise none, since ``import mujoco`` fails outright with MUJOCO_GL=egl and
    no libEGL (a minimal Debian has none), and DMC's physics needs no rendering."""
    import ctypes.util

    return "egl" if ctypes.util.find_library("EGL") else None


@cache
def _import_suite():
    # Off-screen rendering without a display, unless the user chose another MuJoCo GL backend.
    platform = default_gl_platform()
    if platform is not None:
        os.environ.setdefault("MUJOCO_GL", platform)
    try:
        import mujoco
        from dm_control import suite
        from dm_control.mujoco.wrapper.mjbindings import sizes
        from shimmy.dm_control_compatibility import DmControlCompatibilityV0  # noqa: F401
    except ImportError as error:
        raise ImportError(
            f"DeepMind Control Suite tasks need dm-control and shimmy ({error}). Install them with "
            "pip install -e '.[dmc]' (or pip install dm-control shimmy)."
        ) from error
    logging.getLogger("absl").addFilter(lambda record: "settotalmass" not in record.getMessage())
    model = mujoco.MjModel.from_xml_string("<mujoco/>")
    for struct, instance in (("mjmodel", model), ("mjdata", mujoco.MjData(model))):
        for name in [name for name in sizes.array_sizes[struct] if not hasattr(instance, name)]:
            del sizes.array_sizes[struct][name]
    return suite


def task_names() -> list[str]:
    """Every suite task as ``domain-task``."""
    return [f"{domain}-{task}" for domain, task in _import_suite().ALL_TASKS]


def make_dmc_env(
    domain: str,
    task: str,
    render_mode: str | None = None,
    width: int = 320,
    height: int = 240,
    camera_id: int = 0,
    task_kwargs: dict | None = None,
) -> gym.Env:
    """The suite's ``domain``/``task`` as a Gymnasium env with flat observations (Gymnasium's entry point)."""
    from shimmy.dm_control_compatibility import DmControlCompatibilityV0

    class FlatDmControlEnv(DmControlCompatibilityV0):
        """shimmy's env with the suite's dict of observations flattened into one vector, in the env
        itself (not a wrapper), so that ``env.unwrapped`` has the spaces the agents see."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.dict_observation_space = self.observation_space
            self.observation_space = gym.spaces.flatten_space(self.dict_observation_space)

        def reset(self, *, seed=None, options=None):
            obs, info = super().reset(seed=seed, options=options)
            return gym.spaces.flatten(self.dict_observation_space, obs), info

        def step(self, action):
            obs, reward, terminated, truncated, info = super().step(action)
            return gym.spaces.flatten(self.dict_observation_space, obs), reward, terminated, truncated, info

    env = _import_suite().load(domain, task, task_kwargs=task_kwargs)
    render_kwargs = {"width": width, "height": height, "camera_id": camera_id}
    return FlatDmControlEnv(env, render_mode=render_mode, render_kwargs=render_kwargs)


class TaskCycleEnv(gym.Env):
    """The tasks of one domain in turn, ``visit_steps`` steps each, over and over (the module's
    docstring). The switch happens at a reset, so episodes never mix two tasks."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, domain: str, tasks: tuple[str, ...], visit_steps: int, render_mode: str | None = None, **kwargs):
        self.tasks, self.visit_steps = tuple(tasks), visit_steps
        self.envs = [make_dmc_env(domain, task, render_mode=render_mode, **kwargs) for task in tasks]
        first = self.envs[0]
        for task, env in zip(tasks[1:], self.envs[1:]):
            if env.observation_space != first.observation_space or env.action_space != first.action_space:
                raise ValueError(
                    f"dmc task cycle: {domain}-{task} has other observation or action spaces than {domain}-{tasks[0]} "
                    f"({env.observation_space}, {env.action_space} against {first.observation_space}, "
                    f"{first.action_space}); a cycle needs tasks of one embodiment"
                )
        self.observation_space, self.action_space = first.observation_space, first.action_space
        self.render_mode = render_mode
        self.steps = 0  # this sub-environment's steps over all visits
        self.visit = 0

    @property
    def current(self) -> gym.Env:
        return self.envs[self.visit % len(self.envs)]

    def _info(self, info: dict) -> dict:
        return info | {"task": self.tasks[self.visit % len(self.tasks)], "visit": self.visit}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:  # every task's own random state, from the one seed
            for i, env in enumerate(self.envs[1:], start=1):
                env.reset(seed=seed + 7919 * i)
        self.visit = self.steps // self.visit_steps
        obs, info = self.current.reset(seed=seed, options=options)
        return obs, self._info(info)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.current.step(action)
        self.steps += 1
        return obs, reward, terminated, truncated, self._info(info)

    def render(self):
        return self.current.render()

    def close(self):
        for env in self.envs:
            env.close()


def parse_cycle(name: str) -> tuple[str, tuple[str, ...], int] | None:
    """``domain-task.task...-every<N>`` as (domain, tasks, N); None for a single task's name.

    Raises:
        ValueError: a malformed cycle (its problem and the expected form named).
    """
    if CYCLE_MARK not in name and "." not in name:
        return None
    form = (
        f"expected {PREFIX}<domain>-<task>.<task>...{CYCLE_MARK}<steps per visit>, "
        f"e.g. {PREFIX}walker-stand.walk.run{CYCLE_MARK}25000"
    )
    head, mark, steps = name.rpartition(CYCLE_MARK)
    domain, _, task_list = head.partition("-")
    tasks = tuple(task_list.split("."))
    if not mark or not steps.isdigit() or not domain or len(tasks) < 2 or not all(tasks):
        raise ValueError(f"Malformed DeepMind Control task cycle {PREFIX}{name!r}: {form}")
    visit_steps = int(steps)
    if visit_steps <= 0 or visit_steps % EPISODE_STEPS:
        raise ValueError(
            f"DeepMind Control task cycle {PREFIX}{name!r}: {visit_steps} steps per visit is not a positive multiple "
            f"of the {EPISODE_STEPS}-step episode, so a switch would fall inside an episode; {form}"
        )
    return domain, tasks, visit_steps


def cycle_visits(env_id: str, num_envs: int = 1) -> tuple[tuple[str, ...], int] | None:
    """A task cycle's tasks and agent steps per visit (its steps per visit times ``num_envs``, the
    sub-environments stepping together; simulator steps, with action repeat too); None for any other env."""
    if not is_dmc(env_id):
        return None
    cycle = parse_cycle(env_id.removeprefix(PREFIX).removeprefix(GYM_NAMESPACE).removesuffix("-v0"))
    return None if cycle is None else (cycle[1], cycle[2] * num_envs)


def register(env_id: str) -> str:
    """Register ``dmc:domain-task`` (or ``dmc/domain-task-v0``), or a task cycle, with Gymnasium;
    return the Gymnasium id."""
    name = env_id[len(PREFIX) :] if env_id.startswith(PREFIX) else env_id[len(GYM_NAMESPACE) :].removesuffix("-v0")
    gym_id = f"{GYM_NAMESPACE}{name}-v0"
    if gym_id in gym.registry:
        return gym_id
    known = task_names()
    cycle = parse_cycle(name)
    for task_name in [f"{cycle[0]}-{task}" for task in cycle[1]] if cycle else [name]:
        if task_name not in known:
            close = difflib.get_close_matches(task_name, known, n=1, cutoff=0.5)
            hint = f" Did you mean 'dmc:{close[0]}'?" if close else ""
            raise ValueError(
                f"Unknown DeepMind Control task '{PREFIX}{task_name}' in {env_id!r}.{hint} Tasks: {', '.join(known)}."
            )
    if cycle:
        domain, tasks, visit_steps = cycle
        kwargs = {"domain": domain, "tasks": tasks, "visit_steps": visit_steps}
        gym.register(gym_id, entry_point=TaskCycleEnv, kwargs=kwargs, max_episode_steps=EPISODE_STEPS)  # type: ignore[arg-type]
        return gym_id
    domain, task = name.split("-", 1)
    # gymnasium's EnvCreator protocol is (**kwargs) -> Env, which rejects named keyword parameters like ours.
    gym.register(gym_id, entry_point=make_dmc_env, kwargs={"domain": domain, "task": task}, max_episode_steps=EPISODE_STEPS)  # type: ignore[arg-type]
    return gym_id
