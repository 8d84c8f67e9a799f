"""Validate a new environment against the vector-env contract, explaining every failure.

    python -m envs.check MyEnv-v0 [--import my_package.envs] [--backend gymnasium] [--steps 1000]
    python -m envs.check my_package.envs:MyEnv-v0          # Gymnasium's "module:id" form imports the module

Checks, in order (a failed check says what is wrong and how to fix it; later checks that depend on
it are skipped):

``registered``   the id resolves (short name or ``gymnasium.register``-ed id).
``make``         ``gymnasium.make(id)`` builds one env.
``spaces``       observation and action spaces are Boxes, the action bounds finite
                 (:func:`envs.core.check_spaces`).
``reset``        ``reset(seed=...)`` returns ``(obs, info)``; ``obs`` matches the observation space
                 (shape, dtype, bounds) and is finite.
``step``         ``step(action)`` returns five values: ``obs`` as above, a finite real reward,
                 ``terminated`` / ``truncated`` as bools, an ``info`` dict.
``episode_end``  an episode ends within ``--steps`` random steps (a time limit registered with
                 ``max_episode_steps`` counts); without that, agents never see a reset.
``contract``     ``envs.make(id, num_envs=2)`` returns tensors of the contract's shapes and dtypes,
                 ``info`` holds ``final_obs``, ``done``, ``episode_return``, ``episode_length``.
``autoreset``    when a sub-environment finishes, ``final_obs`` is where it ended, ``obs`` the
                 first observation of its next episode, and ``episode_return`` /
                 ``episode_length`` equal the sum of its rewards / its number of steps.
``determinism``  two envs made with the same seed and given the same actions produce the same
                 observations, rewards and ends; a different seed changes the first observation.

:func:`check_env` returns the list of :class:`CheckResult`; the command prints them and exits 1
when any failed.
"""

from __future__ import annotations

import importlib
import numbers
import sys
from dataclasses import dataclass, field
from typing import Annotated, cast

import gymnasium as gym
import numpy as np
import torch
import tyro

from envs.core import EnvSpaceError, check_spaces
from envs.registry import UnknownEnvError, make, resolve_env_id

SEED_HINT = (
    "Randomness must come from the env's own generator: call super().reset(seed=seed) first in "
    "reset() and draw from self.np_random (never np.random / random / time)."
)


@dataclass
class CheckResult:
    name: str
    ok: bool
    message: str
    warning: bool = False  # ok, but something a user should know

    def line(self) -> str:
        status = "PASS" if self.ok and not self.warning else ("WARN" if self.ok else "FAIL")
        return f"{status} {self.name}: {self.message}"


class _Failed(Exception):
    """Raised inside a check to stop it with an explanation."""


def _describe_obs_problem(obs, space: gym.spaces.Box, where: str) -> str | None:
    """Why ``obs`` does not belong to ``space``, or None."""
    if not isinstance(obs, np.ndarray):
        return (
            f"{where} returned an observation of type {type(obs).__name__}, expected a numpy array "
            f"(np.asarray(obs, dtype=np.{space.dtype}))"
        )
    if obs.shape != space.shape:
        return f"{where} returned an observation of shape {obs.shape}, but the observation space says {space.shape}"
    if obs.dtype != space.dtype:
        return (
            f"{where} returned an observation of dtype {obs.dtype}, but the observation space says "
            f"{space.dtype}; cast it (obs.astype(np.{space.dtype})) or declare the space with that dtype"
        )
    if not np.all(np.isfinite(obs)):
        return f"{where} returned an observation with NaN or inf values: {obs}"
    if not space.contains(obs):
        return (
            f"{where} returned an observation outside the observation space bounds "
            f"(low {space.low}, high {space.high}): {obs}; widen the bounds (-np.inf, np.inf are allowed)"
        )
    return None


