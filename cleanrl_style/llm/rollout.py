"""Multi-turn episodes of a causal language model in the text environments, as token sequences.

What the LLM agents (GRPO, RC-GRPO, TurnSight) share and is not their algorithm:

- ``collect_rollouts``: many episodes at once, through a ``TextVectorEnv`` of any task family
  (``envs.text.families``: the tool suites and python-math). Every unfinished episode is continued
  by one batched :class:`~cleanrl_style.llm.generation.TurnGenerator` call per turn, which keeps
  each episode's key/value cache across turns; the environments run the tool calls; tool results
  and the next user turn are appended as tokens. Sampled token ids are kept as sampled (never
  re-tokenized), and ``Rollout.policy_mask`` marks exactly them: system, user and tool tokens, and
  the template's glue around turns, are never trained on.
- ``collect_groups``: ``group_size`` episodes of each task, rewards shaped ``(groups, group_size)``.
- ``evaluate_held_out``: greedy episodes on the first test-split tasks (the same ones every time).
- ``tokenize_conversation``: a whole chat as token ids plus a mask of the assistant's tokens
  (supervised fine-tuning data, RCTP).

    rollouts, timing = collect_rollouts(model, tokenizer, family, [7] * 5 + [9] * 5, sampling=Sampling())
    rollouts[0].tokens, rollouts[0].policy_mask, rollouts[0].reward, rollouts[0].turns

The chat template must be prefix-stable: rendering a conversation and then the same conversation
with more messages must extend the first text (true of ChatML templates such as SmolLM2's and
Qwen2.5's). A template that rewrites earlier turns is refused with that reason.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from cleanrl_style.llm.generation import Sampling, TurnGenerator
from cleanrl_style.llm.progress import WorkProgress

Message = dict[str, str]
STOP_TOKEN_NAMES = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>")


@dataclass(frozen=True)
class EpisodeLimits:
    """Where the collector cuts an episode (reward 0) that the environment has not ended: after
    ``max_assistant_messages`` messages, or once its tokens reach ``max_context_tokens`` (checked
    after each message and after each environment reply, so no message is generated from a
    context past the limit, however long a tool's output)."""

    max_assistant_messages: int = 10
    max_context_tokens: int = 4096


@dataclass(frozen=True)
class RolloutSettings:
    """How episodes are generated.

    Attributes:
        sampling: How messages are sampled (``greedy=True`` for evaluation).
        limits: Messages and tokens after which an episode is cut (reward 0).
        keep_cache: Keep each episode's key/value cache across turns (False: re-read each
            conversation every turn, the baseline of ``benchmarks/llm_rollout_throughput.py``).
        precision: ``fp32`` or ``bf16`` forward passes.
        engine: ``auto`` (the packed Llama decoder where it applies) or ``transformers``
            (``TurnGenerator``'s ``engine``).
        suffix_every_turn: Where an episode's suffix (RC-GRPO's reward token) goes: False, the first
            user message only; True, also the message each later assistant message answers
            (``with_turn_suffixes``), so the model reads it just before each of its messages.
        batch_size: Episodes generated at once by ``collect_groups`` (whole groups: a group larger
            than this is generated alone) and ``evaluate_held_out``. Their key/value caches are
            resident together, about 46 KB a token for SmolLM2 in float32, so this bounds
            generation's memory; larger batches read the weights once for more rows.
    """

    sampling: Sampling
    limits: EpisodeLimits = EpisodeLimits()
    keep_cache: bool = True
    precision: str = "fp32"
    engine: str = "auto"
    suffix_every_turn: bool = False
    batch_size: int = 32

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"the generation batch must hold at least 1 episode, got {self.batch_size}")

    def greedy(self, max_new_tokens: int | None = None) -> RolloutSettings:
        """The same settings with greedy decoding (evaluation), optionally another message length."""
        sampling = Sampling(max_new_tokens=max_new_tokens or self.sampling.max_new_tokens, greedy=True)
        return dataclasses.replace(self, sampling=sampling)


