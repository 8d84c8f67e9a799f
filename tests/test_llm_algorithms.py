"""The algorithms in the agent files: GRPO's advantages and clipped loss, RC-GRPO's reward, reward tokens and
RCTP data, TurnSight's advantage modulation; on hand-made inputs and a tiny model. Also: no agent imports another."""

from __future__ import annotations

import ast
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from agent_runs import load_agent  # noqa: E402
from llm_tiny_model import bf16_attention_error, build_tiny_model, build_tokenizer  # noqa: E402

from cleanrl_style.llm.generation import Sampling  # noqa: E402
from cleanrl_style.llm.model import add_special_tokens  # noqa: E402
from cleanrl_style.llm.rollout import EpisodeLimits, Rollout, RolloutSettings, collect_rollouts, encode  # noqa: E402
from cleanrl_style.llm.rollout import Turn as RolloutTurn  # noqa: E402
from cleanrl_style.llm.tokens import batched_logprobs  # noqa: E402
from cleanrl_style.llm.train import group_reward_statistics  # noqa: E402
from envs.text import ToolCall, format_calls  # noqa: E402
from envs.text.families import make_task_family  # noqa: E402
from envs.text.tasks import Task, Turn  # noqa: E402

# loaded as the modules agents.<name>, the names mutmut gives their mutants (CONTRIBUTING, "Mutation testing")
grpo, rc_grpo, turnsight = (load_agent(name) for name in ("grpo", "rc_grpo", "turnsight"))
HIGH, LOW = rc_grpo.HIGH_REWARD, rc_grpo.LOW_REWARD
REPO = Path(__file__).resolve().parents[1]
LLM_AGENTS = ("grpo", "rc_grpo", "turnsight")


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def tasks():
    return make_task_family("tools:bank", num_tasks=60, variants=("base",))


def sampled(max_new_tokens, messages, greedy=False):
    return RolloutSettings(Sampling(max_new_tokens=max_new_tokens, greedy=greedy), EpisodeLimits(messages, 4096))


# ---- the agent files stand alone -------------------------------------------------------------------------


def test_no_agent_file_imports_another():
    agents = {p.stem for p in (REPO / "agents").glob("*.py")}
    for path in (REPO / "agents").glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
        assert not imported & (agents - {path.stem}), f"{path.name} imports {imported & agents}"


@pytest.mark.parametrize("agent", LLM_AGENTS)
def test_each_llm_agent_imports_with_only_the_project_on_the_path(agent):
    """As a module, from a folder that is not agents/: nothing but the project root on sys.path."""
    code = (
        "import runpy, sys\n"
        "sys.path = [p for p in sys.path if not p.rstrip('/').endswith('agents')]\n"
        f"runpy.run_path(r'{REPO / 'agents' / (agent + '.py')}', run_name='{agent}_alone')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO / "tests", env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


# ---- GRPO -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("agent", [grpo, rc_grpo, turnsight])
def test_group_advantages_on_hand_made_rewards(agent):
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    adv = agent.group_advantages(rewards, eps=0.0)
    s = math.sqrt(3) / 2  # (1 - 0.5) / sqrt(1/3): sample std of [1,0,0,1] is sqrt(1/3)
    torch.testing.assert_close(adv[0], torch.tensor([s, -s, -s, s]))
    assert (agent.group_advantages(rewards, 1e-6)[1] == 0).all()  # equal rewards: no signal
    torch.testing.assert_close(adv[2], torch.tensor([-0.5, -0.5, -0.5, 1.5]))  # mean 0.25, sample std 0.5
    s2 = 0.5 / math.sqrt(0.5)  # a group of 2: [1, 0] has sample std sqrt(1/2)
    torch.testing.assert_close(agent.group_advantages(torch.tensor([[1.0, 0.0]]), 0.0), torch.tensor([[s2, -s2]]))
    assert agent.group_advantages(torch.tensor([[3.0], [-1.0]]), 0.0).eq(0).all()  # a group of 1: centered, no std
    eps_adv = agent.group_advantages(rewards[:1], eps=0.5)  # eps is added to the std, damping
    torch.testing.assert_close(eps_adv[0], torch.tensor([0.5, -0.5, -0.5, 0.5]) / (math.sqrt(1 / 3) + 0.5))


def test_zero_variance_fraction_counts_groups_with_equal_rewards():
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 1.0]])
    assert group_reward_statistics(rewards)["charts/zero_variance_fraction"] == 0.5
    assert group_reward_statistics(torch.zeros(3, 5))["charts/zero_variance_fraction"] == 1.0
    assert group_reward_statistics(torch.tensor([[1.0, 0.0], [1.0, 1.0]]))["charts/group_reward_std"] == pytest.approx(0.25)


@pytest.mark.parametrize("agent", [grpo, rc_grpo, turnsight])  # TurnSight's old_logp: bf16 generation's log-probs
def test_clipped_loss_clips_the_ratio_and_kl_vanishes_at_the_reference(agent):
    logp = torch.log(torch.tensor([[0.5, 0.5, 0.5]]))
    old = torch.log(torch.tensor([[0.25, 0.5, 1.0]]))  # ratios 2, 1, 0.5
    loss_fn = agent.clipped_token_loss(clip_coef=0.2, kl_coef=0.1)
    loss, stats = loss_fn(logp, {"advantages": torch.tensor([[2.0, 2.0, -2.0]]), "old_logp": old, "ref_logp": logp})
    torch.testing.assert_close(loss, torch.tensor([[-2.4, -2.0, 1.6]]))  # min(r A, clip(r) A), negated
    torch.testing.assert_close(stats["clipfrac"], torch.tensor([[1.0, 0.0, 1.0]]))
    r = torch.tensor([2.0, 1.0, 0.5])
    torch.testing.assert_close(stats["approx_kl"], ((r - 1) - r.log()).unsqueeze(0))  # k3 estimate of KL(old || new)
    assert (stats["kl"] == 0).all()
    loss, stats = loss_fn(logp, {"advantages": torch.zeros(1, 3), "ref_logp": logp - 0.5})
    d = torch.tensor(-0.5)
    torch.testing.assert_close(stats["kl"], (d.exp() - d - 1).expand(1, 3))  # exp(d) - d - 1 with d = log pi_ref - log pi
    torch.testing.assert_close(loss, 0.1 * stats["kl"])  # zero advantage: only the KL term


@pytest.mark.parametrize("agent", [grpo, rc_grpo, turnsight])
def test_a_ratio_exactly_at_the_clip_edge_is_not_counted_as_clipped(agent):
    logp, old = torch.tensor([[0.3, 0.9]]).log(), torch.tensor([[0.25, 0.25]]).log()
    edge = ((logp - old).exp() - 1).abs()[0, 0].item()  # the float32 |ratio - 1| the loss computes
    _, stats = agent.clipped_token_loss(clip_coef=edge, kl_coef=0.0)(logp, {"advantages": torch.ones(1, 2), "old_logp": old})
    assert stats["clipfrac"].tolist() == [[0.0, 1.0]]