def _check_single_env(env: gym.Env, seed: int, steps: int) -> list[CheckResult]:
    """The Gymnasium API of one env: reset, step, and whether episodes end."""
    results = []
    time_limit = env.spec.max_episode_steps if env.spec is not None else None
    env = env.unwrapped  # the env's own methods: wrappers would fail first, with less telling messages
    space = cast(gym.spaces.Box, env.observation_space)  # check_env checked the spaces first
    try:
        out: tuple = env.reset(seed=seed)  # checked below: envs may break the API
        if not (isinstance(out, tuple) and len(out) == 2):
            raise _Failed(
                f"reset() must return (obs, info) (Gymnasium >= 0.26 API), got {type(out).__name__}"
                + (f" of length {len(out)}" if isinstance(out, tuple) else "")
            )
        obs, info = out
        if not isinstance(info, dict):
            raise _Failed(f"reset() returned info of type {type(info).__name__}, expected a dict")
        problem = _describe_obs_problem(obs, space, "reset()")
        if problem:
            raise _Failed(problem)
        results.append(CheckResult("reset", True, f"obs {obs.shape} {obs.dtype} in the observation space"))
    except _Failed as exc:
        return results + [CheckResult("reset", False, str(exc))]
    except Exception as exc:
        return results + [CheckResult("reset", False, f"reset(seed={seed}) raised {type(exc).__name__}: {exc}")]

    env.action_space.seed(seed)
    ended_at = None
    try:
        for t in range(steps):
            out = env.step(env.action_space.sample())
            if not (isinstance(out, tuple) and len(out) == 5):
                n = len(out) if isinstance(out, tuple) else 1
                raise _Failed(
                    f"step() must return (obs, reward, terminated, truncated, info); it returned {n} "
                    "value(s)" + (" (the old Gym API with a single done flag)" if n == 4 else "")
                )
            obs, reward, terminated, truncated, info = out
            problem = _describe_obs_problem(obs, space, f"step() at step {t}")
            if problem:
                raise _Failed(problem)
            if isinstance(reward, (bool, np.bool_)) or not isinstance(reward, (numbers.Real, np.floating, np.integer)):
                raise _Failed(
                    f"step() returned a reward of type {type(reward).__name__} ({reward!r}), expected a "
                    "Python or numpy float (use float(reward))"
                )
            if not np.isfinite(reward):  # type: ignore[arg-type]  # numpy's stubs reject numbers.Real; np.isfinite takes it
                raise _Failed(f"step() returned a non-finite reward {reward} at step {t}")
            for name, flag in (("terminated", terminated), ("truncated", truncated)):
                if not isinstance(flag, (bool, np.bool_)):
                    raise _Failed(
                        f"step() returned {name}={flag!r} of type {type(flag).__name__}, expected a bool (use bool({name}))"
                    )
            if not isinstance(info, dict):
                raise _Failed(f"step() returned info of type {type(info).__name__}, expected a dict")
            if terminated or truncated or (time_limit is not None and t + 1 >= time_limit):
                ended_at = t + 1
                break
        results.append(CheckResult("step", True, "obs, reward, terminated, truncated and info have the right types"))
    except _Failed as exc:
        return results + [CheckResult("step", False, str(exc))]
    except Exception as exc:
        return results + [CheckResult("step", False, f"step(action) raised {type(exc).__name__}: {exc}")]
    if ended_at is None:
        results.append(
            CheckResult(
                "episode_end",
                False,
                f"no episode ended within {steps} random steps. Register the env with a time limit "
                "(gymnasium.register(..., max_episode_steps=N)) so that episodes end and agents see resets; "
                "or pass a larger --steps if its episodes are longer",
            )
        )
    else:
        results.append(CheckResult("episode_end", True, f"the first random episode ended after {ended_at} steps"))
    return results


def _rollout(env_id: str, backend: str, seed: int, actions: np.ndarray) -> dict[str, np.ndarray]:
    """Obs, rewards and ends of a 2-env vector env stepped with ``actions`` ``(T, 2, *act_shape)``."""
    vec = make(env_id, num_envs=actions.shape[1], backend=backend, seed=seed)
    try:
        obs, _ = vec.reset()
        all_obs, rewards, dones = [obs.cpu().numpy()], [], []
        for a in actions:
            obs, reward, terminated, truncated, info = vec.step(torch.as_tensor(a))
            all_obs.append(obs.cpu().numpy())
            rewards.append(reward.cpu().numpy())
            dones.append(info["done"].cpu().numpy())
    finally:
        vec.close()
    return {"obs": np.stack(all_obs), "reward": np.stack(rewards), "done": np.stack(dones)}


