"""DeepMind Control Suite tasks (envs/dmc.py): the vector-env contract on dmc:cheetah-run, parity with
the suite itself, with and without action repeat, and a short sac_simba run (action repeat 2)."""

import numpy as np
import pytest
import torch
from agent_runs import run_agent

import envs
from cleanrl_style.runs.checkpoint import load_checkpoint
from cleanrl_style.runs.evaluate import evaluate_run
from cleanrl_style.runs.logger import read_progress
from envs.check import check_env

pytest.importorskip("dm_control")
pytest.importorskip("shimmy")

TASK = "dmc:cheetah-run"


def rollout(num_envs=2, steps=1005, seed=0):
    vec = envs.make(TASK, num_envs, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    obs, _ = vec.reset()
    record = [(obs, None, None, None, None)]
    for _ in range(steps):
        action = torch.rand(num_envs, 6, generator=generator) * 3 - 1.5  # beyond the bounds: clipped
        record.append(vec.step(action))
    vec.close()
    return vec, record


def test_the_short_form_names_a_registered_gymnasium_env():
    assert envs.resolve_env_id(TASK) == "dmc/cheetah-run-v0"
    assert envs.resolve_env_id("dmc/cheetah-run-v0") == "dmc/cheetah-run-v0"  # the resolved id resolves again
    assert envs.resolve_env_id("dmc:humanoid_CMU-stand") == "dmc/humanoid_CMU-stand-v0"
    with pytest.raises(envs.UnknownEnvError, match="Did you mean 'dmc:cheetah-run'") as error:
        envs.resolve_env_id("dmc:cheeta-run")
    assert "walker-walk" in str(error.value) and "dog-run" in str(error.value)


def test_contract_on_a_dmc_task_flat_observations_and_1000_step_episodes():
    vec, record = rollout()
    assert vec.backend == "gymnasium"  # auto: the only backend that runs the suite
    assert vec.single_observation_space.shape == (17,)  # position (8) and velocity (9), flattened
    assert (vec.action_low.tolist(), vec.action_high.tolist()) == ([-1.0] * 6, [1.0] * 6)
    returns = np.zeros(2)
    for t, (obs, reward, terminated, truncated, info) in enumerate(record[1:], start=1):
        assert obs.shape == (2, 17) and obs.dtype == torch.float32 and reward.dtype == torch.float32
        assert not terminated.any()  # the suite's tasks never terminate
        returns += reward.numpy()
        assert ((reward >= 0) & (reward <= 1)).all()
        if t == 1000:  # the time limit: every sub-environment truncates at its 1,000th step
            assert truncated.all() and info["done"].all()
            assert info["episode_length"].tolist() == [1000, 1000]
            assert info["episode_return"].numpy() == pytest.approx(returns, rel=1e-4)
            assert not torch.equal(info["final_obs"], obs)  # obs is the next episode's first observation
            returns[:] = 0
        else:
            assert not truncated.any() and torch.equal(info["final_obs"], obs)


def test_observations_and_rewards_equal_the_suites_own():
    from dm_control import suite

    _, record = rollout(num_envs=1, steps=50, seed=7)
    generator = torch.Generator().manual_seed(7)
    env = suite.load("cheetah", "run", task_kwargs={"random": 7})
    flat = lambda observation: np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in observation.values()])
    timestep = env.reset()
    assert record[0][0][0].numpy() == pytest.approx(flat(timestep.observation).astype(np.float32))
    for obs, reward, *_ in record[1:]:
        action = (torch.rand(1, 6, generator=generator) * 3 - 1.5).clamp(-1, 1)[0].numpy()
        timestep = env.step(action)
        assert obs[0].numpy() == pytest.approx(flat(timestep.observation).astype(np.float32), rel=1e-5, abs=1e-6)
        assert reward.item() == pytest.approx(timestep.reward, rel=1e-5, abs=1e-7)


