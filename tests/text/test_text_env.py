"""ToolUseEnv: the episode protocol, rewards, bad input, and the scripted policies."""

import json

import pytest

from envs.text.env import ToolUseEnv
from envs.text.parsing import ToolCall
from envs.text.policies import GAP_CALL, MISTAKE_KINDS, ExpertPolicy, NoisyPolicy, load_jsonl, rollout, save_jsonl
from envs.text.suites import SUITES
from envs.text.tasks import DEFAULT_SUITE_GROUPS, VARIANTS, TaskSet, generate_task

# Every suite group crossed with every variant, several tasks each.
ALL_TASKS = TaskSet(num_tasks=len(DEFAULT_SUITE_GROUPS) * len(VARIANTS) * 4, seed=0)


@pytest.fixture(scope="module")
def env():
    return ToolUseEnv(ALL_TASKS)


def test_reset_returns_system_prompt_with_schemas_then_first_user_turn(env):
    messages, info = env.reset(seed=0, options={"task_id": 3})
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "<tools>" in messages[0]["content"] and "<tool_call>" in messages[0]["content"]
    for schema in env.tools:
        assert json.dumps(schema["name"]) in messages[0]["content"]
    assert messages[1]["content"] == info["task"].turns[0].user


def test_expert_solves_every_task_on_every_suite_and_variant(env):
    covered = set()
    for task in ALL_TASKS:
        trajectory = rollout(env, ExpertPolicy(), options={"task": task})
        assert trajectory.reward == 1.0, (task.task_id, trajectory.turn_results)
        assert all(r["passed"] for r in trajectory.turn_results) and len(trajectory.turn_results) == len(task.turns)
        assert trajectory.errors == {}
        covered |= {(s, task.variant) for s in task.suites}
    assert covered == {(s, v) for s in SUITES for v in VARIANTS}


def test_expert_also_solves_another_seed_and_the_test_split():
    tasks = TaskSet(num_tasks=72, seed=123, split="test")
    env = ToolUseEnv(tasks)
    assert all(rollout(env, ExpertPolicy(), options={"task": t}).reward == 1.0 for t in tasks)


@pytest.mark.parametrize("kind", MISTAKE_KINDS)
def test_each_noisy_mistake_is_caught_by_the_right_check(env, kind):
    policy = NoisyPolicy(mistake_prob=1.0, kinds=[kind], seed=1)
    expected_checks = set()
    for task in ALL_TASKS:
        trajectory = rollout(env, policy, options={"task": task})
        (mistake,) = trajectory.mistakes
        verdict = trajectory.turn_results[mistake["turn_index"]]
        assert trajectory.reward == 0.0
        assert mistake["expected_check"] in verdict["failed_checks"], (task.task_id, mistake, verdict)
        expected_checks.add(mistake["expected_check"])
    # Extra calls change state; wrong arguments and missing calls hit both state and pure queries.
    assert expected_checks == ({"state"} if kind == "extra_call" else {"state", "response"})


def test_an_every_turn_noisy_policy_errs_in_each_turn_with_gold_calls_and_each_turn_fails(env):
    policy, one = NoisyPolicy(mistake_prob=1.0, seed=1, every_turn=True), NoisyPolicy(mistake_prob=1.0, seed=1)
    kinds_per_episode, turns_passed = [], []
    for task in ALL_TASKS:
        trajectory = rollout(env, policy, options={"task": task})
        gold_turns = [i for i, turn in enumerate(task.turns) if turn.gold_calls]
        assert [m["turn_index"] for m in trajectory.mistakes] == gold_turns
        assert trajectory.reward == 0.0
        turns_passed += [trajectory.turn_results[i]["passed"] for i in gold_turns]
        kinds_per_episode.append({m["kind"] for m in trajectory.mistakes})
        assert len(rollout(env, one, options={"task": task}).mistakes) == 1  # the default: one turn only
    # Nearly every mistaken turn fails on its own (an extra call to a tool the task withholds changes nothing).
    assert len(turns_passed) > 2 * len(ALL_TASKS) and sum(turns_passed) <= 0.02 * len(turns_passed)
    assert any(len(kinds) > 1 for kinds in kinds_per_episode)  # each turn draws its own kind