def _check_contract(env_id: str, backend: str, seed: int, steps: int) -> list[CheckResult]:
    """Shapes and dtypes of ``envs.make``'s tensors, then same-step autoreset and its statistics."""
    n = 2
    try:
        vec = make(env_id, num_envs=n, backend=backend, seed=seed)
    except Exception as exc:  # the message of the backend is the explanation
        return [
            CheckResult(
                "contract",
                False,
                f"envs.make({env_id!r}, num_envs={n}, backend={backend!r}) raised {type(exc).__name__}: {exc}",
            )
        ]
    obs_shape = vec.single_observation_space.shape
    act_space = vec.single_action_space
    rng = np.random.default_rng(seed)
    results = []
    try:
        obs, info = vec.reset()
        if obs.dtype != torch.float32 or tuple(obs.shape) != (n, *obs_shape):
            raise _Failed(f"reset() gave obs {tuple(obs.shape)} {obs.dtype}, expected {(n, *obs_shape)} float32")
        episode_return = np.zeros(n)
        episode_length = np.zeros(n, dtype=np.int64)
        ended = 0
        for t in range(steps):
            action = rng.uniform(act_space.low, act_space.high, size=(n, *act_space.shape)).astype(np.float32)
            obs, reward, terminated, truncated, info = vec.step(torch.as_tensor(action))
            expected = {
                "obs": (obs, (n, *obs_shape), torch.float32),
                "reward": (reward, (n,), torch.float32),
                "terminated": (terminated, (n,), torch.bool),
                "truncated": (truncated, (n,), torch.bool),
            }
            missing = {"final_obs", "done", "episode_return", "episode_length"} - set(info)
            if missing:
                raise _Failed(f"step() info lacks {sorted(missing)}")
            expected["info['final_obs']"] = (info["final_obs"], (n, *obs_shape), torch.float32)
            expected["info['done']"] = (info["done"], (n,), torch.bool)
            for name, (value, shape, dtype) in expected.items():
                if tuple(value.shape) != shape or value.dtype != dtype:
                    raise _Failed(f"step() gave {name} {tuple(value.shape)} {value.dtype}, expected {shape} {dtype}")
            if not torch.isfinite(obs).all() or not torch.isfinite(reward).all():
                raise _Failed(f"step {t}: NaN or inf in obs or reward")
            done = info["done"].cpu().numpy()
            final_obs, obs_np = info["final_obs"].cpu().numpy(), obs.cpu().numpy()
            if not np.array_equal(final_obs[~done], obs_np[~done]):
                raise _Failed(f"step {t}: info['final_obs'] differs from obs for sub-environments that did not finish")
            episode_return += reward.cpu().numpy()
            episode_length += 1
            for i in np.flatnonzero(done):
                got_len = int(info["episode_length"][i])
                got_ret = float(info["episode_return"][i])
                if got_len != episode_length[i]:
                    raise _Failed(
                        f"sub-env {i} finished after {episode_length[i]} steps but info['episode_length'] says {got_len}"
                    )
                if not np.isclose(got_ret, episode_return[i], rtol=1e-4, atol=1e-3):
                    raise _Failed(
                        f"sub-env {i}: info['episode_return'] {got_ret:.4f} is not the sum of its rewards "
                        f"{episode_return[i]:.4f}"
                    )
                if np.array_equal(final_obs[i], obs_np[i]):
                    raise _Failed(
                        f"sub-env {i} finished at step {t} but obs equals final_obs: it was not reset in the same "
                        "step, or reset() returns the observation it ended on. The first observation of an "
                        "episode must come from reset(); " + SEED_HINT
                    )
                ended += 1
            episode_return[done] = 0.0
            episode_length[done] = 0
        results.append(
            CheckResult(
                "contract", True, f"tensors of the contract's shapes and dtypes for {steps} steps ({vec.backend} backend)"
            )
        )
        if ended:
            results.append(
                CheckResult(
                    "autoreset",
                    True,
                    f"{ended} episode ends: same-step reset, final_obs, episode_return and episode_length correct",
                )
            )
        else:
            results.append(CheckResult("autoreset", True, f"not exercised: no episode ended in {steps} steps", warning=True))
    except _Failed as exc:
        name = "autoreset" if results or "finished" in str(exc) or "final_obs" in str(exc) else "contract"
        if name == "autoreset":
            results.append(CheckResult("contract", True, "tensors of the contract's shapes and dtypes"))
        results.append(CheckResult(name, False, str(exc)))
    except Exception as exc:
        results.append(CheckResult("contract", False, f"the vector env raised {type(exc).__name__}: {exc}"))
    finally:
        vec.close()
    return results