def test_action_repeat_2_steps_the_suite_twice_per_action_and_keeps_1000_step_episodes():
    """SimBa's DMC setting: each action applied for 2 of the suite's steps, rewards summed; an episode
    is 500 agent steps, its length and return counted over the suite's 1,000 steps."""
    from dm_control import suite

    vec = envs.make(TASK, 1, seed=7, action_repeat=2)
    env = suite.load("cheetah", "run", task_kwargs={"random": 7})
    flat = lambda observation: np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in observation.values()])
    generator = torch.Generator().manual_seed(7)
    obs, _ = vec.reset()
    timestep = env.reset()
    assert obs[0].numpy() == pytest.approx(flat(timestep.observation).astype(np.float32))
    suite_return = 0.0
    for agent_step in range(1, 501):
        action = torch.rand(1, 6, generator=generator) * 2 - 1
        obs, reward, terminated, truncated, info = vec.step(action)
        first, second = env.step(action[0].numpy()), env.step(action[0].numpy())
        suite_return += first.reward + second.reward
        assert info["final_obs"][0].numpy() == pytest.approx(flat(second.observation).astype(np.float32), rel=1e-5, abs=1e-6)
        assert reward.item() == pytest.approx(first.reward + second.reward, rel=1e-5, abs=1e-7)
        assert truncated.item() == (agent_step == 500) and not terminated.item()
    assert info["episode_length"].item() == 1000  # the suite's steps
    assert info["episode_return"].item() == pytest.approx(suite_return, rel=1e-4)
    vec.close()


def test_seeded_resets_are_reproducible():
    first = envs.make(TASK, 2, seed=3).reset()[0]
    assert torch.equal(first, envs.make(TASK, 2, seed=3).reset()[0])
    assert not torch.equal(first, envs.make(TASK, 2, seed=4).reset()[0])


def test_the_env_checker_passes_a_dmc_task():
    results = check_env(TASK, steps=1100)
    assert all(r.ok for r in results), "\n".join(r.line() for r in results)


@pytest.mark.slow
def test_sac_simba_runs_on_a_dmc_task_with_action_repeat_2(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_agent(
        "sac_simba",
        "--env",
        "dmc:cartpole-balance",
        "--total-timesteps",
        "2000",
        "--learning-starts",
        "500",
        "--actor-width",
        "32",
        "--critic-width",
        "32",
        "--critic-blocks",
        "1",
        "--batch-size",
        "64",
        "--updates-per-step",
        "1",
        "--eval-episodes",
        "2",
        "--log-every",
        "500",
        "--save-buffer",
        run_dir=run_dir,
    )
    progress = read_progress(run_dir)
    # 2,000 simulator steps are 1,000 agent steps at action repeat 2 (auto on dmc: ids), two episodes
    # of 1,000 simulator steps; the buffer holds one transition per agent step, rewards summed over 2.
    assert "action repeat 2: 2000 simulator steps = 1000 agent steps, 1 updates per agent step" in proc.stdout
    assert "500 random transitions (1000 simulator steps)" in proc.stdout
    assert [(s, v) for s, _, v in progress["charts/episodic_length"]] == [(1000, 1000.0), (2000, 1000.0)]
    assert all(0 <= v <= 1000 for _, _, v in progress["charts/episodic_return"])
    assert 0 <= progress["eval/return_mean"][-1][2] <= 1000
    checkpoint = load_checkpoint(run_dir)
    assert checkpoint["global_step"] == 2000 and checkpoint["args"]["action_repeat"] == 2
    rewards = checkpoint["buffer"]["rewards"]
    assert len(rewards) == 1000 and rewards.max() > 1 and rewards.min() >= 0  # sums of two suite rewards in [0, 1]
    # SimBa's settings for DeepMind Control: one critic (no clipped double-Q), and the discount from the
    # episode length in agent steps, L = 1000 / 2: (100 - 1) / 100 with a horizon of L / 5.
    assert "gamma 0.99, one critic" in proc.stdout and checkpoint["args"]["gamma"] == 0.99
    # one critic of width 32, 1 block, on concat(obs 5, action 1): embed 6*32+32, LayerNorm 64,
    # fc1 32*128+128, fc2 128*32+32, final LayerNorm 64, head 32+1
    assert progress["model/critic_parameters"] == [(0, progress["model/critic_parameters"][0][1], 8737.0)]
    returns = evaluate_run(str(run_dir), episodes=2)
    assert returns.shape == (2,) and np.all((returns >= 0) & (returns <= 1000))


def test_egl_is_chosen_only_where_libegl_is_installed(monkeypatch):
    import ctypes.util

    from envs.dmc import default_gl_platform

    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "libEGL.so.1" if name == "EGL" else None)
    assert default_gl_platform() == "egl"
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    assert default_gl_platform() is None  # MUJOCO_GL=egl without libEGL breaks `import mujoco` itself