def test_a_gap_call_mistake_calls_tools_in_the_gap_turn_and_fails_its_empty_turn_check(env):
    policy = NoisyPolicy(mistake_prob=1.0, kinds=[GAP_CALL, "extra_call"], seed=1)
    default = NoisyPolicy(mistake_prob=1.0, seed=1)
    seen = set()
    for task in ALL_TASKS:
        trajectory = rollout(env, policy, options={"task": task})
        (mistake,) = trajectory.mistakes
        assert trajectory.reward == 0.0
        if task.variant in ("missing_function", "missing_parameter"):
            gap = next(i for i, turn in enumerate(task.turns) if turn.kind == task.variant)
            assert mistake["kind"] == GAP_CALL and mistake["turn_index"] == gap
            assert "empty_turn" in trajectory.turn_results[gap]["failed_checks"]
            assert trajectory.turn_results[gap]["num_model_calls"] >= 1
            users = [j for j, m in enumerate(trajectory.messages) if m["role"] == "user"]
            in_gap = trajectory.messages[users[gap] + 1 : users[gap + 1]]
            replies = [m["content"] for m in in_gap if m["role"] == "assistant"]
            assert "<tool_call>" in replies[0] and replies[1:] == ["Done."]  # no refusal or question after the calls
            seen.add(task.variant)
        else:
            assert mistake["kind"] == "extra_call"  # tasks without a gap draw from the other kinds
        # The default kinds never err in a gap turn.
        assert all(m["kind"] != GAP_CALL for m in rollout(env, default, options={"task": task}).mistakes)
    assert seen == {"missing_function", "missing_parameter"}


def test_a_gap_call_only_policy_leaves_tasks_without_a_gap_unchanged(env):
    policy = NoisyPolicy(mistake_prob=1.0, kinds=[GAP_CALL], seed=1)
    for task in ALL_TASKS:
        trajectory = rollout(env, policy, options={"task": task})
        has_gap = any(turn.kind in ("missing_function", "missing_parameter") for turn in task.turns)
        assert (trajectory.reward == 0.0) == has_gap == bool(trajectory.mistakes)


def test_noisy_policy_refuses_an_unknown_mistake_kind():
    with pytest.raises(ValueError, match="gap_call"):
        NoisyPolicy(kinds=["typo"])


def test_noisy_policy_gives_a_mixed_dataset_and_exports_it(env, tmp_path):
    policy = NoisyPolicy(mistake_prob=0.5, seed=0)
    trajectories = [rollout(env, policy, seed=i) for i in range(40)]
    rewards = [t.reward for t in trajectories]
    assert 0.2 < sum(rewards) / len(rewards) < 0.8
    assert all((t.reward == 1.0) == (not t.mistakes) for t in trajectories)
    path = tmp_path / "trajectories.jsonl"
    assert save_jsonl(trajectories, path) == 40
    first = load_jsonl(path)[0]
    assert first["messages"][0]["role"] == "system" and first["reward"] in (0.0, 1.0)
    assert {m["role"] for m in first["messages"]} >= {"system", "user", "assistant", "tool"}


def _bank_env(max_steps_per_turn: int = 20) -> ToolUseEnv:
    return ToolUseEnv([generate_task(0, ("bank",), "base")], max_steps_per_turn=max_steps_per_turn)


@pytest.mark.parametrize(
    "message, kind",
    [
        ('<tool_call>{"name": "get_balance", "arguments": {</tool_call>', "parse"),
        ('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', "unknown_tool"),
        ('<tool_call>{"name": "get_balance", "arguments": {}}</tool_call>', "bad_arguments"),
        ('<tool_call>{"name": "get_balance", "arguments": {"account": 7}}</tool_call>', "bad_arguments"),
        ('<tool_call>{"name": "get_balance", "arguments": {"account": "no-such"}}</tool_call>', "tool_error"),
        ('<tool_call>{"name": "withdraw", "arguments": {"account": "checking", "amount": 1e15}}</tool_call>', "tool_error"),
    ],
)
def test_bad_input_becomes_an_error_tool_message_and_is_counted(message, kind):
    env = _bank_env()
    env.reset(seed=0)
    messages, reward, terminated, truncated, info = env.step(message)
    assert messages[-1]["role"] == "tool" and "error" in json.loads(messages[-1]["content"])
    assert info["errors"] == {kind: 1} and not terminated and not truncated
    messages, *_ = env.step('<tool_call>{"name": "list_accounts", "arguments": {}}</tool_call>')
    assert "result" in json.loads(messages[-1]["content"])  # the episode goes on


