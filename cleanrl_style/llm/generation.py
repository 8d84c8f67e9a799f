"""Batched multi-turn sampling that keeps each episode's key/value cache from one turn to the next.

An episode's tokens only ever grow: the prompt; then, turn after turn, the sampled message, the
chat template's closing, the environment's reply and the next generation prompt.
:class:`TurnGenerator` keeps the keys and values of every token it has fed, so each turn prefills
only the tokens that are new since the last one.

    generator = TurnGenerator(model, stop_ids, pad_id, Sampling(max_new_tokens=64), seed=7)
    new = generator.generate([0, 1, 2], [tokens_0, tokens_1, tokens_2])   # one message per episode
    ... append new[i] and the environment's reply to tokens_i ...
    new = generator.generate([0, 2], [tokens_0, tokens_2])                 # episode 1 has finished

**Layout.** The batch is one cache with a row per episode. A turn's new tokens are right-padded
to one width and appended as new columns; a 2-D attention mask marks the real tokens, so a row
has masked holes (its padding, and the decoding steps it waited while other rows still
generated). Position ids count a row's real tokens only, so every token sits at the position it
would have in one uncached pass over the row, and greedy decoding gives the same tokens as
re-reading every conversation from scratch (a test checks this). Right padding leaves every
padded query with real keys before it, so no softmax row is fully masked. Rows whose
episodes have finished are dropped from the cache; a first chunk that every row starts with (the
system prompt and tool schemas; a whole group's first prompt) is prefilled once. Where a few rows'
new tokens run far past the others' (a long tool output), every row is fed up to a cut and the
longer rows' tails are fed on their own, so one long output costs its own tokens, not that many
for every row; the packed decoder also keeps those tails' keys and values for their rows alone (a
side block), so the cache of every other row does not widen by them.

**Engine.** For a float32 Llama on the CPU (SmolLM2 and other Llama checkpoints) the forward
passes run through :class:`~cleanrl_style.llm.decoder.PackedLlama`: the same arithmetic with its
own key/value buffer, weights packed for the batch, and the shared first chunk kept once and read
once per step by every row instead of copied into each; at ``bf16`` its weight products run in
bfloat16 (half the bytes a decoding step reads) and the rest in float32. Every other model (and
``engine="transformers"``) runs the model's own forward with a transformers cache (under
autocast at ``bf16``).

**Sampling.** The logits of each row's last token are divided by the temperature, filtered by
top-k and top-p, and sampled with a seeded ``torch.Generator`` (greedy: argmax). Nothing else is
applied: the model's ``generation_config`` (repetition penalty, no-repeat n-grams, its own
temperature or top-k) is never read, so with ``top_p=1`` and ``top_k=0`` rollouts are drawn from
exactly ``softmax(logits / temperature)``, the distribution the policy loss scores. Each sampled
token's log-probability under that distribution is kept (``TurnGenerator.sampled_logprobs``): at
fp32 it equals what the loss computes from the whole sequence (a test checks this to 1e-4 nats);
at bf16 it differs, and the loss takes it as the sampling policy's log-probability in its ratio
(``train.generation_logprobs``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch

from cleanrl_style.llm.decoder import MIN_SHARED_PREFIX, PackedLlama, packed_llama_for
from cleanrl_style.llm.model import autocast, unwrap

ENGINES = ("auto", "transformers")
TAIL_BLOCK = 512  # columns per forward of the rows whose new chunk runs past the others' (bounds its attention)
# Tokens (rows x columns) per prefill forward: a longer chunk is fed in blocks of columns. A forward's
# attention holds a score for every row, head, new column and cached column (about 1 GB in float32
# for SmolLM2's 9 heads, 32 rows, 512 new and 1,800 cached columns); a turn feeding 500 tokens to
# each of 32 rows peaked 0.57 GB lower in blocks (benchmarks/prefill_blocks.py).
PREFILL_TOKENS = 2048


@dataclass(frozen=True)
class Sampling:
    """How one assistant message is sampled.

    Attributes:
        max_new_tokens: Tokens per message; a message ends at its first stop token (kept) or here.
        temperature: Logits are divided by it (the loss scores the same tempered distribution).
        top_p: Nucleus sampling; 1.0 keeps the whole distribution (and the loss exact).
        top_k: Keep the k most likely tokens; 0 keeps all.
        greedy: Argmax instead of sampling (evaluation).
    """

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    greedy: bool = False

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not self.greedy and not self.temperature > 0:
            raise ValueError(f"temperature must be > 0 for sampling, got {self.temperature} (use greedy decoding instead)")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0: no top-k), got {self.top_k}")


def sample_next(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of ``logits`` (rows, vocab): argmax, or a draw from the tempered, top-k and
    top-p filtered softmax."""
    if sampling.greedy:
        return logits.argmax(dim=-1)
    logits = logits.float() / sampling.temperature
    if 0 < sampling.top_k < logits.shape[-1]:
        kth = logits.topk(sampling.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(dim=-1)
        drop = sorted_probs.cumsum(dim=-1) - sorted_probs >= sampling.top_p  # the tokens before already cover top_p
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))
    # One uniform per row through the inverse CDF: an exact draw, and on a CPU cheaper than
    # torch.multinomial, which draws an exponential for every token of the vocabulary (8 rows of
    # SmolLM2's 49,152 tokens, one thread: 9.2 ms for multinomial alone, 3.7 ms for this whole function).
    cdf = logits.softmax(dim=-1).double().cumsum(dim=-1).cpu()
    u = torch.rand(cdf.shape[0], 1, generator=generator, dtype=torch.float64) * cdf[:, -1:]
    chosen = torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=cdf.shape[-1] - 1)
    return chosen.to(logits.device)