# ----- task cycles ------------------------------------------------------------------------------------

CYCLE = "dmc:walker-stand.walk.run-every2000"


def test_a_task_cycle_runs_each_task_for_its_visit_in_turn_from_the_same_state_as_the_task_alone():
    import gymnasium as gym

    from envs.dmc import make_dmc_env

    assert envs.resolve_env_id(CYCLE) == "dmc/walker-stand.walk.run-every2000-v0"
    env = gym.make(envs.resolve_env_id(CYCLE))
    alone = make_dmc_env("walker", "stand")
    actions = np.random.default_rng(0).uniform(-1, 1, (1000, 6)).astype(np.float32)
    obs, info = env.reset(seed=3)
    expected, _ = alone.reset(seed=3)
    np.testing.assert_array_equal(obs, expected)
    assert (info["task"], info["visit"]) == ("stand", 0)
    for action in actions[:50]:  # visit 0 is walker-stand itself: the same observations and rewards
        obs, reward, *_ = env.step(action)
        expected, expected_reward, *_ = alone.step(action)
        np.testing.assert_array_equal(obs, expected)
        assert reward == expected_reward
    seen = []
    env.reset()
    for episode in range(7):
        _, info = env.reset() if episode else (None, {"task": "stand", "visit": 0})
        seen.append((info["task"], info["visit"]))
        for step in range(1000):
            _, _, terminated, truncated, step_info = env.step(actions[step])
            assert step_info["task"] == info["task"]  # a switch never falls inside an episode
        assert truncated and not terminated
    # 2,000 steps per visit: two episodes each, then the cycle starts over
    assert seen == [("stand", 0), ("stand", 0), ("walk", 1), ("walk", 1), ("run", 2), ("run", 2), ("stand", 3)]


def test_a_visit_spans_its_steps_times_the_sub_environments():
    from envs.dmc import cycle_visits

    assert cycle_visits(CYCLE, 8) == (("stand", "walk", "run"), 16_000)
    assert cycle_visits("dmc/walker-stand.walk.run-every2000-v0") == (("stand", "walk", "run"), 2000)
    assert cycle_visits("dmc:walker-walk", 8) is None and cycle_visits("Hopper", 8) is None


@pytest.mark.parametrize(
    "env_id, message",
    [
        ("dmc:walker-stand.walk-every1500", "not a positive multiple of the 1000-step episode"),
        ("dmc:walker-stand.walk", "Malformed DeepMind Control task cycle"),
        ("dmc:walker-stand-every1000", "Malformed DeepMind Control task cycle"),
        ("dmc:walker-stand.jog-every1000", "Unknown DeepMind Control task 'dmc:walker-jog'"),
    ],
)
def test_a_malformed_task_cycle_is_refused_with_the_expected_form(env_id, message):
    with pytest.raises(envs.UnknownEnvError, match=message) as error:
        envs.resolve_env_id(env_id)
    assert "walker-stand.walk.run-every25000" in str(error.value) or "Did you mean" in str(error.value)


def test_a_cycle_of_tasks_with_different_observations_is_refused_by_name():
    import gymnasium as gym

    with pytest.raises(ValueError, match="finger-turn_easy has other observation or action spaces"):
        gym.make(envs.resolve_env_id("dmc:finger-spin.turn_easy-every1000"))


def test_ppo_on_a_task_cycle_logs_a_return_in_every_visit(tmp_path):
    from cleanrl_style.experiments.plot import load_runs, visit_returns

    run_dir = tmp_path / "run"
    flags = ["--env", "dmc:walker-stand.walk-every2000", "--num-envs", "1", "--num-steps", "250", "--num-minibatches", "2"]
    run_agent("ppo_nap", *flags, "--update-epochs", "1", "--total-timesteps", "8000", "--eval-episodes", "0", run_dir=run_dir)
    # stand, walk, stand, walk: 2,000 steps each; an episode of each visit ends in its last quarter
    returns = visit_returns(load_runs([run_dir])[0])
    assert len(returns) == 4 and np.all((returns >= 0) & (returns <= 1000))
    assert load_checkpoint(run_dir)["global_step"] == 8000
