"""The Stable-Baselines3 adapter: it must behave like SB3's own DummyVecEnv, and SB3 must train on it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv  # noqa: E402

import envs  # noqa: E402
from envs.sb3_adapter import SB3VecEnv  # noqa: E402


def test_matches_dummy_vec_env_through_a_time_limit():
    """Pendulum truncates at 200 steps: obs, rewards, dones, terminal_observation, TimeLimit.truncated."""
    n, seed = 3, 7
    ours = SB3VecEnv(envs.make("Pendulum", n, backend="gymnasium", seed=seed))
    theirs = DummyVecEnv([lambda: gym.make("Pendulum-v1") for _ in range(n)])
    theirs.seed(seed)
    ours.seed(seed)
    np.testing.assert_allclose(ours.reset(), theirs.reset(), rtol=1e-6)
    rng = np.random.default_rng(0)
    saw_done = False
    for _ in range(205):
        actions = rng.uniform(-2, 2, size=(n, 1)).astype(np.float32)
        obs, rewards, dones, infos = ours.step(actions)
        ref_obs, ref_rewards, ref_dones, ref_infos = theirs.step(actions)
        np.testing.assert_allclose(obs, ref_obs, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(rewards, ref_rewards, rtol=1e-5, atol=1e-6)
        assert dones.tolist() == ref_dones.tolist()
        for info, ref in zip(infos, ref_infos):
            assert ("terminal_observation" in info) == ("terminal_observation" in ref)
            if "terminal_observation" in ref:
                saw_done = True
                np.testing.assert_allclose(info["terminal_observation"], ref["terminal_observation"], rtol=1e-5, atol=1e-6)
                assert info["TimeLimit.truncated"] == ref["TimeLimit.truncated"] is True
                assert info["episode"]["l"] == 200
    assert saw_done
    ours.close()
    theirs.close()


def test_is_an_sb3_vec_env_with_the_backend_spaces():
    venv = SB3VecEnv(envs.make("Pendulum", 2, backend="gymnasium", seed=0))
    assert isinstance(venv, VecEnv)
    assert venv.num_envs == 2
    assert venv.observation_space.shape == (3,) and venv.action_space.shape == (1,)
    assert venv.get_attr("render_mode") == [None, None]
    assert venv.env_is_wrapped(gym.Wrapper) == [False, False]
    assert venv.get_attr("backend", indices=[1]) == ["gymnasium"]
    venv.close()


@pytest.mark.slow
def test_sb3_ppo_learns_on_the_warp_backend():
    pytest.importorskip("mujoco_warp")
    venv = SB3VecEnv(envs.make("Hopper", 2, backend="warp", seed=0, max_episode_steps=8))
    model = PPO("MlpPolicy", venv, n_steps=16, batch_size=16, n_epochs=1, seed=0, device="cpu")
    model.learn(total_timesteps=32)
    assert model.num_timesteps == 32
    assert len(model.ep_info_buffer) > 0  # episodes truncated at 8 steps
    venv.close()
