"""The ``mujoco`` backend (mujoco.batch.Batch) against Gymnasium's own vector env, step by step."""

import gymnasium as gym
import numpy as np
import pytest
import torch

import envs
from envs.mujoco_backend import MujocoBatchUnsupportedError, MujocoBatchVectorEnv
from envs.mujoco_tasks import TASKS


def _gymnasium_reference(env_id: str, num_envs: int, **kwargs):
    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        **kwargs,
    )


def _assert_same_as_gymnasium(env_id: str, steps: int, num_envs: int = 3, seed: int = 7, **kwargs):
    """Same seed, same actions: identical observations (resets included), rewards to float32 rounding."""
    ours = envs.make(env_id, num_envs, backend="mujoco", seed=seed, **kwargs)
    reference = _gymnasium_reference(env_id, num_envs, **kwargs)
    obs, _ = ours.reset()
    ref_obs, _ = reference.reset(seed=seed)
    np.testing.assert_array_equal(obs.numpy(), ref_obs.astype(np.float32))
    rng = np.random.default_rng(seed)
    low, high = ours.single_action_space.low, ours.single_action_space.high
    finished = 0
    for t in range(steps):
        action = rng.uniform(low, high, (num_envs, low.size)).astype(np.float32)
        obs, reward, terminated, truncated, info = ours.step(torch.from_numpy(action))
        ref_obs, ref_reward, ref_terminated, ref_truncated, ref_info = reference.step(action)
        np.testing.assert_array_equal(terminated.numpy(), ref_terminated, err_msg=f"step {t}")
        np.testing.assert_array_equal(truncated.numpy(), ref_truncated, err_msg=f"step {t}")
        np.testing.assert_array_equal(obs.numpy(), ref_obs.astype(np.float32), err_msg=f"step {t}")
        np.testing.assert_allclose(reward.numpy(), ref_reward, rtol=1e-6, atol=1e-6, err_msg=f"step {t}")
        done = ref_terminated | ref_truncated
        for i in np.flatnonzero(done):
            np.testing.assert_array_equal(info["final_obs"][i].numpy(), ref_info["final_obs"][i].astype(np.float32))
        finished += int(done.sum())
    ours.close()
    reference.close()
    return finished


@pytest.mark.parametrize("env_id", sorted(TASKS))
def test_steps_and_resets_equal_gymnasium(env_id):
    steps = 120 if env_id == "HalfCheetah-v5" else 250
    finished = _assert_same_as_gymnasium(env_id, steps)
    if env_id != "HalfCheetah-v5":  # random actions end these episodes within 250 steps
        assert finished >= 3


def test_truncation_and_gymnasium_kwargs_are_honoured():
    # HalfCheetah never terminates: every world is truncated together at the time limit, and the
    # resets that follow draw Gaussian qvel noise at the user's scale.
    finished = _assert_same_as_gymnasium("HalfCheetah-v5", 45, max_episode_steps=20, reset_noise_scale=0.3)
    assert finished == 3 * 2


def test_cfrc_ext_is_gymnasiums_after_the_step():
    """Humanoid's observation ends with cfrc_ext, which a batch does not compute: it must be nonzero
    once the body touches the floor, and equal to Gymnasium's (checked step by step above)."""
    ours = envs.make("Humanoid", 2, backend="mujoco", seed=0)
    ours.reset()
    contact = 0.0
    for _ in range(40):
        obs, *_ = ours.step(torch.zeros(2, 17))
        contact = max(contact, obs[:, -78:].abs().max().item())  # cfrc_ext of bodies 1..13
    assert contact > 1.0


def test_unsupported_ids_and_rendering_are_refused_with_the_alternatives():
    with pytest.raises(MujocoBatchUnsupportedError, match="implements Humanoid-v5.*backend='envpool'"):
        MujocoBatchVectorEnv("InvertedPendulum-v5", 1)
    with pytest.raises(MujocoBatchUnsupportedError, match="rendering .*render_mode"):
        MujocoBatchVectorEnv("Hopper-v5", 1, render_mode="rgb_array")
    with pytest.raises(ValueError, match="does not support 'Swimmer-v5'"):
        envs.make("Swimmer", 1, backend="mujoco")


def test_set_state_reproduces_gymnasiums_observation():
    ours = MujocoBatchVectorEnv("Walker2d-v5", 2, seed=1)
    ours.reset()
    plain = gym.make("Walker2d-v5").unwrapped
    plain.reset(seed=0)
    qpos = plain.init_qpos + np.linspace(-0.1, 0.1, plain.model.nq)
    qvel = np.linspace(-12, 12, plain.model.nv)  # beyond the observation's [-10, 10] velocity clip
    plain.set_state(qpos, qvel)
    obs = ours.set_state(np.stack([qpos, qpos]), np.stack([qvel, qvel]))
    np.testing.assert_array_equal(obs.numpy(), np.stack([plain._get_obs()] * 2).astype(np.float32))


def test_num_threads_sizes_the_pool_and_keeps_the_trajectory():
    """One thread or two step the same simulations; other backends refuse a pool size they lack."""
    actions = torch.from_numpy(np.random.default_rng(0).uniform(-0.4, 0.4, (20, 3, 3)).astype(np.float32))
    trajectories = []
    for threads in (1, 2):
        vec = envs.make("Hopper", 3, backend="mujoco", seed=5, num_threads=threads)
        assert vec.num_threads == threads
        observations = [vec.reset()[0]] + [vec.step(action)[0] for action in actions]
        trajectories.append(torch.stack(observations))
    torch.testing.assert_close(trajectories[0], trajectories[1], rtol=0, atol=0)
    with pytest.raises(envs.EnvRequestError, match="'gymnasium' has no thread pool.*mujoco, envpool"):
        envs.make("Hopper", 1, backend="gymnasium", num_threads=1)
    with pytest.raises(envs.EnvRequestError, match="non-negative integer"):
        envs.make("Hopper", 1, backend="mujoco", num_threads=-1)