def test_turnsight_takes_one_step_per_batch_its_gradient_is_the_advantage_plus_the_kl_pull():
    logp = torch.log(torch.tensor([[0.2, 0.7, 0.5]])).requires_grad_()
    advantages = torch.tensor([[2.0, -1.0, 0.5]])
    ref = logp.detach() - 0.5
    loss, stats = turnsight.clipped_token_loss(0.2, 0.1)(logp, {"advantages": advantages, "ref_logp": ref})
    d = torch.tensor(-0.5)
    kl = d.exp() - d - 1
    torch.testing.assert_close(loss, -advantages + 0.1 * kl)  # the ratio is 1: the clip never binds
    torch.testing.assert_close(stats["kl"], kl.expand(1, 3))
    assert stats["clipfrac"].eq(0).all() and stats["approx_kl"].eq(0).all()
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, -advantages + 0.1 * (1 - d.exp()))  # d/dlogp of exp(d) - d - 1 is 1 - exp(d)


def test_rctp_and_sft_loss_is_the_negative_log_likelihood_and_counts_tokens_above_one_half():
    from cleanrl_style.llm.sft import cross_entropy_loss

    logp = torch.tensor([[0.6, 0.45, 0.9, 0.2, 0.5]]).log()
    loss, stats = cross_entropy_loss(logp, {})
    torch.testing.assert_close(loss, -logp)
    # above 1/2 the target is the argmax; at exactly 1/2 it may tie, so it is not counted
    assert stats["token_accuracy_lower_bound"].tolist() == [[1.0, 0.0, 1.0, 0.0, 0.0]]


def test_one_step_per_batch_gives_the_plain_policy_gradient():
    logp = torch.log(torch.tensor([[0.2, 0.7]])).requires_grad_()
    advantages = torch.tensor([[2.0, -1.0]])
    loss, _ = grpo.clipped_token_loss(0.2, 0.0)(logp, {"advantages": advantages})
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, -advantages)  # ratio 1: d/dlogp of -r A is -A


# ---- RC-GRPO's reward -------------------------------------------------------------------------------------


def transfer_task(amount: float) -> Task:
    config = {"bank": {"accounts": {"checking": 500.0, "savings": 100.0}, "transactions": [], "next_transaction_id": 1}}
    gold = ToolCall("transfer", {"source": "checking", "target": "savings", "amount": amount})
    return Task(task_id=0, seed=0, suites=("bank",), variant="base", initial_config=config, turns=[Turn("Move it.", [gold])])


def test_rc_grpo_reward_fails_a_wrong_argument_call_that_reaches_the_gold_state():
    """A transfer of 100.004 rounds to the gold 100.00: same balances, same transaction id returned,
    so the state and response checks pass; the arguments differ, so RC-GRPO's success fails."""
    task = transfer_task(100.0)
    wrong = format_calls([ToolCall("transfer", {"source": "checking", "target": "savings", "amount": 100.004})])
    right = format_calls([ToolCall("transfer", {"source": "checking", "target": "savings", "amount": 100})])
    rewards = {}
    for require in (True, False):
        env = make_task_family("tools:bank", num_tasks=10, require_gold_calls=require).make_env()
        for name, message in (("wrong", wrong), ("right", right)):
            env.reset(options={"task": task})
            env.step(message)
            _, reward, terminated, _, info = env.step("Done.")
            assert terminated
            rewards[require, name] = reward
            verdict = info["turn_results"][0]
            assert verdict["state_ok"] and verdict["response_ok"]
            assert verdict["calls_match"] == (name == "right")
    assert rewards[True, "wrong"] == 0.0 and rewards[True, "right"] == 1.0  # RC-GRPO's reward
    assert rewards[False, "wrong"] == 1.0  # the state and response checks alone let it pass
    assert rc_grpo.Args().require_gold_calls and grpo.Args().require_gold_calls and turnsight.Args().require_gold_calls


def test_rc_grpo_refuses_to_run_without_the_gold_call_check(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "agents" / "rc_grpo.py"), "--no-require-gold-calls", "--run-dir", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode != 0 and "gold calls" in proc.stderr and not (tmp_path / "r").exists()


# ---- RC-GRPO ------------------------------------------------------------------------------------------


def test_reward_tokens_are_added_as_single_special_tokens():
    tokenizer = build_tokenizer()
    model = build_tiny_model(tokenizer)
    rows = model.get_input_embeddings().weight.shape[0]
    ids = add_special_tokens(model, tokenizer, [HIGH, LOW])
    assert len(set(ids)) == 2 and min(ids) >= rows  # new rows after the old vocabulary
    assert model.get_input_embeddings().weight.shape[0] >= max(ids) + 1
    assert encode(tokenizer, f"Book it. {HIGH}")[-1] == ids[0]  # never split into pieces
    assert add_special_tokens(model, tokenizer, [HIGH, LOW]) == ids  # adding again changes nothing


def test_reward_tokens_start_at_their_words_embeddings_and_mean_resizing_leaves_them_alike():
    tokenizer = build_tokenizer()
    model = build_tiny_model(tokenizer)
    words = {HIGH: " success", LOW: " failure"}
    old = model.get_input_embeddings().weight.detach().clone()
    high, low = add_special_tokens(model, tokenizer, [HIGH, LOW], init_text=words)
    rows = model.get_input_embeddings().weight.detach()
    for token_id, text in ((high, words[HIGH]), (low, words[LOW])):
        source = tokenizer(text, add_special_tokens=False)["input_ids"]
        torch.testing.assert_close(rows[token_id], old[source].mean(dim=0), rtol=0, atol=0)
    assert torch.equal(rows[: old.shape[0]], old)  # the old vocabulary is untouched
    assert words == rc_grpo.REWARD_TOKEN_WORDS and rc_grpo.Args().token_init == "words"

    plain = build_tokenizer()
    model = build_tiny_model(plain)
    high, low = add_special_tokens(model, plain, [HIGH, LOW])  # transformers' mean resizing
    rows = model.get_input_embeddings().weight.detach()
    assert (rows[high] - rows[low]).norm() < 1e-3 * rows[: old.shape[0]].norm(dim=1).mean()


def test_reward_token_initialisation_refuses_unknown_tokens_and_empty_text():
    tokenizer = build_tokenizer()
    model = build_tiny_model(tokenizer)
    with pytest.raises(ValueError, match="not among the tokens added"):
        add_special_tokens(model, tokenizer, [HIGH], init_text={LOW: " failure"})
    with pytest.raises(ValueError, match="has no tokens"):
        add_special_tokens(model, tokenizer, [HIGH], init_text={HIGH: ""})


