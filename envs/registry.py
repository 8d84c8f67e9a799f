"""``envs.make``: env ids, short names and the choice of backend.

A backend registers itself in ``BACKENDS`` with a factory and a ``supports(env_id)`` test; ``auto``
takes the first of ``AUTO_ORDER`` that is installed and supports the env (the fastest first).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import gymnasium as gym
import torch

from envs.core import NONFINITE_ACTION_RULES, EnvRequestError, TorchVectorEnv

# Short names -> the current Gymnasium ids.
SHORT_NAMES: dict[str, str] = {
    "Humanoid": "Humanoid-v5",
    "HumanoidStandup": "HumanoidStandup-v5",
    "Ant": "Ant-v5",
    "HalfCheetah": "HalfCheetah-v5",
    "Hopper": "Hopper-v5",
    "Walker2d": "Walker2d-v5",
    "Swimmer": "Swimmer-v5",
    "Reacher": "Reacher-v5",
    "Pusher": "Pusher-v5",
    "InvertedPendulum": "InvertedPendulum-v5",
    "InvertedDoublePendulum": "InvertedDoublePendulum-v5",
    "Pendulum": "Pendulum-v1",
    "MountainCarContinuous": "MountainCarContinuous-v0",
    "LunarLanderContinuous": "LunarLanderContinuous-v3",
}


class UnknownEnvError(EnvRequestError):
    """An env id that is neither a short name nor a registered Gymnasium id."""


def resolve_env_id(env_id: str) -> str:
    """Map a short name to its Gymnasium id; pass registered ids through; else list the known ones.

    ``module:EnvId`` imports ``module`` first (as ``gymnasium.make`` does), so an env that
    registers itself on import works from any agent's command line: ``--env my_envs:MyEnv-v0``.
    ``dmc:domain-task`` is a DeepMind Control Suite task (:mod:`envs.dmc`).
    """
    if env_id.startswith(("dmc:", "dmc/")):  # DeepMind Control Suite tasks (envs/dmc.py)
        from envs.dmc import register as register_dmc

        try:
            return register_dmc(env_id)
        except ValueError as error:
            raise UnknownEnvError(str(error)) from None
    if ":" in env_id:
        module, _, env_id = env_id.partition(":")
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise UnknownEnvError(f"Could not import {module!r} to register {env_id!r}: {error}") from error
    if env_id in SHORT_NAMES:
        return SHORT_NAMES[env_id]
    if env_id in gym.registry:
        return env_id
    candidates = list(SHORT_NAMES) + list(gym.registry)
    close = difflib.get_close_matches(env_id, candidates, n=1, cutoff=0.5)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise UnknownEnvError(
        f"Unknown env {env_id!r}.{hint} Known short names: {', '.join(SHORT_NAMES)}. Any id registered "
        "with Gymnasium works too (gymnasium.register(...) your own env before calling envs.make)."
    )


def time_limit(env_id: str) -> int | None:
    """The env's episode time limit (Gymnasium's ``max_episode_steps``), or None if it has none."""
    return gym.spec(resolve_env_id(env_id)).max_episode_steps


@dataclass(frozen=True)
class Backend:
    name: str
    module: str  # the Python module the backend needs installed
    factory: Callable[..., TorchVectorEnv]
    supports: Callable[[str, torch.device], bool]
    # Whether ``auto`` may pick it on this device (the GPU backend: only on CUDA).
    auto_on: Callable[[torch.device], bool] = lambda device: True
    # Whether its factory takes ``action_repeat=k`` (envs/action_repeat.py).
    repeats_actions: bool = False
    # Whether its factory takes ``num_threads=n``: it steps the sub-environments on a thread pool.
    takes_threads: bool = False

    def installed(self) -> bool:
        return importlib.util.find_spec(self.module) is not None


class _BuiltinBackend(NamedTuple):
    package: str  # the Python package it needs installed
    module: str  # the module that implements it, imported on first use
    env_class: str  # its TorchVectorEnv subclass, called as (env_id, num_envs, device=, seed=, **kwargs)
    supports: str | None  # its ``supports(env_id) -> bool`` function; None: any registered env
    cuda_only: bool = False  # ``auto`` picks it only on CUDA
    repeats_actions: bool = False  # its env class takes ``action_repeat=k``
    takes_threads: bool = False  # its env class takes ``num_threads=n`` (a thread pool steps the envs)


# The built-in backends as one table; ``_lazy`` imports a backend's module only when it is used.
_BUILTIN_BACKENDS: dict[str, _BuiltinBackend] = {
    "gymnasium": _BuiltinBackend("gymnasium", "envs.gymnasium_backend", "GymnasiumVectorEnv", None, repeats_actions=True),
    "mujoco": _BuiltinBackend(
        "mujoco", "envs.mujoco_backend", "MujocoBatchVectorEnv", "mujoco_batch_supports", takes_threads=True
    ),
    "envpool": _BuiltinBackend("envpool", "envs.envpool_backend", "EnvpoolVectorEnv", "envpool_supports", takes_threads=True),
    "warp": _BuiltinBackend("mujoco_warp", "envs.warp_backend", "WarpVectorEnv", "warp_supports", cuda_only=True),
}


def _lazy(module: str, name: str) -> Any:
    """``module.name``, importing ``module`` on first use."""
    return getattr(importlib.import_module(module), name)


def _builtin_backend(name: str, spec: _BuiltinBackend) -> Backend:
    def factory(env_id: str, num_envs: int, device: torch.device, seed: int | None, **kwargs: Any) -> TorchVectorEnv:
        return _lazy(spec.module, spec.env_class)(env_id, num_envs, device=device, seed=seed, **kwargs)

    def supports(env_id: str, device: torch.device) -> bool:
        return spec.supports is None or bool(_lazy(spec.module, spec.supports)(env_id))

    auto_on = (lambda device: device.type == "cuda") if spec.cuda_only else (lambda device: True)
    return Backend(name, spec.package, factory, supports, auto_on, spec.repeats_actions, spec.takes_threads)


BACKENDS: dict[str, Backend] = {name: _builtin_backend(name, spec) for name, spec in _BUILTIN_BACKENDS.items()}
# Fastest first (warp only counts on CUDA: on warp's CPU device it is far slower than envpool).
# ``mujoco`` is Gymnasium bit for bit and 1.2x envpool's steps/s at 8 envs, on par at 64-256
# (benchmarks/env_throughput.py), but implements only the five locomotion tasks.
AUTO_ORDER: list[str] = ["warp", "mujoco", "envpool", "gymnasium"]


def register_backend(backend: Backend, auto_priority: int | None = None) -> None:
    """Add a backend; ``auto_priority`` is its index in the ``auto`` order (None: not used by auto)."""
    BACKENDS[backend.name] = backend
    if auto_priority is not None and backend.name not in AUTO_ORDER:
        AUTO_ORDER.insert(auto_priority, backend.name)


def choose_backend(env_id: str, device: torch.device, action_repeat: int = 1) -> str:
    for name in AUTO_ORDER:
        backend = BACKENDS[name]
        if action_repeat > 1 and not backend.repeats_actions:
            continue
        if backend.installed() and backend.auto_on(device) and backend.supports(env_id, device):
            return name
    return "gymnasium"


def make(
    env_id: str,
    num_envs: int = 1,
    backend: str = "auto",
    device: torch.device | str = "cpu",
    seed: int | None = None,
    nonfinite_actions: str = "raise",
    action_repeat: int = 1,
    num_threads: int = 0,
    **kwargs,
) -> TorchVectorEnv:
    """Make a torch-native vector env (contract in :mod:`envs.core`).

    Args:
        env_id: a short name (``Humanoid``) or any registered Gymnasium id (``Humanoid-v5``).
        num_envs: number of sub-environments, >= 1.
        backend: ``auto`` (fastest installed backend that supports the env), or one of
            ``envs.BACKENDS``.
        device: where the returned tensors live.
        seed: seeds sub-environment i with ``seed + i`` at the first reset.
        nonfinite_actions: ``raise`` (default): ``step`` refuses NaN or infinite actions, naming
            the sub-environments; ``clip``: NaN becomes 0 and inf the bound (see :mod:`envs.core`).
        action_repeat: simulator steps per ``step()``, each with the same action, rewards summed,
            stopping where an episode ends (:mod:`envs.action_repeat`); on the ``gymnasium`` backend.
        num_threads: threads that step the sub-environments, on the backends that run them on a
            thread pool (``mujoco``, ``envpool``); 0: the backend's default, one per CPU.
        kwargs: passed to the backend (Gymnasium: ``vectorization`` and the env's own kwargs).
    """
    if not isinstance(num_envs, int) or num_envs < 1:
        raise EnvRequestError(f"num_envs must be a positive integer, got {num_envs!r}")
    if nonfinite_actions not in NONFINITE_ACTION_RULES:
        raise EnvRequestError(f"nonfinite_actions must be one of {NONFINITE_ACTION_RULES}, got {nonfinite_actions!r}")
    if isinstance(action_repeat, bool) or not isinstance(action_repeat, int) or action_repeat < 1:
        raise EnvRequestError(f"action_repeat must be a positive integer (1: no repeat), got {action_repeat!r}")
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 0:
        raise EnvRequestError(f"num_threads must be a non-negative integer (0: one per CPU), got {num_threads!r}")
    full_id = resolve_env_id(env_id)
    device = torch.device(device)
    if backend == "auto":
        backend = choose_backend(full_id, device, action_repeat)
    if backend not in BACKENDS:
        raise EnvRequestError(f"Unknown backend {backend!r}; choose one of: auto, {', '.join(BACKENDS)}.")
    chosen = BACKENDS[backend]
    if not chosen.installed():
        raise EnvRequestError(
            f"Backend {backend!r} needs the Python package {chosen.module!r}, which is not installed "
            f"(pip install -e '.[all]'), or use backend='gymnasium'."
        )
    if not chosen.supports(full_id, device):
        raise EnvRequestError(
            f"Backend {backend!r} does not support {full_id!r} on {device}. "
            f"Use backend='gymnasium' (any registered env) or backend='auto'."
        )
    if action_repeat > 1:
        if not chosen.repeats_actions:
            raise EnvRequestError(
                f"Backend {backend!r} does not repeat actions (action_repeat={action_repeat}). "
                "Use backend='gymnasium' (any registered env) or backend='auto', or action_repeat=1."
            )
        kwargs["action_repeat"] = action_repeat
    if chosen.takes_threads:
        kwargs["num_threads"] = num_threads
    elif num_threads:
        threaded = ", ".join(name for name, b in BACKENDS.items() if b.takes_threads)
        raise EnvRequestError(
            f"Backend {backend!r} has no thread pool to size (num_threads={num_threads}); only {threaded} do. "
            "Leave num_threads at 0 (--env-threads 0), or pick one of those backends."
        )
    vec_env = chosen.factory(full_id, num_envs, device, seed, **kwargs)
    vec_env.nonfinite_actions = nonfinite_actions
    return vec_env