def shared_prefix_length(rows: Sequence[Sequence[int]]) -> int:
    """Length of the prefix every row starts with, leaving at least one token of each row after it."""
    limit = min(len(r) for r in rows) - 1
    first = rows[0]
    length = 0
    while length < limit and all(r[length] == first[length] for r in rows):
        length += 1
    return length


@functools.cache
def _growing_layer_class() -> type | None:
    """A transformers ``DynamicLayer`` that appends in place: keys and values live in a buffer with
    spare room (grown by half when full), and the layer exposes a view of the filled part.

    transformers' own layer concatenates a new tensor at every token, copying the whole cache each
    decoding step: at 32 rows of 1,200 tokens that copy tripled the time of a SmolLM2 decoding step
    on a CPU (2.2 s against 0.56 s of CPU time per step, one thread). None where the installed
    transformers has no ``DynamicLayer`` (4.x): its plain cache is used then."""
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:
        return None

    class GrowingLayer(DynamicLayer):
        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            # Set by lazy_initialization (transformers declares them Optional).
            keys, values = cast(torch.Tensor, self.keys), cast(torch.Tensor, self.values)
            filled = keys.shape[-2] if keys.dim() == 4 else 0
            needed = filled + key_states.shape[-2]
            buffer = getattr(self, "_buffer", None)
            if (  # no room, or the batch was reshaped (rows dropped or repeated): a new buffer
                buffer is None
                or buffer[0].shape[2] < needed
                or buffer[0].shape[:2] != key_states.shape[:2]
                or (filled and keys.data_ptr() != buffer[0].data_ptr())
            ):
                shape = (*key_states.shape[:2], needed + max(256, needed // 2), key_states.shape[-1])
                buffer = (key_states.new_empty(shape), value_states.new_empty(shape))
                if filled:
                    buffer[0][:, :, :filled] = keys
                    buffer[1][:, :, :filled] = values
                self._buffer = buffer
            buffer[0][:, :, filled:needed] = key_states
            buffer[1][:, :, filled:needed] = value_states
            self.keys, self.values = buffer[0][:, :, :needed], buffer[1][:, :, :needed]
            return self.keys, self.values

    return GrowingLayer


def new_cache() -> Any:
    """An empty key/value cache for the installed transformers (growing in place where it can)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    layer_class = _growing_layer_class()
    if layer_class is not None and getattr(cache, "layer_class_to_replicate", None) is not None and not cache.layers:
        cache.layer_class_to_replicate = layer_class
    return cache


def _cache_keyword(decoder: Any) -> str:
    """The name the installed transformers gives the cache argument of a decoder's forward:
    ``cache`` in transformers 5 (which deprecates the old name), ``past_key_values`` in 4.x."""
    parameters = inspect.signature(decoder.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


class TurnGenerator:
    """Generates one assistant message per episode per call, keeping every episode's cache between calls.

    Args:
        model: A causal LM (transformers, or a ``peft`` wrapper around one).
        stop_ids: Token ids that end a message (kept as its last token).
        pad_id: Any valid token id; padded positions are masked out.
        sampling: How tokens are drawn.
        keep_cache: False re-reads every conversation from its start at each call (with the shared
            first chunk still prefilled once): the baseline the cache is measured against.
        precision: ``fp32``, or ``bf16``: bfloat16 weight products (the packed decoder's, or
            autocast in the transformers forward).
        seed: Seed of the sampling generator.
        engine: ``auto`` runs the forward passes of a float32 Llama on the CPU through
            :class:`~cleanrl_style.llm.decoder.PackedLlama` (at ``fp32`` the same arithmetic,
            weights packed once per fresh cache; at ``bf16`` its products in bfloat16) and every
            other model through transformers; ``transformers`` always through transformers.
    """

    def __init__(
        self,
        model: Any,
        stop_ids: Sequence[int],
        pad_id: int,
        sampling: Sampling,
        *,
        keep_cache: bool = True,
        precision: str = "fp32",
        seed: int = 0,
        engine: str = "auto",
    ) -> None:
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        base = unwrap(model)
        self.model = model
        self.engine = engine
        self.packed: PackedLlama | None = None
        self.decoder = base.get_decoder()
        self.head = base.get_output_embeddings()
        self.device = next(base.parameters()).device
        self.cache_keyword = _cache_keyword(self.decoder)
        self.stop_ids = torch.tensor(sorted(set(stop_ids)), device=self.device)
        self.pad_id = pad_id
        self.sampling = sampling
        self.keep_cache = keep_cache
        self.precision = precision
        self.generator = torch.Generator().manual_seed(seed)
        self.rows: list[int] = []  # episode id of each cache row
        self.seen: dict[int, int] = {}  # episode id -> how many of its tokens are in the cache
        self.cache: Any = None
        self.mask = torch.zeros((0, 0), dtype=torch.long, device=self.device)  # (rows, columns): 1 = real token
        self.real = torch.zeros(0, dtype=torch.long, device=self.device)  # real tokens per row (the next position)
        self.prefilled_tokens = 0  # real tokens fed in prefill chunks (what the cache saves shows here)
        self.computed_tokens = 0  # row-columns of the prefill forwards, padding included
        self.sampled_logprobs: list[list[float]] = []  # per episode of the last call: log softmax(logits / T) of each token

    # ---- the cache ---------------------------------------------------------------------------------

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if self.packed is not None:
            return self.packed.forward(ids, positions, self.mask)
        with torch.no_grad(), autocast(self.precision, self.device):
            out = self.decoder(
                input_ids=ids,
                attention_mask=self.mask,
                position_ids=positions,
                use_cache=True,
                **{self.cache_keyword: self.cache},
            )
        return out.last_hidden_state

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.packed is not None:
            return self.packed.logits(hidden)
        with torch.no_grad(), autocast(self.precision, self.device):
            return self.head(hidden).float()

    def _append(self, chunks: Sequence[Sequence[int]]) -> torch.Tensor:
        """Feed each row's new tokens; logits at each row's last one.

        Chunks of similar length are right-padded into one forward. Where a few rows bring far more
        tokens than the rest (a long tool output), padding every row to the longest would compute
        rows x longest tokens, and the attention of that one forward grows with it (the gain is
        measured by ``benchmarks/uneven_prefill.py``, in benchmarks/README.md). So all rows are
        fed up to a cut, chosen to minimise the tokens computed, and the tails past it are fed for
        their rows only (see :meth:`_append_rows`), in blocks of at most ``TAIL_BLOCK`` columns; the
        other rows get masked columns, computed by no forward (and, in the packed decoder, held
        in no memory)."""
        lengths = [len(c) for c in chunks]
        width, rows = max(lengths), len(chunks)
        cost, cut = min((rows * c + sum(n > c for n in lengths) * (width - c), c) for c in set(lengths))
        if rows == 1 or cost > 0.75 * rows * width or not self._can_feed_rows():  # one padded forward is cheaper
            return self._append_all(chunks)
        logits = self._append_all([c[:cut] for c in chunks])
        tails = [b for b, n in enumerate(lengths) if n > cut]
        block = min(TAIL_BLOCK, max(1, PREFILL_TOKENS // len(tails)))
        for start in range(cut, width, block):
            fed = [b for b in tails if lengths[b] > start]
            logits[fed] = self._append_rows(fed, [chunks[b][start : start + block] for b in fed])
        return logits

    def _append_all(self, chunks: Sequence[Sequence[int]]) -> torch.Tensor:
        """Feed each row's new tokens right-padded, in forwards of at most ``PREFILL_TOKENS`` tokens
        (blocks of columns across all rows; a row whose chunk has ended gets masked columns);
        logits at each row's last one."""
        width = max(len(c) for c in chunks)
        block = max(1, PREFILL_TOKENS // len(chunks))
        last_hidden: torch.Tensor | None = None
        for start in range(0, width, block):
            part = [c[start : start + block] for c in chunks]
            ids, mask, last = self._chunk(part)
            positions = self.real.unsqueeze(1) + torch.arange(ids.shape[1], device=self.device)
            self.mask = torch.cat([self.mask, mask], dim=1)
            hidden = self._forward(ids, positions)[torch.arange(len(chunks), device=self.device), last]
            self.real = self.real + mask.sum(dim=1)
            self.prefilled_tokens += int(mask.sum())
            self.computed_tokens += ids.numel()
            ending = [b for b, c in enumerate(chunks) if start < len(c) <= start + block]
            if last_hidden is None:
                last_hidden = hidden
            else:
                last_hidden[ending] = hidden[ending]
        assert last_hidden is not None
        return self._logits(last_hidden)

    def _chunk(self, chunks: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Ids and mask (rows, longest chunk) of right-padded chunks, and each chunk's last column."""
        width = max(len(c) for c in chunks)
        ids = torch.full((len(chunks), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunks), width), dtype=torch.long)
        for b, chunk in enumerate(chunks):
            ids[b, : len(chunk)] = torch.tensor(chunk, dtype=torch.long)
            mask[b, : len(chunk)] = 1
        last = torch.tensor([len(c) - 1 for c in chunks], device=self.device)
        return ids.to(self.device), mask.to(self.device), last

    def _can_feed_rows(self) -> bool:
        """Whether the cache can take a forward of some rows only (transformers 4.x's cache cannot)."""
        return self.packed is not None or hasattr(self.cache, "layers")

    def _append_rows(self, fed: Sequence[int], chunks: Sequence[Sequence[int]]) -> torch.Tensor:
        """Feed the chunks of rows ``fed`` only; every other row gets the same columns masked. The
        forward runs on a copy of those rows' cache, whose new columns are then added to the whole
        cache: in the packed decoder as a side block of those rows alone (``KVBuffer.append_rows``),
        in a transformers cache as columns of every row, zero in the others. Logits at each fed
        row's last token."""
        ids, mask, last = self._chunk(chunks)
        index = torch.tensor(list(fed), device=self.device)
        rows, width = len(self.rows), ids.shape[1]
        whole_mask = torch.zeros((rows, width), dtype=torch.long, device=self.device)
        whole_mask[index] = mask
        whole_cache, whole_packed_cache, all_mask = self.cache, None, self.mask
        self.mask = torch.cat([self.mask[index], mask], dim=1)
        if self.packed is not None:
            whole_packed_cache = self.packed.cache
            self.packed.cache = whole_packed_cache.rows(index)
        else:
            self.cache = new_cache()
            for layer, cached in enumerate(whole_cache.layers):
                self.cache.update(cached.keys[index], cached.values[index], layer)
        try:
            hidden = self._forward(ids, self.real[index].unsqueeze(1) + torch.arange(width, device=self.device))
            if self.packed is not None:
                assert whole_packed_cache is not None
                whole_packed_cache.append_rows(self.packed.cache, index, width)
            else:
                for layer, part in enumerate(self.cache.layers):
                    _, heads, _, dim = part.keys.shape
                    keys, values = (
                        part.keys.new_zeros((rows, heads, width, dim)),
                        part.values.new_zeros((rows, heads, width, dim)),
                    )
                    keys[index], values[index] = part.keys[:, :, -width:], part.values[:, :, -width:]
                    whole_cache.update(keys, values, layer)
        finally:
            self.cache = whole_cache
            if whole_packed_cache is not None:
                assert self.packed is not None
                self.packed.cache = whole_packed_cache
        self.mask = torch.cat([all_mask, whole_mask], dim=1)
        self.real = self.real + whole_mask.sum(dim=1)
        self.prefilled_tokens += int(mask.sum())
        self.computed_tokens += ids.numel()
        return self._logits(hidden[torch.arange(len(fed), device=self.device), last])

    def _step(self, tokens: torch.Tensor, running: torch.Tensor) -> torch.Tensor:
        """Feed one token per row (masked out for rows that have stopped); logits of the next."""
        mask = running.long().unsqueeze(1)
        self.mask = torch.cat([self.mask, mask], dim=1)
        hidden = self._forward(tokens.unsqueeze(1), self.real.unsqueeze(1))
        self.real = self.real + mask.squeeze(1)
        return self._logits(hidden[:, -1])

    def _start(self, episodes: Sequence[int], tokens: Sequence[Sequence[int]]) -> torch.Tensor:
        """A fresh cache for ``episodes``: the shared first chunk once, then each row's rest."""
        self.rows = list(episodes)
        self.cache = new_cache()
        self.packed = None
        if self.engine == "auto":
            self.packed = packed_llama_for(self.model, len(tokens), products=self.precision)
        shared = shared_prefix_length(tokens) if len(tokens) > 1 else 0
        if shared >= MIN_SHARED_PREFIX:
            self.mask = torch.ones((1, shared), dtype=torch.long, device=self.device)
            self.real = torch.zeros(1, dtype=torch.long, device=self.device)
            prefix = torch.tensor([list(tokens[0][:shared])], dtype=torch.long, device=self.device)
            self._forward(prefix, torch.arange(shared, device=self.device).unsqueeze(0))
            self.prefilled_tokens += shared
            self.computed_tokens += shared
            if self.packed is not None:
                self.packed.share_prefix()
            else:
                self.cache.batch_select_indices(torch.zeros(len(tokens), dtype=torch.long, device=self.device))
            self.mask = self.mask.expand(len(tokens), -1).clone()
            self.real = torch.full((len(tokens),), shared, dtype=torch.long, device=self.device)
        else:
            shared = 0
            self.mask = torch.zeros((len(tokens), 0), dtype=torch.long, device=self.device)
            self.real = torch.zeros(len(tokens), dtype=torch.long, device=self.device)
        return self._append([t[shared:] for t in tokens])

    def _reorder(self, index: torch.Tensor) -> None:
        """The cache's rows become ``index`` (kept, dropped or repeated)."""
        if self.packed is not None:
            self.packed.cache.select(index)
        else:
            self.cache.batch_select_indices(index)

    def _retain(self, episodes: Sequence[int]) -> None:
        """Keep only the rows of ``episodes`` (in the cache's order)."""
        if list(episodes) == self.rows:
            return
        index = torch.tensor([self.rows.index(e) for e in episodes], device=self.device)
        self._reorder(index)
        self.mask, self.real = self.mask[index], self.real[index]
        self.rows = list(episodes)

    # ---- one message per episode ----------------------------------------------------------------------

    def generate(
        self,
        episodes: Sequence[int],
        tokens: Sequence[Sequence[int]],
        on_step: Callable[[int], None] | None = None,
    ) -> list[list[int]]:
        """Continue each episode's tokens with one message; each ends at its first stop token (kept)
        or after ``max_new_tokens``.

        Args:
            episodes: Ids of the episodes to continue, in a fixed order (a subset of the previous
                call's, in the same order, for the cache to be reused).
            tokens: Each episode's whole token list so far; it must extend what the last call saw
                plus the message it returned.
            on_step: Called after each decoding step with the number of tokens generated so far.
        """
        reuse = self.keep_cache and self.cache is not None and all(e in self.seen for e in episodes)
        if reuse and [e for e in self.rows if e in set(episodes)] == list(episodes):
            self._retain(episodes)
            logits = self._append([t[self.seen[e] :] for e, t in zip(episodes, tokens)])
        else:
            logits = self._start(episodes, tokens)
        out: list[list[int]] = [[] for _ in episodes]
        logprobs: list[list[float]] = [[] for _ in episodes]
        running = torch.ones(len(episodes), dtype=torch.bool, device=self.device)
        generated = 0
        for step in range(self.sampling.max_new_tokens):
            chosen = sample_next(logits, self.sampling, self.generator)
            chosen_logp = (logits.float() / self.sampling.temperature).log_softmax(dim=-1).gather(1, chosen.unsqueeze(1))
            chosen_ids, chosen_logps = chosen.tolist(), chosen_logp.squeeze(1).tolist()
            for b in running.nonzero().flatten().tolist():
                out[b].append(chosen_ids[b])
                logprobs[b].append(chosen_logps[b])
            generated += int(running.sum())
            running = running & ~torch.isin(chosen, self.stop_ids)
            if on_step is not None:
                on_step(generated)
            if not running.any() or step == self.sampling.max_new_tokens - 1:
                break
            logits = self._step(torch.where(running, chosen, self.pad_id), running)
        for e, t, new in zip(episodes, tokens, out):
            self.seen[e] = len(t) + len(new) - 1  # the last sampled token is not fed yet
        self.sampled_logprobs = logprobs
        return out