def test_rctp_data_is_one_to_one_and_each_token_sits_in_the_first_user_message(tasks):
    tokenizer = build_tokenizer()  # a fresh one: adding tokens changes it
    model = build_tiny_model(tokenizer)
    high, low = add_special_tokens(model, tokenizer, [HIGH, LOW])
    episodes = rc_grpo.scripted_episodes(tasks, 12, seed=0)
    sequences, masks = rc_grpo.rctp_dataset(episodes, tokenizer, " ", 4096)
    assert len(sequences) >= 4
    user_header = encode(tokenizer, "<|im_start|>user\n")
    labels = []
    for ids, mask in zip(sequences, masks):
        assert ids.count(high) + ids.count(low) == 1
        at = ids.index(high) if high in ids else ids.index(low)
        first_user = next(j for j in range(len(ids)) if ids[j : j + len(user_header)] == user_header)
        assert first_user < at < mask.index(True)  # inside the first user message, before any assistant token
        assert not mask[at]  # a conditioning token, never a target
        labels.append(ids[at] == high)
    assert sum(labels) == len(labels) - sum(labels)  # 1:1 high and low


def test_rctp_data_every_turn_puts_the_episodes_token_before_each_assistant_message(tasks):
    """--reward-token-every-turn: the one token of the episode's outcome closes every message an
    assistant message answers, so each assistant message directly follows it and its header."""
    tokenizer = build_tokenizer()
    high, low = add_special_tokens(build_tiny_model(tokenizer), tokenizer, [HIGH, LOW])
    episodes = rc_grpo.scripted_episodes(tasks, 12, seed=0)
    sequences, masks = rc_grpo.rctp_dataset(episodes, tokenizer, " ", 4096, every_turn=True)
    once, _ = rc_grpo.rctp_dataset(episodes, tokenizer, " ", 4096)
    assert len(sequences) == len(once) >= 4
    header = encode(tokenizer, "<|im_end|>\n<|im_start|>assistant\n")
    for ids, mask in zip(sequences, masks):
        token = high if high in ids else low
        assert low not in ids if token == high else high not in ids  # one outcome per episode
        starts = [j for j in range(1, len(ids)) if mask[j] and not mask[j - 1]]  # each assistant message
        assert ids.count(token) == len(starts) >= 2
        for j in starts:
            assert ids[j - len(header) - 1] == token and ids[j - len(header) : j] == header
            assert not mask[j - len(header) - 1]


def test_reward_token_every_turn_reaches_the_rollouts_and_the_evaluations():
    for flag in (False, True):
        args = rc_grpo.Args(reward_token_every_turn=flag)
        assert args.rollout_settings().suffix_every_turn is flag and args.eval_settings().suffix_every_turn is flag
        assert args.eval_settings().sampling.greedy


def test_rctp_data_refuses_episodes_of_one_outcome_and_keeps_conversations_up_to_the_token_limit(tasks):
    tokenizer = build_tokenizer()
    add_special_tokens(build_tiny_model(tokenizer), tokenizer, [HIGH, LOW])
    episodes = rc_grpo.scripted_episodes(tasks, 12, seed=0)
    good = [e for e in episodes if e[1] >= 1.0]
    with pytest.raises(SystemExit, match=f"successful and failed trajectories; got {len(good)} and 0"):
        rc_grpo.rctp_dataset(good, tokenizer, " ", 4096)
    sequences, _ = rc_grpo.rctp_dataset(episodes, tokenizer, " ", 4096)
    shortest = min(len(s) for s in sequences)
    kept, _ = rc_grpo.rctp_dataset(episodes, tokenizer, " ", shortest)  # a limit is inclusive
    assert [len(s) for s in kept] == [n for n in map(len, sequences) if n <= shortest] and kept


@pytest.mark.parametrize("share", [0.0, 0.25, 0.5, 1 / 3, 1.0])
def test_the_noisy_share_of_scripted_episodes_is_spread_evenly(share):
    flags = [rc_grpo.is_noisy(k, share) for k in range(12)]
    for count in range(1, 13):  # every prefix holds floor(count * share) noisy episodes
        assert sum(flags[:count]) == math.floor(count * share)
    if share == 0.5:
        assert flags == [k % 2 == 1 for k in range(12)]  # the default alternates, the expert first


def test_scripted_episodes_follow_the_noisy_share(tasks):
    expert_only = rc_grpo.scripted_episodes(tasks, 6, seed=0, noisy_share=0.0)
    assert all(reward == 1.0 for _, reward in expert_only)
    noisy_only = rc_grpo.scripted_episodes(tasks, 6, seed=0, noisy_share=1.0)
    assert sum(reward < 1.0 for _, reward in noisy_only) >= 4  # one mistake per episode: mostly failures
    half = rc_grpo.scripted_episodes(tasks, 6, seed=0)
    assert [r for _, r in half[0::2]] == [1.0] * 3 and half[0::2] == expert_only[0::2]  # the same tasks and seeds
    assert half[1::2] == noisy_only[1::2]
    from cleanrl_style.runs.cli import UsageError

    with pytest.raises(UsageError, match=r"--rctp-noisy-share 1.5: must lie in \[0, 1\]"):
        rc_grpo.Args(rctp_noisy_share=1.5).validate()


def test_scripted_gap_calls_reach_the_noisy_policy_and_bad_kinds_are_refused():
    """--rctp-noisy-kinds with gap_call: the noisy episodes of gap tasks call a tool where the expert
    says no tool can do it or asks; the default kinds never do."""
    from cleanrl_style.runs.cli import UsageError

    family = make_task_family("tools:bank", num_tasks=60, variants=("missing_function",))
    gap_reply = "Sorry, none of the tools I have can do that."

    def refusals(kinds):
        episodes = rc_grpo.scripted_episodes(family, 8, seed=0, noisy_share=1.0, kinds=kinds)
        assert all(reward == 0.0 for _, reward in episodes)
        return sum(any(m["content"] == gap_reply for m in messages) for messages, _ in episodes)

    assert refusals(rc_grpo.MISTAKE_KINDS) == 8 and refusals(("gap_call",)) == 0
    with pytest.raises(UsageError, match="--rctp-noisy-kinds takes one or more of .* gap_call, got typo"):
        rc_grpo.Args(rctp_noisy_kinds=("typo",)).validate()


@pytest.mark.parametrize("scale, lora_rank", [(0.0, 0), (-3.0, 0), (100.0, 8)])
def test_a_reward_token_rate_that_cannot_apply_is_refused(scale, lora_rank):
    from cleanrl_style.runs.cli import UsageError

    with pytest.raises(UsageError, match=f"--token-lr-scale must be positive, and 1 with --lora-rank > 0 .*got {scale}"):
        rc_grpo.Args(token_lr_scale=scale, lora_rank=lora_rank).validate()
    rc_grpo.Args(token_lr_scale=100.0).validate()  # a full fine-tune takes any positive scale
    rc_grpo.Args(lora_rank=lora_rank).validate()  # and LoRA the default


