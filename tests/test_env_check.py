"""`python -m envs.check`: a good env passes; each broken env fails the right check, with a reason."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from envs.check import check_env


class PointEnv(gym.Env):
    """A point pushed towards the origin: 2-d position, 2-d bounded force."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = self.np_random.uniform(-1, 1, size=2).astype(np.float32)
        return self.x.copy(), {}

    def step(self, action):
        self.x = (self.x + 0.1 * np.asarray(action, dtype=np.float32)).astype(np.float32)
        distance = float(np.linalg.norm(self.x))
        return self.x.copy(), -distance, bool(distance < 0.1), False, {}


class DiscreteActions(PointEnv):
    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.Discrete(4)


class WrongShape(PointEnv):
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed)
        return np.append(obs, 0.0).astype(np.float32), info


class WrongDtype(PointEnv):
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed)
        return obs.astype(np.float64), info


class ResetWithoutInfo(PointEnv):
    def reset(self, *, seed=None, options=None):
        return super().reset(seed=seed)[0]


class OldStepApi(PointEnv):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated or truncated, info


class ArrayReward(PointEnv):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, np.array([reward]), terminated, truncated, info


class NeverEnds(PointEnv):
    def step(self, action):
        obs, reward, _, truncated, info = super().step(action)
        return obs, reward, False, truncated, info


class IgnoresSeed(PointEnv):
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = np.random.uniform(-1, 1, size=2).astype(np.float32)  # the global generator: not seeded
        return self.x.copy(), {}


class ResetKeepsState(PointEnv):
    """reset() forgets to re-draw the state after the first episode: the next episode starts where the last ended."""

    def reset(self, *, seed=None, options=None):
        if not hasattr(self, "x"):
            return super().reset(seed=seed)
        return self.x.copy(), {}


ENVS = {
    "CheckPoint-v0": PointEnv,
    "CheckDiscrete-v0": DiscreteActions,
    "CheckWrongShape-v0": WrongShape,
    "CheckWrongDtype-v0": WrongDtype,
    "CheckResetNoInfo-v0": ResetWithoutInfo,
    "CheckOldStep-v0": OldStepApi,
    "CheckArrayReward-v0": ArrayReward,
    "CheckIgnoresSeed-v0": IgnoresSeed,
    "CheckResetKeeps-v0": ResetKeepsState,
}
for env_id, cls in ENVS.items():
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=cls, max_episode_steps=30)
if "CheckNeverEnds-v0" not in gym.registry:
    gym.register("CheckNeverEnds-v0", entry_point=NeverEnds)  # no time limit


def failures(env_id: str) -> dict[str, str]:
    return {r.name: r.message for r in check_env(env_id, steps=300) if not r.ok}


def test_a_good_env_passes_every_check():
    results = check_env("CheckPoint-v0", steps=300)
    assert [r.name for r in results] == [
        "registered",
        "make",
        "spaces",
        "reset",
        "step",
        "episode_end",
        "contract",
        "autoreset",
        "determinism",
    ]
    assert all(r.ok and not r.warning for r in results), [r.line() for r in results]


@pytest.mark.parametrize(
    "env_id, check, explanation",
    [
        ("CheckPonit-v0", "registered", "Did you mean 'CheckPoint-v0'"),
        ("CheckDiscrete-v0", "spaces", "Discrete(4) is not a Box"),
        ("CheckWrongShape-v0", "reset", "shape (3,), but the observation space says (2,)"),
        ("CheckWrongDtype-v0", "reset", "dtype float64, but the observation space says float32"),
        ("CheckResetNoInfo-v0", "reset", "must return (obs, info)"),
        ("CheckOldStep-v0", "step", "the old Gym API"),
        ("CheckArrayReward-v0", "step", "reward of type ndarray"),
        ("CheckNeverEnds-v0", "episode_end", "max_episode_steps"),
        ("CheckResetKeeps-v0", "autoreset", "obs equals final_obs"),
        ("CheckIgnoresSeed-v0", "determinism", "self.np_random"),
    ],
)
def test_a_broken_env_fails_the_check_that_names_its_defect(env_id, check, explanation):
    failed = failures(env_id)
    assert list(failed) == [check], failed
    assert explanation in failed[check]


def test_the_command_exits_1_and_prints_the_reason():
    proc = subprocess.run([sys.executable, "-m", "envs.check", "CartPole-v1"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "FAIL spaces" in proc.stdout and "discrete action spaces are not supported" in proc.stdout
