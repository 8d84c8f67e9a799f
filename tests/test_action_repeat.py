"""Action repeat (envs/action_repeat.py): envs.make(..., action_repeat=k) against the unwrapped env stepped
k times by hand, termination mid-repeat, episode bookkeeping in simulator steps, and backend choice."""

import gymnasium as gym
import numpy as np
import pytest
import torch

import envs
from envs.action_repeat import RepeatAction


def by_hand(env_id, num_envs, repeat, actions, seed):
    """The unwrapped Gymnasium env of each sub-environment, stepped ``repeat`` times per action by hand.

    Yields the first observations, then per agent step: obs, reward (float64 sum), terminated,
    truncated, final_obs, and the finished episode's return and simulator-step length (0 where it
    did not finish)."""
    subs = [gym.make(env_id) for _ in range(num_envs)]
    yield np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(subs)])
    returns, lengths = [0.0] * num_envs, [0] * num_envs
    for action in actions:
        step = []
        for i, env in enumerate(subs):
            reward, terminated, truncated = 0.0, False, False
            for _ in range(repeat):
                o, r, terminated, truncated, _ = env.step(action[i])
                reward += float(r)
                returns[i] += float(np.float32(r))
                lengths[i] += 1
                if terminated or truncated:
                    break
            final, finished = o, (returns[i], lengths[i]) if terminated or truncated else (0.0, 0)
            if terminated or truncated:
                o, _ = env.reset()  # the vector env's autoreset: unseeded, the RNG continues
                returns[i], lengths[i] = 0.0, 0
            step.append((o, reward, terminated, truncated, final, *finished))
        yield step
    for env in subs:
        env.close()


def test_repeat_equals_the_unwrapped_env_stepped_k_times_by_hand_through_terminations():
    """Hopper terminates mid-repeat: the repeat stops there, and obs, rewards, ends, final_obs and the
    episode statistics equal the unwrapped env's, rewards exactly (the float64 sum, then float32)."""
    repeat, num_envs, seed = 3, 2, 5
    generator = torch.Generator().manual_seed(seed)
    actions = [torch.rand(num_envs, 3, generator=generator) * 2 - 1 for _ in range(120)]
    vec = envs.make("Hopper", num_envs, seed=seed, action_repeat=repeat)
    assert vec.backend == "gymnasium" and vec.action_repeat == repeat  # auto skips backends that do not repeat
    expected_steps = by_hand("Hopper-v5", num_envs, repeat, [a.numpy() for a in actions], seed)
    assert np.array_equal(vec.reset()[0].numpy(), np.float32(next(expected_steps)))
    ends_mid_repeat = 0
    for action, expected in zip(actions, expected_steps):
        obs, reward, terminated, truncated, info = vec.step(action)
        for i, (o, r, te, tr, final, episode_return, episode_length) in enumerate(expected):
            assert np.array_equal(obs[i].numpy(), np.float32(o))
            assert reward[i].item() == np.float32(r)  # exact
            assert (terminated[i].item(), truncated[i].item()) == (te, tr)
            assert np.array_equal(info["final_obs"][i].numpy(), np.float32(final))
            assert info["episode_length"][i].item() == episode_length  # simulator steps
            assert info["episode_return"][i].item() == pytest.approx(episode_return, rel=1e-5, abs=1e-5)
            ends_mid_repeat += bool(te and episode_length % repeat)
    vec.close()
    assert ends_mid_repeat >= 3  # episodes that ended before the repeat's last simulator step


def test_the_time_limit_counts_simulator_steps():
    """Pendulum's 200-step limit at repeat 3: 66 full agent steps, then one of 2 simulator steps."""
    vec = envs.make("Pendulum", 1, seed=0, action_repeat=3)
    vec.reset()
    for step in range(1, 68):
        _, reward, terminated, truncated, info = vec.step(torch.zeros(1, 1))
        assert truncated.item() == (step == 67) and not terminated.item()
    assert info["episode_length"].item() == 200
    vec.close()


def test_the_wrapper_stops_at_the_end_of_an_episode_and_reports_its_simulator_steps():
    env = RepeatAction(gym.make("Pendulum-v1", max_episode_steps=5), repeat=4)
    env.reset(seed=0)
    assert env.step(np.zeros(1))[4]["simulator_steps"] == 4
    _, _, terminated, truncated, info = env.step(np.zeros(1))
    assert truncated and not terminated and info["simulator_steps"] == 1  # the 5th simulator step ends it
    env.close()


def test_backends_that_do_not_repeat_refuse_it_and_bad_values_are_refused():
    if envs.BACKENDS["mujoco"].installed() and envs.BACKENDS["mujoco"].supports("Hopper-v5", torch.device("cpu")):
        with pytest.raises(envs.EnvRequestError, match="does not repeat actions.*backend='gymnasium'"):
            envs.make("Hopper", 1, backend="mujoco", action_repeat=2)
        assert envs.make("Hopper", 1).backend == "mujoco"  # without a repeat, auto's choice is unchanged
    for bad in (0, -1, 1.5, True):
        with pytest.raises(envs.EnvRequestError, match="action_repeat must be a positive integer"):
            envs.make("Pendulum", 1, action_repeat=bad)


def test_action_repeat_1_is_the_plain_env():
    plain, repeated = envs.make("Pendulum", 2, seed=1), envs.make("Pendulum", 2, seed=1, action_repeat=1)
    assert repeated.action_repeat == 1
    assert torch.equal(plain.reset()[0], repeated.reset()[0])
    action = torch.full((2, 1), 0.5)
    for a, b in zip(plain.step(action)[:4], repeated.step(action)[:4]):
        assert torch.equal(a, b)


def test_evaluation_acts_with_the_runs_repeat():
    from cleanrl_style.runs.evaluate import evaluate_policy

    calls = []

    def act(obs):
        calls.append(len(obs))
        return torch.zeros(len(obs), 1)

    # Pendulum's 200-step episodes: the policy is asked once per action, every second simulator step.
    plain = evaluate_policy(act, "Pendulum", episodes=2, seed=3)
    assert len(calls) == 200
    calls.clear()
    repeated = evaluate_policy(act, "Pendulum", episodes=2, seed=3, action_repeat=2)
    assert len(calls) == 100
    # the same zero torque from the same starts: the same trajectory, the same summed returns
    assert np.allclose(repeated, plain, rtol=1e-5)