def test_every_turn_noisy_episodes_err_in_more_assistant_messages(tasks):
    """--rctp-noisy-every-turn reaches the noisy policy: its episodes differ from the expert's in
    more assistant messages than one-mistake episodes on the same tasks and seeds."""
    expert = rc_grpo.scripted_episodes(tasks, 8, seed=0, noisy_share=0.0)
    one = rc_grpo.scripted_episodes(tasks, 8, seed=0, noisy_share=1.0)
    every = rc_grpo.scripted_episodes(tasks, 8, seed=0, noisy_share=1.0, every_turn=True)

    def differing(episodes):
        return [
            sum(a != b for a, b in zip(assistant(m), assistant(e))) for (m, _), (e, _) in zip(episodes, expert, strict=True)
        ]

    def assistant(messages):
        return [m["content"] for m in messages if m["role"] == "assistant"]

    assert sum(differing(every)) > sum(differing(one)) > 0
    assert all(reward == 0.0 for _, reward in every)


def test_rctp_data_shuffles_each_outcome_before_the_one_to_one_cut(tasks):
    """Failures from a second source appended after the scripted ones still reach the data."""
    tokenizer = build_tokenizer()
    add_special_tokens(build_tiny_model(tokenizer), tokenizer, [HIGH, LOW])
    episodes = rc_grpo.scripted_episodes(tasks, 12, seed=0)
    failures = sum(reward < 1.0 for _, reward in episodes)
    marker = "ON-POLICY FAILURE"
    extra = [([*messages[:-1], {"role": "assistant", "content": marker}], 0.0) for messages, _ in episodes[:failures]]
    sequences, _ = rc_grpo.rctp_dataset(episodes + extra, tokenizer, " ", 4096, seed=0)
    marked = sum(marker in tokenizer.decode(ids) for ids in sequences)
    assert 0 < marked < len(sequences) // 2  # mixed with the scripted failures, not all kept and not none
    again, _ = rc_grpo.rctp_dataset(episodes + extra, tokenizer, " ", 4096, seed=0)
    assert again == sequences  # the seed fixes the draw


def groups_of(tokens: list[str], size: int) -> list[list[str]]:
    return [tokens[g : g + size] for g in range(0, len(tokens), size)]