def test_non_string_and_huge_actions_do_not_crash():
    env = _bank_env()
    env.reset(seed=0)
    env.step(12345)  # type: ignore[arg-type]
    env.reset(seed=0)
    env.step("<tool_call>" + "[" * 100_000 + "</tool_call>")
    env.reset(seed=0)
    env.step('<tool_call>{"name": "deposit", "arguments": {"account": "checking", "amount": ' + "9" * 5000 + "}}</tool_call>")


def test_a_message_past_the_length_limit_is_cut_before_it_is_read_and_counted():
    env = _bank_env()
    env.reset(seed=0)
    limit = env.action_space.max_length
    call = '<tool_call>{"name": "list_accounts", "arguments": {}}</tool_call>'
    messages, _, _, _, info = env.step(" " * limit + call)  # the whole call past the cut: never run
    sent = [m for m in messages if m["role"] == "assistant"]
    assert len(sent) == 1 and sent[0]["content"] == " " * limit and env.action_space.contains(sent[0]["content"])
    assert not any(m["role"] == "tool" for m in messages) and info["errors"] == {"too_long": 1}
    env.reset(seed=0)
    messages, _, _, _, info = env.step(call.rjust(limit))  # exactly at the limit: read whole
    assert messages[-1]["role"] == "tool" and "result" in json.loads(messages[-1]["content"]) and info["errors"] == {}


def test_step_limit_per_turn_truncates_with_zero_reward():
    env = _bank_env(max_steps_per_turn=3)
    env.reset(seed=0)
    for _ in range(2):
        _, _, _, truncated, _ = env.step('<tool_call>{"name": "list_accounts", "arguments": {}}</tool_call>')
        assert not truncated
    _, reward, terminated, truncated, info = env.step('<tool_call>{"name": "list_accounts", "arguments": {}}</tool_call>')
    assert truncated and not terminated and reward == 0.0
    assert "step_limit" in info["turn_result"]["failed_checks"]


def test_call_free_message_ends_turn_and_presents_the_next_one():
    env = _bank_env()
    messages, info = env.reset(seed=0)
    messages, reward, terminated, _, info = env.step("I will not do anything.")
    assert info["turn_index"] == 1 and messages[-1]["role"] == "user" and not terminated
    assert info["turn_results"][0]["passed"] is False and reward == 0.0


def test_calls_in_a_turn_whose_gold_is_empty_fail_the_empty_turn_check():
    task = generate_task(0, ("bank",), "missing_parameter")
    gap = next(i for i, t in enumerate(task.turns) if t.kind == "missing_parameter")
    env = ToolUseEnv([task])
    _, info = env.reset(seed=0)
    expert = ExpertPolicy()
    observation = None
    while info["turn_index"] < gap:
        observation, _, _, _, info = env.step(expert.act(observation, info))
    env.step('<tool_call>{"name": "list_accounts", "arguments": {}}</tool_call>')
    _, _, _, _, info = env.step("Which amount?")
    assert info["turn_result"]["failed_checks"] == ["empty_turn"]


def test_withheld_tool_is_absent_from_the_prompt_and_refused_until_released():
    task = generate_task(2, ("travel",), "missing_function")
    (tool,) = task.withheld_tools
    env = ToolUseEnv([task])
    messages, info = env.reset(seed=0)
    assert f'"name": "{tool}"' not in messages[0]["content"] and tool not in {s["name"] for s in env.tools}
    _, _, _, _, info = env.step(f'<tool_call>{{"name": "{tool}", "arguments": {{}}}}</tool_call>')
    assert info["errors"] == {"unknown_tool": 1}


def test_stepping_after_the_end_or_before_reset_is_an_error_not_a_silent_no_op():
    env = _bank_env()
    with pytest.raises(RuntimeError):
        env.step("hi")
    rollout(env, ExpertPolicy())
    with pytest.raises(RuntimeError):
        env.step("hi")


def test_integer_written_for_a_float_argument_matches_the_gold_call():
    task = generate_task(0, ("bank",), "base")
    env = ToolUseEnv([task])
    _, info = env.reset(seed=0)
    gold = task.turns[0].gold_calls
    text = "".join(
        ToolCall(
            c.name, {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in c.arguments.items()}
        ).to_text()
        for c in gold
    )
    env.step(text)
    _, _, _, _, info = env.step("Done.")
    assert info["turn_result"]["passed"] and info["turn_result"]["calls_match"]