def chat_template_text(tokenizer: Any, messages: Sequence[Message], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=generation_prompt)


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` with nothing added (special tokens written in the text are recognized)."""
    return tokenizer(text, add_special_tokens=False)["input_ids"] if text else []


def stop_token_ids(tokenizer: Any) -> list[int]:
    """Ids that end an assistant message: the EOS token and the usual end-of-turn tokens present in the vocabulary."""
    vocab = tokenizer.get_vocab()
    ids = {tokenizer.eos_token_id} | {vocab[name] for name in STOP_TOKEN_NAMES if name in vocab}
    return sorted(i for i in ids if i is not None)


def _extension(before: str, after: str) -> str:
    if not after.startswith(before):
        raise ValueError(
            "the chat template is not prefix-stable (adding a message rewrote earlier text), so a multi-turn "
            "conversation cannot be extended token by token; use a ChatML-style template"
        )
    return after[len(before) :]


def _assistant_closing(piece: str, content: str, stop_text: str) -> str:
    """What the template writes after an assistant message's content, less the stop token the model wrote itself."""
    closing = piece[piece.index(content) + len(content) :] if content and content in piece else piece
    return closing[len(stop_text) :] if stop_text and closing.startswith(stop_text) else closing


def tokenize_conversation(tokenizer: Any, messages: Sequence[Message]) -> tuple[list[int], list[bool]]:
    """Token ids of a whole conversation and a mask of the assistant's tokens.

    The mask covers each assistant message's content and the end-of-turn token that closes it (the
    model must learn to stop), nothing else: the template's role headers and everything said by
    the system, the user and the tools are context only.
    """
    ids: list[int] = []
    mask: list[bool] = []
    rendered = ""
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = chat_template_text(tokenizer, messages[:i], generation_prompt=True)
        context = encode(tokenizer, _extension(rendered, prompt))
        full = chat_template_text(tokenizer, messages[: i + 1], generation_prompt=False)
        piece = _extension(prompt, full)
        content = message["content"]
        at = piece.index(content) + len(content) if content and content in piece else 0
        stops = [tokenizer.decode([t]) for t in stop_token_ids(tokenizer)]
        stop = next((s for s in stops if piece[at:].startswith(s)), "")
        answer = encode(tokenizer, piece[: at + len(stop)])
        glue = encode(tokenizer, piece[at + len(stop) :])
        ids += context + answer + glue
        mask += [False] * len(context) + [True] * len(answer) + [False] * len(glue)
        rendered = full
    tail = encode(tokenizer, _extension(rendered, chat_template_text(tokenizer, messages, generation_prompt=False)))
    return ids + tail, mask + [False] * len(tail)


@dataclass
class Turn:
    """One assistant message of a rollout and what came back (TurnSight's unit of credit).

    ``start:end`` is the span of the generated tokens in ``Rollout.tokens``; ``context_messages``
    is the conversation the model saw (the first user message carries any reward-goal token).
    """

    start: int
    end: int
    content: str
    tool_outputs: list[str]
    user_turn: int
    context_messages: list[Message]


@dataclass
class Rollout:
    """One episode as tokens: ``tokens`` (the whole conversation), ``policy_mask`` (True where the
    policy sampled the token), ``sampling_logprobs`` (each sampled token's log-probability when it
    was drawn, 0 elsewhere and for scripted generators), the episode reward and statistics."""

    group: int
    task_id: int
    first_user_suffix: str
    tokens: list[int] = field(default_factory=list)
    policy_mask: list[bool] = field(default_factory=list)
    sampling_logprobs: list[float] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    reward: float = 0.0
    done: bool = False
    cut: bool = False
    """ended by the collector's limits (assistant messages, context length), not by the environment"""
    truncated: bool = False
    user_turns_finished: int = 0
    tool_errors: int = 0

    def extend(self, ids: list[int], policy: bool, logprobs: Sequence[float] | None = None) -> None:
        self.tokens += ids
        self.policy_mask += [policy] * len(ids)
        self.sampling_logprobs += list(logprobs) if logprobs is not None else [0.0] * len(ids)


def with_first_user_suffix(messages: list[Message], suffix: str) -> list[Message]:
    """The conversation with ``suffix`` appended to the first user message (where RC-GRPO puts its reward token)."""
    if not suffix:
        return list(messages)
    out = [dict(m) for m in messages]
    first = next(i for i, m in enumerate(out) if m["role"] == "user")
    out[first]["content"] = out[first]["content"] + suffix
    return out


def with_turn_suffixes(messages: list[Message], suffix: str) -> list[Message]:
    """The conversation with ``suffix`` appended to every message that an assistant message directly
    follows (the first user message, tool outputs, later user messages): what the model read just
    before each of its messages under ``RolloutSettings.suffix_every_turn``."""
    out = [dict(m) for m in messages]
    if suffix:
        for before, after in zip(out, out[1:]):
            if before["role"] != "assistant" and after["role"] == "assistant":
                before["content"] = before["content"] + suffix
    return out


def collect_rollouts(
    model: Any,
    tokenizer: Any,
    family: Any,
    task_ids: Sequence[int],
    settings: RolloutSettings,
    *,
    groups: Sequence[int] | None = None,
    first_user_suffixes: Sequence[str] | None = None,
    seed: int = 0,
    progress: WorkProgress | None = None,
    stage_name: str = "rollout",
    generator: Any = None,
) -> tuple[list[Rollout], dict[str, float]]:
    """Run one episode per entry of ``task_ids`` (repeat an id G times for a GRPO group), all at once.

    Args:
        family: The ``envs.text.families.TaskFamily`` the ids belong to.
        settings: Sampling, length limits, cache and precision.
        groups: Group index of each episode (default: episodes with the same task id form a group).
        first_user_suffixes: Text appended to each episode's first user message (RC-GRPO's reward
            token) and, with ``settings.suffix_every_turn``, to the message before each later turn.
        seed: Seeds the environments' resets (episode i: ``seed + i``) and the sampling.
        progress: Reports the turns as they go, as a stage called ``stage_name``.
        generator: Something with ``TurnGenerator.generate``'s signature (default: a
            ``TurnGenerator`` of ``model``); tests put a scripted model here.

    Returns:
        The rollouts, and timing: ``generated_tokens``, ``generation_seconds``, ``tokens_per_second``,
        ``prefilled_tokens`` (tokens fed to the model outside decoding).
    """
    n = len(task_ids)
    if groups is None:
        order = {t: g for g, t in enumerate(dict.fromkeys(task_ids))}
        groups = [order[t] for t in task_ids]
    suffixes = list(first_user_suffixes) if first_user_suffixes is not None else [""] * n
    stops = stop_token_ids(tokenizer)
    if generator is None:
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
        generator = TurnGenerator(
            model,
            stops,
            pad_id,
            settings.sampling,
            keep_cache=settings.keep_cache,
            precision=settings.precision,
            seed=seed,
            engine=settings.engine,
        )
    limits = settings.limits
    vec = family.vector_env(n)
    observations, infos = vec.reset(seed=seed, options=[family.reset_options(t) for t in task_ids])
    rollouts = [Rollout(group=groups[i], task_id=int(task_ids[i]), first_user_suffix=suffixes[i]) for i in range(n)]
    conversations = [with_first_user_suffix(observations[i], suffixes[i]) for i in range(n)]
    rendered = [chat_template_text(tokenizer, c, generation_prompt=True) for c in conversations]
    for r, text in zip(rollouts, rendered):
        r.extend(encode(tokenizer, text), policy=False)
    stop_texts = {t: tokenizer.decode([t]) for t in stops}
    generated_tokens, generation_seconds = 0, 0.0
    stage = (progress or WorkProgress(enabled=False)).stage(stage_name, total=limits.max_assistant_messages, unit="turn")
    try:
        for turn_index in range(limits.max_assistant_messages):
            active = [i for i in range(n) if not rollouts[i].done]
            if not active:
                break
            started, running = time.perf_counter(), len(active)

            def report(
                tokens_now: int,
                running=running,
                turn=turn_index,
                tokens_before=generated_tokens,
                seconds_before=generation_seconds,
                started=started,
            ) -> None:
                seconds = seconds_before + time.perf_counter() - started
                stage.update(
                    turn,
                    episodes_running=f"{running}/{n}",
                    tokens=tokens_before + tokens_now,
                    tokens_per_s=(tokens_before + tokens_now) / max(seconds, 1e-9),
                )

            outputs = generator.generate(active, [rollouts[i].tokens for i in active], on_step=report)
            sampled_logprobs = getattr(generator, "sampled_logprobs", None) or [None] * len(active)
            generation_seconds += time.perf_counter() - started
            actions: list[str | None] = [None] * n
            closing_of: dict[int, tuple[str, str]] = {}
            for i, new, logprobs in zip(active, outputs, sampled_logprobs):
                generated_tokens += len(new)
                r = rollouts[i]
                stop_text = stop_texts.get(new[-1], "") if new else ""
                content = tokenizer.decode(new[:-1] if stop_text else new, skip_special_tokens=True)
                r.turns.append(
                    Turn(
                        start=len(r.tokens),
                        end=len(r.tokens) + len(new),
                        content=content,
                        tool_outputs=[],
                        user_turn=int(infos[i].get("turn_index", 0)),
                        context_messages=list(conversations[i]),
                    )
                )
                r.extend(new, policy=True, logprobs=logprobs)
                actions[i] = content
                closing_of[i] = (content, stop_text)
            observations, rewards, terminated, truncated, step_infos = vec.step(actions)
            cut = []
            for i in active:
                r, (content, stop_text) = rollouts[i], closing_of[i]
                conversation = conversations[i] + [{"role": "assistant", "content": content}]
                after_answer = chat_template_text(tokenizer, conversation, generation_prompt=False)
                closing = _assistant_closing(_extension(rendered[i], after_answer), content, stop_text)
                r.extend(encode(tokenizer, closing), policy=False)
                new_messages = observations[i][len(conversation) :]
                r.turns[-1].tool_outputs = [m["content"] for m in new_messages if m["role"] == "tool"]
                conversations[i] = conversation + new_messages
                infos[i] = step_infos[i]
                r.reward, r.truncated = float(rewards[i]), bool(truncated[i])
                r.user_turns_finished = len(infos[i].get("turn_results", ()))
                r.tool_errors = int(infos[i].get("num_errors", 0))
                r.messages = conversations[i]
                if terminated[i] or truncated[i]:
                    r.done = True
                elif len(r.turns) >= limits.max_assistant_messages or len(r.tokens) >= limits.max_context_tokens:
                    r.done = r.cut = True
                    cut.append(i)
                else:
                    last = conversations[i][-1]
                    if settings.suffix_every_turn and suffixes[i] and last["role"] != "assistant":
                        conversations[i][-1] = {**last, "content": last["content"] + suffixes[i]}
                    rendered[i] = chat_template_text(tokenizer, conversations[i], generation_prompt=True)
                    r.extend(encode(tokenizer, _extension(after_answer, rendered[i])), policy=False)
                    if len(r.tokens) >= limits.max_context_tokens:  # the reply filled the context: no message past it
                        r.done = r.cut = True
                        cut.append(i)
            vec.end_episodes(cut)
    finally:
        stage.close()
        vec.close()
    timing = {
        "generated_tokens": float(generated_tokens),
        "generation_seconds": generation_seconds,
        "tokens_per_second": generated_tokens / max(generation_seconds, 1e-9),
        "prefilled_tokens": float(getattr(generator, "prefilled_tokens", 0)),
    }
    return rollouts, timing


def group_batches(groups: Sequence[int], batch_size: int) -> list[tuple[int, int]]:
    """``(start, end)`` slices of consecutive episodes, each at most ``batch_size`` long and never
    splitting a run of equal ``groups`` entries (a group longer than ``batch_size`` is a slice alone)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    slices: list[tuple[int, int]] = []
    start, i, n = 0, 0, len(groups)
    while i < n:
        end = i + 1
        while end < n and groups[end] == groups[i]:
            end += 1
        if end - start > batch_size and i > start:  # this group would overfill the slice: close it before the group
            slices.append((start, i))
            start = i
        i = end
    if start < n:
        slices.append((start, n))
    return slices


def collect_in_batches(
    model: Any,
    tokenizer: Any,
    family: Any,
    task_ids: Sequence[int],
    settings: RolloutSettings,
    *,
    batch_size: int,
    groups: Sequence[int] | None = None,
    seed: int = 0,
    first_user_suffix: str = "",
    first_user_suffixes: Sequence[str] | None = None,
    progress: WorkProgress | None = None,
    stage_name: str = "rollout",
) -> tuple[list[Rollout], dict[str, float]]:
    """``collect_rollouts`` over ``task_ids``, ``batch_size`` episodes at once: the key/value caches
    and activations of one batch bound the memory, whatever the number of episodes. With ``groups``
    (one index per episode, a group's episodes adjacent), batches hold whole groups
    (``group_batches``). Episode i resets with seed ``seed + i`` whatever the batches; its sampling
    is seeded per batch (``seed + first``, so one batch samples as ``collect_rollouts`` with
    ``seed``). Timing: the batches' tokens and seconds summed."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    n = len(task_ids)
    if groups is None:
        slices = [(first, min(first + batch_size, n)) for first in range(0, n, batch_size)]
    else:
        slices = group_batches(groups, batch_size)
    suffixes = list(first_user_suffixes) if first_user_suffixes is not None else [first_user_suffix] * n
    rollouts: list[Rollout] = []
    tokens, seconds, prefilled = 0.0, 0.0, 0.0
    for first, end in slices:
        batch, timing = collect_rollouts(
            model,
            tokenizer,
            family,
            list(task_ids[first:end]),
            settings,
            groups=None if groups is None else list(groups[first:end]),
            first_user_suffixes=suffixes[first:end],
            seed=seed + first,
            progress=progress,
            stage_name=stage_name,
        )
        rollouts += batch
        tokens, seconds = tokens + timing["generated_tokens"], seconds + timing["generation_seconds"]
        prefilled += timing["prefilled_tokens"]
    timing = {
        "generated_tokens": tokens,
        "generation_seconds": seconds,
        "tokens_per_second": tokens / max(seconds, 1e-9),
        "prefilled_tokens": prefilled,
    }
    return rollouts, timing


def collect_groups(
    model: Any,
    tokenizer: Any,
    family: Any,
    group_task_ids: Sequence[int],
    group_size: int,
    settings: RolloutSettings,
    *,
    seed: int,
    first_user_suffixes: Sequence[str] | None = None,
    progress: WorkProgress | None = None,
) -> tuple[list[Rollout], dict[str, float], torch.Tensor]:
    """``group_size`` episodes of each task in ``group_task_ids``, generated ``settings.batch_size``
    at a time in whole groups (all together when they fit: then bit for bit as ``collect_rollouts``).

    Returns ``(rollouts, timing, rewards)``, rollouts group after group and ``rewards`` shaped
    ``(groups, group_size)``.
    """
    rollouts, timing = collect_in_batches(
        model,
        tokenizer,
        family,
        [t for t in group_task_ids for _ in range(group_size)],
        settings,
        batch_size=settings.batch_size,
        groups=[g for g in range(len(group_task_ids)) for _ in range(group_size)],
        first_user_suffixes=first_user_suffixes,
        seed=seed,
        progress=progress,
    )
    rewards = torch.tensor([r.reward for r in rollouts]).view(len(group_task_ids), group_size)
    return rollouts, timing, rewards


def rollout_stats(rollouts: Sequence[Rollout]) -> dict[str, float]:
    """Success rate, assistant messages ("turns"), tool errors and cut episodes, per episode."""
    n = max(len(rollouts), 1)
    return {
        "success_rate": sum(r.reward for r in rollouts) / n,
        "turns_per_episode": sum(len(r.turns) for r in rollouts) / n,
        "tool_errors_per_episode": sum(r.tool_errors for r in rollouts) / n,
        "user_turns_per_episode": sum(r.user_turns_finished for r in rollouts) / n,
        "cut_fraction": sum(r.cut for r in rollouts) / n,
    }


HELD_OUT_COLUMNS = ("step", "suffix", "task_id", "reward", "turns", "cut")


def held_out_outcome(step: int, suffix: str, rollout: Rollout) -> dict[str, Any]:
    """A held-out episode's outcome, keyed by ``HELD_OUT_COLUMNS``."""
    r = rollout
    return {
        "step": step,
        "suffix": suffix.strip(),
        "task_id": r.task_id,
        "reward": r.reward,
        "turns": len(r.turns),
        "cut": int(r.cut),
    }


def append_held_out_outcomes(path: Path, step: int, suffix: str, rollouts: Sequence[Rollout]) -> None:
    """One row per held-out episode (``HELD_OUT_COLUMNS``), appended to a CSV: the per-task outcomes
    that paired comparisons between runs on the same tasks need."""
    new = not path.exists()
    with open(path, "a", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, HELD_OUT_COLUMNS)
        if new:
            writer.writeheader()
        for r in rollouts:
            writer.writerow(held_out_outcome(step, suffix, r))


def held_out_episodes_path(record: Path) -> Path:
    """Where the held-out episodes' messages go beside a per-task outcome CSV:
    ``held_out.csv`` -> ``held_out_episodes.jsonl``."""
    return record.with_name(record.stem + "_episodes.jsonl")


def append_held_out_episodes(path: Path, step: int, suffix: str, rollouts: Sequence[Rollout]) -> None:
    """One JSON line per held-out episode: its outcome (``held_out_outcome``) plus its messages as
    the environment and the model wrote them (read them with ``python -m cleanrl_style.llm.episodes``)."""
    with open(path, "a", encoding="utf-8") as f:
        for r in rollouts:
            row = held_out_outcome(step, suffix, r) | {"messages": r.messages}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def evaluate_held_out(
    model: Any,
    tokenizer: Any,
    family: Any,
    num_episodes: int,
    settings: RolloutSettings,
    *,
    first_user_suffix: str = "",
    progress: WorkProgress | None = None,
    batch_size: int | None = None,
    record: Path | None = None,
    step: int = 0,
) -> dict[str, float]:
    """Greedy episodes on the first ``num_episodes`` test-split tasks of ``family`` (the same ones
    every time), ``batch_size`` at once (default ``settings.batch_size``), as the metrics the agents
    log: ``charts/test_success_rate``, ``eval/*`` and its wall and CPU seconds (``time/eval_seconds``,
    ``time/eval_cpu_seconds``). With
    ``record``, each episode's outcome is appended there at ``step`` (``append_held_out_outcomes``)
    and its messages beside it (``held_out_episodes_path``, ``append_held_out_episodes``).

    Raises:
        ValueError: the family's test split has fewer tasks than asked for.
    """
    if num_episodes > len(family.test_ids):
        raise ValueError(
            f"--eval-episodes {num_episodes} but {family.name!r} has {len(family.test_ids)} test tasks; "
            "lower --eval-episodes or raise --num-tasks"
        )
    started, cpu_started = time.perf_counter(), time.process_time()
    rollouts, timing = collect_in_batches(
        model,
        tokenizer,
        family,
        family.test_ids[:num_episodes],
        settings if settings.sampling.greedy else settings.greedy(),
        batch_size=batch_size or settings.batch_size,
        first_user_suffix=first_user_suffix,
        progress=progress,
        stage_name="held-out evaluation",
    )
    stats = rollout_stats(rollouts)
    if record is not None:
        append_held_out_outcomes(record, step, first_user_suffix, rollouts)
        append_held_out_episodes(held_out_episodes_path(record), step, first_user_suffix, rollouts)
    return {
        "charts/test_success_rate": stats["success_rate"],
        "eval/turns_per_episode": stats["turns_per_episode"],
        "eval/tool_errors_per_episode": stats["tool_errors_per_episode"],
        "eval/cut_fraction": stats["cut_fraction"],
        "eval/tokens_per_second": timing["tokens_per_second"],
        "time/eval_seconds": time.perf_counter() - started,
        "time/eval_cpu_seconds": time.process_time() - cpu_started,
    }