@pytest.mark.parametrize("group_size", [2, 3, 4, 5, 8, 16])
def test_every_group_holds_both_reward_tokens_at_share_one_half(group_size):
    tokens = rc_grpo.draw_reward_tokens(500, group_size, 0.5, random.Random(0))
    assert len(tokens) == 500 * group_size and set(tokens) == {HIGH, LOW}
    counts = [group.count(HIGH) for group in groups_of(tokens, group_size)]
    assert set(counts) == ({group_size // 2} if group_size % 2 == 0 else {group_size // 2, group_size // 2 + 1})
    assert abs(sum(counts) / len(tokens) - 0.5) < 0.02  # an odd group's extra token is high half the time


@pytest.mark.parametrize(
    "p,group_size,counts",
    [
        (0.25, 4, {1}),
        (0.75, 8, {6}),
        (0.2, 5, {1}),
        (0.1, 5, {1}),  # 0.5 rounds to 0 or 1; kept at 1 so the group holds both tokens
        (0.9, 5, {4}),  # 4.5 rounds to 4 or 5; kept at 4
        (0.3, 5, {1, 2}),  # 1.5: 1 or 2
        (0.0, 5, {0}),
        (1.0, 5, {5}),
        (0.5, 1, {0, 1}),  # a group of one cannot hold both
        (0.1, 2, {1}),  # 0.2 rounds to 0 or 1; a group of two holds both
        (0.9, 2, {1}),
    ],
)
def test_reward_token_counts_per_group_for_other_shares(p, group_size, counts):
    tokens = rc_grpo.draw_reward_tokens(400, group_size, p, random.Random(1))
    assert {group.count(HIGH) for group in groups_of(tokens, group_size)} == counts


def test_the_count_rounds_up_with_probability_equal_to_the_fraction():
    class Draw:  # an rng whose uniform draw in [0, 1) is fixed
        def __init__(self, u):
            self.u = u

        def random(self):
            return self.u

    # 0.3 x 5 = 1.5: up (to 2) when the draw is below 0.5, which happens with probability 0.5 exactly
    assert [rc_grpo.high_token_count(5, 0.3, Draw(u)) for u in (0.0, 0.49, 0.5, 0.99)] == [2, 2, 1, 1]


def test_reward_tokens_are_shuffled_within_each_group_and_a_bad_share_is_refused():
    tokens = rc_grpo.draw_reward_tokens(200, 4, 0.5, random.Random(2))
    assert len({tuple(group) for group in groups_of(tokens, 4)}) == 6  # every arrangement of 2 high and 2 low
    with pytest.raises(ValueError, match="p_high"):
        rc_grpo.draw_reward_tokens(1, 4, 1.5, random.Random(0))
    from cleanrl_style.runs.cli import UsageError

    with pytest.raises(UsageError, match="--p-high 1.5"):  # the flag: one line, exit status 2
        rc_grpo.Args(p_high=1.5).validate()


def test_each_rollout_is_conditioned_on_its_own_token(tasks):
    tokenizer = build_tokenizer()
    model = build_tiny_model(tokenizer)
    high, low = add_special_tokens(model, tokenizer, [HIGH, LOW])
    tokens = [HIGH, LOW, LOW]
    rollouts, _ = collect_rollouts(
        model, tokenizer, tasks, [tasks.train_ids[0]] * 3, sampled(3, 1), first_user_suffixes=[" " + t for t in tokens]
    )
    for r, token in zip(rollouts, tokens):
        wanted, other = (high, low) if token == HIGH else (low, high)
        assert other not in r.tokens
        at = r.tokens.index(wanted)
        assert not r.policy_mask[at] and at < r.turns[0].start
        assert r.messages[1]["content"].endswith(" " + token)


# ---- TurnSight ----------------------------------------------------------------------------------------


def test_horizon_selection_takes_the_majority_sign_and_its_largest_score():
    gaps = torch.tensor(
        [
            [0.2, -0.1, 0.5],  # majority +: 0.5 (d=3)
            [-0.3, -0.6, 0.9],  # majority -: -0.6 (d=2), although |0.9| is larger
            [0.1, 0.2, 0.3],  # all agree: 0.3
            [0.0, 0.1, -0.1],  # no majority: 0
            [-0.4, -0.2, -0.1],  # all agree: -0.4 (d=1)
        ]
    )
    chosen, index, agree = turnsight.select_horizon(gaps)
    torch.testing.assert_close(chosen, torch.tensor([0.5, -0.6, 0.3, 0.0, -0.4]))
    assert index.tolist() == [2, 1, 2, -1, 0]
    assert agree.tolist() == [False, False, True, False, True]


def test_sibling_normalization_has_zero_mean_unit_std():
    z = turnsight.normalize_over_siblings(torch.tensor([0.1, 0.4, -0.2, 0.7, 0.0]), eps=0.0)
    assert z.mean().abs() < 1e-6 and (z.std(unbiased=False) - 1).abs() < 1e-5
    assert (turnsight.normalize_over_siblings(torch.tensor([0.3]), 1e-6) == 0).all()
    # two turns: mean 2, population std 1; eps is added to the std
    pair = torch.tensor([1.0, 3.0])
    torch.testing.assert_close(turnsight.normalize_over_siblings(pair, 0.0), torch.tensor([-1.0, 1.0]))
    torch.testing.assert_close(turnsight.normalize_over_siblings(pair, 0.5), torch.tensor([-1.0, 1.0]) / 1.5)


def test_group_normalization_by_hand_together_and_with_the_last_turns_apart():
    scores = [torch.tensor([1.0, 3.0, 10.0]), torch.tensor([5.0, 20.0]), torch.tensor([30.0])]
    flat = torch.tensor([1.0, 3.0, 10.0, 5.0, 20.0, 30.0])
    together = turnsight.normalize_group(scores, 0.0, last_apart=False)
    assert [len(z) for z in together] == [3, 2, 1]
    torch.testing.assert_close(torch.cat(together), (flat - flat.mean()) / flat.std(unbiased=False))
    # apart: earlier turns 1, 3, 5 (mean 3, population std sqrt(8/3)); last turns 10, 20, 30 (mean 20, std sqrt(200/3))
    e, last = math.sqrt(8 / 3), math.sqrt(200 / 3)
    apart = turnsight.normalize_group(scores, 0.0, last_apart=True)
    for got, want in zip(apart, [[-2 / e, 0.0, -10 / last], [2 / e, 0.0], [10 / last]], strict=True):
        torch.testing.assert_close(got, torch.tensor(want))
    # one earlier turn alone has no spread: z 0; the last turns 1 and 3 still -1 and +1; eps adds to the std
    apart = turnsight.normalize_group([torch.tensor([4.0, 1.0]), torch.tensor([3.0])], 0.5, last_apart=True)
    torch.testing.assert_close(torch.cat(apart), torch.tensor([0.0, -1.0 / 1.5, 1.0 / 1.5]))


@pytest.mark.parametrize("eps_w,lam", [(0.5, 0.5), (0.9, 1.0), (0.2, 0.3)])
def test_weights_stay_in_band_and_never_flip_an_advantage(eps_w, lam):
    g = torch.Generator().manual_seed(0)
    advantages = torch.randn(10_000, generator=g) * 3
    advantages[:100] = 0.0
    z = torch.randn(10_000, generator=g) * 50  # far beyond the tanh's range
    w = turnsight.modulation_weights(torch.sign(advantages), z, eps_w)
    assert (w >= 1 - eps_w).all() and (w <= 1 + eps_w).all()
    modulated = turnsight.modulate(advantages, w, lam)
    assert (torch.sign(modulated) == torch.sign(advantages)).all()
    assert (modulated[:100] == 0).all()


def test_weights_reward_hindsight_agreement_and_sharpen_penalties():
    z = torch.tensor([2.0, -2.0])
    up = turnsight.modulation_weights(torch.tensor([1.0, 1.0]), z, 0.5)
    down = turnsight.modulation_weights(torch.tensor([-1.0, -1.0]), z, 0.5)
    assert up[0] > 1 > up[1]  # A > 0: turns the hindsight teacher endorses get more credit
    assert down[1] > 1 > down[0]  # A < 0: turns the teacher disowns get more of the blame


def test_hindsight_block_holds_turns_k_to_k_plus_d_minus_1(tokenizer, tasks):
    model = build_tiny_model(tokenizer)
    rollouts, _ = collect_rollouts(model, tokenizer, tasks, [tasks.train_ids[0]], sampled(3, 4))
    r = rollouts[0]
    for j, turn in enumerate(r.turns):
        turn.content = f"CALLS-{j}"
        turn.tool_outputs = [f"OUT-{j}"]
    args = turnsight.Args()
    text = turnsight.hindsight_message(r, 1, 2, args)["content"]
    assert "CALLS-1" in text and "OUT-1" in text and "CALLS-2" in text and "OUT-2" in text
    assert "CALLS-0" not in text and "CALLS-3" not in text
    assert "CALLS-3" in turnsight.hindsight_message(r, 3, 3, args)["content"]  # clipped at the last turn
    # turns are numbered from 1 within the block, each call before its tool outputs
    later = ["[turn 2] assistant: CALLS-2", "[turn 2] tool: OUT-2"]
    assert text.splitlines() == [args.hindsight_header, "[turn 1] assistant: CALLS-1", "[turn 1] tool: OUT-1", *later]
    from_output = turnsight.hindsight_message(r, 1, 2, turnsight.Args(hindsight_start="output"))["content"]
    assert from_output.splitlines() == [args.hindsight_header, "[turn 1] tool: OUT-1", *later]
    assert turnsight.hindsight_message(r, 1, 2, args)["role"] == "user"  # the chat template renders the role


def test_a_hindsight_block_from_the_output_leaves_out_the_turns_own_message(tokenizer, tasks):
    """``--hindsight-start output``: turn k's block holds its tool outputs and the later turns, never
    the message it scores; a block with nothing to show (d = 1 of a turn without tool output) is None."""
    model = build_tiny_model(tokenizer)
    rollouts, _ = collect_rollouts(model, tokenizer, tasks, [tasks.train_ids[0]], sampled(3, 4))
    r = rollouts[0]
    for j, turn in enumerate(r.turns):
        turn.content = f"CALLS-{j}"
        turn.tool_outputs = [f"OUT-{j}"] if j != 2 else []
    args = turnsight.Args(hindsight_start="output")
    text = turnsight.hindsight_message(r, 1, 2, args)["content"]
    assert "OUT-1" in text and "CALLS-2" in text and "CALLS-1" not in text and "CALLS-0" not in text
    assert turnsight.hindsight_message(r, 2, 1, args) is None
    assert "CALLS-3" in turnsight.hindsight_message(r, 2, 2, args)["content"]
    assert "CALLS-1" in turnsight.hindsight_message(r, 1, 1, turnsight.Args())["content"]  # the default shows it


@pytest.mark.parametrize("reward,said", [(1.0, "the task was solved (reward 1)"), (0.0, "the task was not solved (reward 0)")])
def test_a_hindsight_block_with_the_outcome_ends_with_it_and_is_never_empty(tokenizer, tasks, reward, said):
    model = build_tiny_model(tokenizer)
    rollouts, _ = collect_rollouts(model, tokenizer, tasks, [tasks.train_ids[0]], sampled(3, 4))
    r = rollouts[0]
    r.reward = reward
    for j, turn in enumerate(r.turns):
        turn.content, turn.tool_outputs = f"CALLS-{j}", []
    args = turnsight.Args(hindsight_start="output", hindsight_outcome=True)
    last = turnsight.hindsight_message(r, len(r.turns) - 1, 1, args)["content"]  # no output, no later turn
    assert last.splitlines()[-1] == f"Outcome: {said}." and "CALLS" not in last
    assert turnsight.hindsight_message(r, 0, 2, args)["content"].splitlines()[-1] == f"Outcome: {said}."
    assert "Outcome" not in turnsight.hindsight_message(r, 0, 2, turnsight.Args())["content"]  # off by default


@pytest.mark.parametrize("env", ["tools:bank", "python-math"])
def test_turnsight_advantages_modulate_each_turn_without_flipping_signs(tokenizer, env):
    tasks = make_task_family(env, num_tasks=60, variants=("base",))
    policy, teacher = build_tiny_model(tokenizer, seed=0), build_tiny_model(tokenizer, seed=1)
    ids = [tasks.train_ids[0]] * 3 + [tasks.train_ids[1]] * 3
    rollouts, _ = collect_rollouts(policy, tokenizer, tasks, ids, sampled(4, 2))
    advantages = torch.tensor([1.0, -0.5, -0.5, 0.0, 0.0, 0.0])  # the second group has zero variance
    args = turnsight.Args(micro_batch_size=8)
    token_adv, stats = turnsight.turnsight_advantages(policy, teacher, tokenizer, rollouts, advantages, 2, args)
    for r, a, adv in zip(rollouts, advantages, token_adv):
        for turn in r.turns:
            span = adv[turn.start : turn.end]
            assert (span == span[0]).all()  # one value per turn
            assert torch.sign(span[0]) == torch.sign(a)
            if a != 0:
                assert 1 - args.lam * args.eps_w <= (span[0] / a).item() <= 1 + args.lam * args.eps_w
        outside = torch.ones(len(r.tokens), dtype=torch.bool)
        for turn in r.turns:
            outside[turn.start : turn.end] = False
        assert (adv[outside] == a).all()
    assert 1 - args.eps_w <= stats["turnsight/weight_min"] <= stats["turnsight/weight_max"] <= 1 + args.eps_w
    assert stats["turnsight/modulated_turns"] == sum(len(r.turns) for r in rollouts[:3])


def test_each_distinct_hindsight_block_votes_once():
    """Horizons that run past the last turn repeat a shorter horizon's block (NaN in the scores) and
    do not vote again: in a 3-turn episode, turn 2 of horizons 1, 2, 3 has the blocks {2}, {2, 3} and
    {2, 3}, turn 3 has {3} three times. The chosen scores below are computed by hand."""
    nan = float("nan")
    scores = torch.tensor(
        [
            [-0.2, 0.3, nan],  # d=3 repeats d=2's block: one vote each, - and +, no majority: 0 (votes -,+,+ would give 0.3)
            [0.4, nan, nan],  # the last turn: every horizon is the same block, one vote: 0.4, all agree
            [-0.1, -0.5, nan],  # two votes, both -: -0.5 (d=2)
            [0.2, -0.1, -0.3],  # three distinct blocks: majority -, the largest of them -0.3 (d=3)
        ]
    )
    chosen, index, agree = turnsight.select_horizon(scores)
    torch.testing.assert_close(chosen, torch.tensor([0.0, 0.4, -0.5, -0.3]))
    assert index.tolist() == [-1, 0, 1, 2]
    assert agree.tolist() == [False, True, True, False]


def teacher_forced_logprobs(model, prompt: list[int], y: list[int], temperature: float) -> torch.Tensor:
    """log softmax(logits / T) of each token of ``y`` after ``prompt``, from one plain forward pass."""
    ids = torch.tensor([prompt + y])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float() / temperature
    positions = torch.arange(len(prompt), len(prompt) + len(y))
    return torch.log_softmax(logits[positions - 1], dim=-1)[torch.arange(len(y)), torch.tensor(y)]


@pytest.fixture(scope="module")
def multi_turn_rollouts(tokenizer, tasks):
    policy = build_tiny_model(tokenizer, seed=0)
    ids = [tasks.train_ids[0]] * 3 + [tasks.train_ids[1]] * 3
    rollouts, _ = collect_rollouts(policy, tokenizer, tasks, ids, sampled(4, 3), seed=2)
    assert max(len(r.turns) for r in rollouts) == 3 and min(len(r.turns) for r in rollouts) >= 2
    return policy, rollouts


@pytest.mark.parametrize("teacher,start", [("policy", "turn"), ("initial", "turn"), ("policy", "output")])
def test_turn_scores_equal_a_hand_computation(tokenizer, multi_turn_rollouts, teacher, start):
    """Each (turn, horizon) score is the mean over the turn's tokens of the teacher's log-prob after the
    context and the hindsight message, minus the policy's after the context alone; one plain forward
    pass per sequence, by hand. ``--teacher policy`` reads the hindsight with the policy itself,
    ``initial`` with the frozen starting model (here another random model). With ``--hindsight-start
    output`` an empty block (the first turn of each rollout is given no tool output) is NaN: no vote."""
    import copy

    from cleanrl_style.llm.rollout import chat_template_text

    policy, rollouts = multi_turn_rollouts
    rollouts = copy.deepcopy(rollouts)
    for r in rollouts:
        for j, turn in enumerate(r.turns):
            turn.tool_outputs = [f"balance {j}: 1{j}0.00"] if j else []
    initial = build_tiny_model(tokenizer, seed=1)
    args = turnsight.Args(micro_batch_size=8, temperature=0.9, teacher=teacher, hindsight_start=start)
    student = [
        torch.cat([torch.zeros(1), teacher_forced_logprobs(policy, r.tokens[:1], r.tokens[1:], args.temperature)])
        for r in rollouts
    ]
    scores = turnsight.turn_scores(policy, initial, tokenizer, rollouts, student, args)
    reader = policy if teacher == "policy" else initial
    checked = empty = 0
    for r, s in zip(rollouts, scores):
        assert s.shape == (len(r.turns), len(args.horizons))
        for k, turn in enumerate(r.turns):
            y = r.tokens[turn.start : turn.end]
            seen = set()
            for h, d in enumerate(args.horizons):
                block = min(k + d, len(r.turns))
                message = turnsight.hindsight_message(r, k, d, args)
                if block in seen or message is None:
                    assert s[k, h].isnan()
                    empty += message is None
                    continue
                seen.add(block)
                prompt = encode(tokenizer, chat_template_text(tokenizer, turn.context_messages + [message], True))
                expected = teacher_forced_logprobs(reader, prompt, y, args.temperature) - teacher_forced_logprobs(
                    policy, r.tokens[: turn.start], y, args.temperature
                )
                assert s[k, h].item() == pytest.approx(expected.mean().item(), abs=1e-4)
                checked += 1
    assert checked >= 2 * len(rollouts)
    assert (empty == len(rollouts)) == (start == "output")  # d = 1 of each first turn


def test_the_student_scores_at_the_sampling_temperature(tokenizer, multi_turn_rollouts):
    """The second term of every gap is the policy's log-prob at the temperature the episode was
    sampled at (the teacher's), not at 1."""
    policy, rollouts = multi_turn_rollouts
    args = turnsight.Args(micro_batch_size=8, temperature=0.7)
    student = turnsight.student_logprobs(policy, tokenizer, rollouts[:2], args)
    for r, got in zip(rollouts[:2], student):
        turn = r.turns[0]
        y = r.tokens[turn.start : turn.end]
        expected = teacher_forced_logprobs(policy, r.tokens[: turn.start], y, 0.7)
        torch.testing.assert_close(got[turn.start : turn.end], expected, atol=1e-4, rtol=0)


def test_turn_scores_do_not_depend_on_the_order_of_the_horizons(tokenizer, multi_turn_rollouts):
    policy, rollouts = multi_turn_rollouts
    student = batched_logprobs(
        policy, [r.tokens for r in rollouts], [r.policy_mask for r in rollouts], tokenizer.pad_token_id, 8
    )
    ordered = turnsight.turn_scores(policy, None, tokenizer, rollouts, student, turnsight.Args(horizons=(1, 2, 5, 6)))
    # 5 and 6 run past the last turn (the same block), and 2 comes after them
    mixed = turnsight.turn_scores(policy, None, tokenizer, rollouts, student, turnsight.Args(horizons=(1, 5, 6, 2)))
    for a, b in zip(ordered, mixed):
        torch.testing.assert_close(b[:, 0], a[:, 0])  # d = 1
        for row_a, row_b in zip(a, b):  # every distinct block scored once, whichever horizon names it first
            torch.testing.assert_close(row_b[~row_b.isnan()].sort().values, row_a[~row_a.isnan()].sort().values)


def test_turn_scores_read_each_distinct_block_once_and_skip_turns_without_tokens(tokenizer, multi_turn_rollouts, monkeypatch):
    """The teacher reads one sequence per (rollout, turn, hindsight block) of a turn that has tokens: a
    horizon past the last turn repeats a shorter one's block and is not read again, and a turn without
    tokens (a message cut before its first token) is neither read nor scored."""
    import copy

    policy, rollouts = multi_turn_rollouts
    rollouts = copy.deepcopy(rollouts[:3])
    emptied = rollouts[0].turns[1]
    emptied.end = emptied.start  # the middle turn of a 3-turn episode, left without tokens
    student = batched_logprobs(
        policy, [r.tokens for r in rollouts], [r.policy_mask for r in rollouts], tokenizer.pad_token_id, 8
    )
    read = []

    def counting_logprobs(model, sequences, masks, *a, **kw):
        read.append(len(sequences))
        return batched_logprobs(model, sequences, masks, *a, **kw)

    monkeypatch.setattr(turnsight, "batched_logprobs", counting_logprobs)
    args = turnsight.Args(horizons=(1, 2, 5, 6), teacher="policy")
    scores = turnsight.turn_scores(policy, None, tokenizer, rollouts, student, args)
    blocks = {
        (i, k, min(k + d, len(r.turns)))
        for i, r in enumerate(rollouts)
        for k, turn in enumerate(r.turns)
        if turn.end > turn.start
        for d in args.horizons
    }
    assert read == [len(blocks)]
    assert scores[0][1].eq(0).all()  # the empty turn: no score, no NaN
    assert not scores[0][0].isnan().all() and not scores[0][2].isnan().all()


def test_the_horizon_statistic_leaves_out_turns_without_a_majority(tokenizer, monkeypatch):
    """``turnsight/horizon_mean`` averages the chosen horizons of the turns whose votes have a majority;
    a turn whose votes split evenly (index -1) has no chosen horizon and does not count."""
    nan = float("nan")
    crafted = {
        0: torch.tensor([[0.4, 0.1, nan], [-0.2, 0.3, nan]]),  # d=1 chosen; the second turn splits: none
        1: torch.tensor([[-0.1, -0.2, -0.5], [0.2, nan, nan]]),  # d=6 chosen (the largest -), then d=1
    }
    rollouts = [  # two turns each, of tokens 1-2 and 4-5
        Rollout(
            group=0,
            task_id=0,
            first_user_suffix="",
            tokens=list(range(6)),
            policy_mask=[False, True, True, False, True, True],
            turns=[RolloutTurn(1, 3, "", [], 0, []), RolloutTurn(4, 6, "", [], 1, [])],
        )
        for _ in range(2)
    ]
    monkeypatch.setattr(turnsight, "batched_logprobs", lambda *a, **kw: [torch.zeros(6), torch.zeros(6)])
    monkeypatch.setattr(turnsight, "turn_scores", lambda *a, **kw: [crafted[0], crafted[1]])
    args = turnsight.Args(horizons=(1, 2, 6))
    _, stats = turnsight.turnsight_advantages(None, None, tokenizer, rollouts, torch.tensor([1.0, -1.0]), 1, args)
    assert stats["turnsight/horizon_mean"] == pytest.approx((1 + 6 + 1) / 3)
    assert stats["turnsight/modulated_turns"] == 4


def test_the_teachers_pass_runs_at_the_runs_precision(tokenizer, multi_turn_rollouts):
    if bf16_attention_error():
        pytest.skip(f"torch's bf16 attention fails on this CPU: {bf16_attention_error()}")
    policy, rollouts = multi_turn_rollouts
    student = batched_logprobs(
        policy, [r.tokens for r in rollouts], [r.policy_mask for r in rollouts], tokenizer.pad_token_id, 8
    )
    fp32, bf16 = (
        turnsight.turn_scores(policy, None, tokenizer, rollouts, student, turnsight.Args(precision=precision))
        for precision in ("fp32", "bf16")
    )
    differences = torch.cat([(a - b).abs().flatten() for a, b in zip(fp32, bf16)])
    differences = differences[~differences.isnan()]
    assert 0 < differences.max() < 1.0  # bf16 rounds: 0.07-0.29 at most over tiny models of seeds 0-2 (Xeon, AMX)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_turnsight_advantages_follow_the_formula_turn_by_turn(tokenizer, multi_turn_rollouts, precision):
    """A'_k = A ((1 - lam) + lam (1 + eps_w tanh(sign(A) z_k))), z over the group's chosen turn scores,
    computed by hand from the turn scores (the student scored at the sampling temperature and the run's
    precision, the teacher the frozen initial model); a negative advantage takes the least blame on the
    turn the hindsight endorses most."""
    if precision == "bf16" and bf16_attention_error():
        pytest.skip(f"torch's bf16 attention fails on this CPU: {bf16_attention_error()}")
    policy, rollouts = multi_turn_rollouts
    initial = build_tiny_model(tokenizer, seed=1)
    args = turnsight.Args(micro_batch_size=8, lam=0.8, eps_w=0.9, temperature=0.7, precision=precision, teacher="initial")
    advantages = torch.tensor([1.0, -0.5, -0.5, -1.2, 0.6, 0.6])
    token_adv, stats = turnsight.turnsight_advantages(policy, initial, tokenizer, rollouts, advantages, 2, args)
    sequences, masks = [r.tokens for r in rollouts], [r.policy_mask for r in rollouts]
    student = batched_logprobs(policy, sequences, masks, tokenizer.pad_token_id, 8, temperature=0.7, precision=precision)
    scores = turnsight.turn_scores(policy, initial, tokenizer, rollouts, student, args)
    horizons, weights, agree = [], [], []
    for group in (range(0, 3), range(3, 6)):
        chosen = [turnsight.select_horizon(scores[i]) for i in group]
        flat = torch.cat([c[0] for c in chosen])
        z_all = (flat - flat.mean()) / (flat.std(unbiased=False) + args.norm_eps)
        offset = 0
        for i, (s, index, agrees) in zip(group, chosen):
            z = z_all[offset : offset + len(s)]
            offset += len(s)
            a = float(advantages[i])
            expected = a * ((1 - args.lam) + args.lam * (1 + args.eps_w * torch.tanh(math.copysign(1.0, a) * z)))
            got = torch.stack([token_adv[i][turn.start] for turn in rollouts[i].turns])
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
            if a < 0 and z.max() - z.min() > 0.1:  # the endorsed turn (largest z) gets the smallest |A'|
                assert got.abs().argmin() == z.argmax()
            horizons += [args.horizons[h] for h in index.tolist() if h >= 0]  # turns without a majority have none
            weights.append(1 + args.eps_w * torch.tanh(math.copysign(1.0, a) * z))
            agree.append(agrees.float())
    assert stats["turnsight/modulated_turns"] == sum(len(r.turns) for r in rollouts)
    assert stats["turnsight/horizon_mean"] == pytest.approx(sum(horizons) / len(horizons))
    w = torch.cat(weights)
    assert stats["turnsight/weight_mean"] == pytest.approx(float(w.mean()), rel=1e-5)
    assert stats["turnsight/weight_std"] == pytest.approx(float(w.std(unbiased=False)), rel=1e-4)  # population std
    assert (stats["turnsight/weight_min"], stats["turnsight/weight_max"]) == pytest.approx(
        (float(w.min()), float(w.max())), rel=1e-5
    )
    assert stats["turnsight/agreement_fraction"] == pytest.approx(float(torch.cat(agree).mean()))


def test_turnsight_advantages_normalize_the_last_turns_apart_when_asked(tokenizer, multi_turn_rollouts):
    """``--normalize-last-apart``: z of each group's last turns over those alone, of the earlier turns
    over those alone, by hand from the turn scores; A' follows from z as without the flag."""
    policy, rollouts = multi_turn_rollouts
    args = turnsight.Args(micro_batch_size=8, lam=0.8, eps_w=0.9, temperature=0.7, normalize_last_apart=True)
    advantages = torch.tensor([1.0, -0.5, -0.5, -1.2, 0.6, 0.6])
    token_adv, _ = turnsight.turnsight_advantages(policy, None, tokenizer, rollouts, advantages, 2, args)
    student = turnsight.student_logprobs(policy, tokenizer, rollouts, args)
    scores = turnsight.turn_scores(policy, None, tokenizer, rollouts, student, args)
    for group in (range(0, 3), range(3, 6)):
        chosen = {i: turnsight.select_horizon(scores[i])[0] for i in group}
        last = torch.stack([s[-1] for s in chosen.values()])
        earlier = torch.cat([s[:-1] for s in chosen.values()])
        for i, s in chosen.items():
            z = torch.cat(
                [
                    (s[:-1] - earlier.mean()) / (earlier.std(unbiased=False) + args.norm_eps),
                    ((s[-1:] - last.mean()) / (last.std(unbiased=False) + args.norm_eps)),
                ]
            )
            a = float(advantages[i])
            expected = a * ((1 - args.lam) + args.lam * (1 + args.eps_w * torch.tanh(math.copysign(1.0, a) * z)))
            got = torch.stack([token_adv[i][turn.start] for turn in rollouts[i].turns])
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    args.normalize_last_apart = False  # the flag changes the advantages of these rollouts
    together, _ = turnsight.turnsight_advantages(policy, None, tokenizer, rollouts, advantages, 2, args)
    assert any(not torch.allclose(a, b) for a, b in zip(token_adv, together))


def test_turnsight_leaves_groups_without_signal_alone_and_modulates_the_others(tokenizer, multi_turn_rollouts):
    policy, rollouts = multi_turn_rollouts
    args = turnsight.Args(micro_batch_size=8, lam=0.8, eps_w=0.9)
    token_adv, stats = turnsight.turnsight_advantages(policy, None, tokenizer, rollouts, torch.zeros(6), 2, args)
    assert stats == {} and all(a.eq(0).all() for a in token_adv)  # no advantage anywhere: nothing to score
    advantages = torch.tensor([0.0, 0.0, 0.0, -1.2, 0.6, 0.6])  # the first group has no signal, the second has
    token_adv, stats = turnsight.turnsight_advantages(policy, None, tokenizer, rollouts, advantages, 2, args)
    assert all(token_adv[i].eq(0).all() for i in range(3))
    assert stats["turnsight/modulated_turns"] == sum(len(rollouts[i].turns) for i in range(3, 6))
    modulated = [(float(token_adv[i][turn.start]), float(advantages[i])) for i in range(3, 6) for turn in rollouts[i].turns]
    assert any(got != flat for got, flat in modulated)  # the second group's turns were modulated


def test_sft_batches_cover_every_trace_once_per_epoch_in_a_fresh_order():
    from cleanrl_style.llm.sft import batch_order

    epochs = [[i for step in range(1 + 3 * e, 4 + 3 * e) for i in batch_order(10, 4, seed=1, step=step)] for e in range(2)]
    assert [sorted(e) for e in epochs] == [list(range(10))] * 2  # 3 batches of 4, 4, 2 per epoch
    assert [len(batch_order(10, 4, 1, step)) for step in (1, 2, 3)] == [4, 4, 2]
    assert epochs[0] != epochs[1] and batch_order(10, 4, 1, 1) == batch_order(10, 4, 1, 1)


def test_sft_data_mixes_crashed_first_calls_and_keeps_traces_up_to_the_limit():
    from cleanrl_style.llm.sft import expert_episodes, sft_dataset

    family = make_task_family("python-math", num_tasks=70, test_kinds=(6,))
    episodes = expert_episodes(family, 12, seed=2, crash_first=0.5)
    turns = [sum(m["role"] == "assistant" for m in messages) for messages, _ in episodes]
    assert set(turns) == {2, 3} and all(reward == 1.0 for _, reward in episodes)
    tokenizer = build_tokenizer()
    sequences, masks = sft_dataset(episodes, tokenizer, 100_000)
    assert len(sequences) == 12 and all(any(mask) for mask in masks)
    shortest = min(map(len, sequences))
    assert len(sft_dataset(episodes, tokenizer, shortest)[0]) == sum(len(s) <= shortest for s in sequences)
    with pytest.raises(SystemExit, match="raise it"):
        sft_dataset(episodes, tokenizer, shortest - 1)


def test_a_resume_may_add_supervised_epochs_and_nothing_else_that_shapes_the_data():
    from cleanrl_style.llm import sft

    # batches follow from the step number (sft.batch_order): more epochs extend a run exactly
    assert "rctp_epochs" in rc_grpo.Args.resume_may_change and "epochs" in sft.Args.resume_may_change
    for shaping in (
        "rctp_trajectories",
        "rctp_noisy_share",
        "rctp_batch_size",
        "rctp_on_policy",
        "token_init",
        "learning_rate",
    ):
        assert shaping not in rc_grpo.Args.resume_may_change
    assert not {"trajectories", "batch_size", "crash_first"} & sft.Args.resume_may_change
