"""Torch-native vector environments behind one contract (see :mod:`envs.core`).

import envs
vec = envs.make("Humanoid", num_envs=8, backend="auto", device="cpu", seed=1)
obs, info = vec.reset()
obs, reward, terminated, truncated, info = vec.step(actions)
"""

from envs.core import EnvRequestError, EnvSpaceError, NonFiniteActionError, TorchVectorEnv
from envs.registry import (
    AUTO_ORDER,
    BACKENDS,
    SHORT_NAMES,
    Backend,
    UnknownEnvError,
    make,
    register_backend,
    resolve_env_id,
    time_limit,
)

__all__ = [
    "AUTO_ORDER",
    "BACKENDS",
    "SHORT_NAMES",
    "Backend",
    "EnvRequestError",
    "EnvSpaceError",
    "NonFiniteActionError",
    "TorchVectorEnv",
    "UnknownEnvError",
    "make",
    "register_backend",
    "resolve_env_id",
    "time_limit",
]
