"""TextVectorEnv: batched stepping, groups on one task, both autoreset modes."""

import numpy as np
import pytest

from envs.text.env import ToolUseEnv
from envs.text.policies import ExpertPolicy, NoisyPolicy
from envs.text.tasks import TaskSet
from envs.text.vector import TextVectorEnv, make_tool_use_vector_env

TASKS = TaskSet(num_tasks=36, seed=0)


def test_group_on_one_task_runs_until_all_done_with_expert_rewards():
    vec = TextVectorEnv([lambda: ToolUseEnv(TASKS)] * 4)
    observations, infos = vec.reset(seed=0, options={"task_id": 7})
    assert len({i["task_id"] for i in infos}) == 1 and len(observations) == 4
    expert = ExpertPolicy()
    total = np.zeros(4)
    steps = 0
    while not vec.all_done:
        actions = [None if vec.done[i] else expert.act(o, info) for i, (o, info) in enumerate(zip(observations, infos))]
        observations, rewards, terminated, truncated, infos = vec.step(actions)
        total += rewards
        steps += 1
        assert rewards.shape == terminated.shape == truncated.shape == (4,)
    np.testing.assert_array_equal(total, 1.0)
    # Stepping on after the end changes nothing and says so.
    _, rewards, terminated, _, infos = vec.step([None] * 4)
    assert rewards.sum() == 0 and terminated.all() and all(i["already_done"] for i in infos)


def test_noisy_group_has_reward_variance():
    vec = TextVectorEnv([lambda: ToolUseEnv(TASKS)] * 8)
    policies = [NoisyPolicy(mistake_prob=0.5, seed=i) for i in range(8)]
    observations, infos = vec.reset(seed=0, options={"task_id": 3})
    total = np.zeros(8)
    while not vec.all_done:
        observations, rewards, *_, infos = vec.step(
            [None if vec.done[i] else p.act(o, info) for i, (p, o, info) in enumerate(zip(policies, observations, infos))]
        )
        total += rewards
    assert 0 < total.sum() < 8


def test_autoreset_starts_a_new_episode_in_the_same_step():
    vec = make_tool_use_vector_env(2, autoreset=True, tasks=TASKS)
    observations, infos = vec.reset(seed=1)
    expert = ExpertPolicy()
    finished = 0
    for _ in range(40):
        observations, rewards, terminated, truncated, infos = vec.step([expert.act(o, i) for o, i in zip(observations, infos)])
        for i in np.flatnonzero(terminated | truncated):
            finished += 1
            assert infos[i]["final_info"]["success"] and rewards[i] == 1.0
            assert len(observations[i]) == 2  # the new episode: system + first user message
            assert infos[i]["final_observation"][-1]["role"] == "assistant"
    assert finished >= 4


def test_per_env_options_and_seeds_must_match_the_batch_size():
    vec = make_tool_use_vector_env(3, tasks=TASKS)
    with pytest.raises(ValueError):
        vec.reset(options=[{"task_id": 1}] * 2)
    vec.reset(seed=[1, 2, 3], options=[{"task_id": 1}, {"task_id": 2}, None])
    with pytest.raises(ValueError):
        vec.step(["hi"])


def test_thread_pool_gives_the_same_results():
    def run(threads):
        vec = TextVectorEnv([lambda: ToolUseEnv(TASKS)] * 3, num_threads=threads)
        observations, infos = vec.reset(seed=5)
        expert = ExpertPolicy()
        rewards_seen = []
        while not vec.all_done:
            observations, rewards, *_, infos = vec.step(
                [None if vec.done[i] else expert.act(o, info) for i, (o, info) in enumerate(zip(observations, infos))]
            )
            rewards_seen.append(rewards.tolist())
        vec.close()
        return rewards_seen, [o[-1]["content"] for o in observations]

    assert run(1) == run(3)


def test_python_reasoning_envs_step_in_a_thread_pool():
    from envs.text.tir_env import ProblemSet, PythonReasoningEnv, PythonReasoningExpert

    problems = ProblemSet(7, seed=0)
    vec = TextVectorEnv([lambda: PythonReasoningEnv(problems)] * 2, num_threads=2)
    observations, infos = vec.reset(seed=0, options=[{"problem_id": 3}, {"problem_id": 6}])
    expert = PythonReasoningExpert()
    total = np.zeros(2)
    while not vec.all_done:
        observations, rewards, *_, infos = vec.step(
            [None if vec.done[i] else expert.act(o, info) for i, (o, info) in enumerate(zip(observations, infos))]
        )
        total += rewards
    vec.close()
    np.testing.assert_array_equal(total, 1.0)