def _check_determinism(env_id: str, backend: str, seed: int, steps: int) -> list[CheckResult]:
    vec = make(env_id, num_envs=2, backend=backend, seed=seed)
    act_space = vec.single_action_space
    vec.close()
    rng = np.random.default_rng(seed + 1)
    actions = rng.uniform(act_space.low, act_space.high, size=(steps, 2, *act_space.shape)).astype(np.float32)
    first, second = _rollout(env_id, backend, seed, actions), _rollout(env_id, backend, seed, actions)
    for key in ("obs", "reward", "done"):
        differs = np.flatnonzero([not np.array_equal(a, b) for a, b in zip(first[key], second[key])])
        if len(differs):
            t = int(differs[0])
            when = "after reset" if key == "obs" and t == 0 else f"at step {t if key == 'obs' else t + 1}"
            return [
                CheckResult(
                    "determinism",
                    False,
                    f"two envs seeded {seed} and given the same actions gave different {key} {when}. " + SEED_HINT,
                )
            ]
    other = _rollout(env_id, backend, seed + 100, actions[:1])
    if np.array_equal(other["obs"][0], first["obs"][0]):
        return [
            CheckResult(
                "determinism",
                True,
                f"same seed, same trajectory; but seeds {seed} and {seed + 100} give the same first "
                "observation (fine if the initial state is fixed; otherwise reset() ignores its seed: " + SEED_HINT + ")",
                warning=True,
            )
        ]
    return [CheckResult("determinism", True, f"same seed and actions, same trajectory over {steps} steps")]


def check_env(env_id: str, backend: str = "gymnasium", seed: int = 0, steps: int = 1000) -> list[CheckResult]:
    """Run every check on ``env_id`` (see the module docstring); return their results in order."""
    try:
        full_id = resolve_env_id(env_id)  # "module:EnvId" imports the module, which registers the env
    except UnknownEnvError as exc:
        return [CheckResult("registered", False, str(exc))]
    results = [CheckResult("registered", True, full_id)]
    try:
        # Gymnasium's own passive checker would stop at its first assertion without the explanations below.
        env = gym.make(full_id, disable_env_checker=True)
    except Exception as exc:
        return results + [CheckResult("make", False, f"gymnasium.make({full_id!r}) raised {type(exc).__name__}: {exc}")]
    results.append(CheckResult("make", True, f"{env.observation_space} -> {env.action_space}"))
    try:
        try:
            check_spaces(full_id, env.observation_space, env.action_space)
        except EnvSpaceError as exc:
            return results + [CheckResult("spaces", False, str(exc))]
        results.append(CheckResult("spaces", True, "Box observations, Box actions with finite bounds"))
        single = _check_single_env(env, seed, steps)
        results += single
        if not all(r.ok for r in single if r.name != "episode_end"):
            return results
    finally:
        env.close()
    results += _check_contract(full_id, backend, seed, steps)
    if not all(r.ok for r in results):
        return results
    results += _check_determinism(full_id, backend, seed, min(steps, 200))
    return results


@dataclass
class CheckArgs:
    """Check an environment against the vector-env contract, explaining every failure."""

    env_id: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="ENV_ID")]
    """registered Gymnasium id, short name, module:EnvId, or dmc:domain-task"""
    imports: Annotated[list[str], tyro.conf.arg(name="import"), tyro.conf.UseAppendAction] = field(default_factory=list)
    """import this module first (it registers the env)"""
    backend: str = "gymnasium"
    """backend to check through envs.make"""
    seed: int = 0
    """seed of the first reset"""
    steps: int = 1000
    """random steps to look for episode ends"""


def main(argv: list[str] | None = None) -> int:
    args = tyro.cli(CheckArgs, args=argv, prog="python -m envs.check", description=__doc__)
    for module in args.imports:
        importlib.import_module(module)
    results = check_env(args.env_id, backend=args.backend, seed=args.seed, steps=args.steps)
    for r in results:
        print(r.line())
    failed = [r for r in results if not r.ok]
    print(f"{args.env_id}: " + (f"{len(failed)} check(s) failed" if failed else "follows the contract"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
