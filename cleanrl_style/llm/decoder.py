"""A Llama-family decoder for cached generation on the CPU: the same arithmetic as transformers'
``LlamaModel``, with the per-step overheads that dominate small batches taken out.

``TurnGenerator`` (``generation.py``) feeds a batch of rows a chunk of columns at a time (prefill
chunks, then one token per decoding step) with a 2-D mask of real tokens and explicit position
ids. This module does those forwards for a ``LlamaForCausalLM`` (SmolLM2 and the other Llama
checkpoints) without transformers' generic machinery:

- **Weights packed for the batch.** A decoding step multiplies a few rows by every weight once, so
  it is bound by reading the weights. Each projection (query, key and value fused into one, gate
  and up fused into one, the output and down projections, and the tied head) is packed once per
  generation with ``torch.ops.mkl._mkl_reorder_linear_weight`` for the batch's row count (fewer
  rows are padded up to it). On a 2-core Intel Xeon (AVX-512, 2026-12-02, torch 2.13.0+cpu, one
  thread) 8 rows against 1,536 x 576 weights ran at 6.6 GB/s of weights read packed, against 4.3
  GB/s with the plain ``linear``. Without MKL (or for more rows) the plain ``linear`` is used: the
  same products. Without LoRA adapters the fused matrices live only while they are packed:
  products for more rows than packed (a prefill) run over each layer's own weights, one product
  per projection.
- **The shared prefix read once.** The first chunk every row starts with (system prompt and tool
  schemas) is fed once as one row and kept apart (:meth:`PackedLlama.share_prefix`); each decoding
  step reads its keys and values once for all rows, under one softmax with the row's own columns,
  instead of one copy per row.
- **Attention written out for one query.** A decoding step's query attends to its row's cached
  keys through batched matrix products and a masked softmax; prefill chunks use
  ``scaled_dot_product_attention`` with the causal-and-holes mask.
- **A key/value buffer with spare room**, grown by half when full, rows selected or repeated in
  place of a transformers cache. Columns that only some rows hold (the tails of a long tool
  output, which the generator feeds for those rows alone) go to a side block of those rows
  (:class:`SideBlock`), read under the same softmax as the rest, instead of widening every row's
  main block: a python-math turn where one of 32 rows printed 1,000 tokens and the others about
  30 keeps 1,000 columns of one row, not of 32.

The packed copies are taken from the live weights when a ``PackedLlama`` is built, so it must be
rebuilt after the weights change (``TurnGenerator`` builds one per ``generate`` call from a fresh
cache). A LoRA wrapper (``peft``) is packed with each adapted projection's weight merged, the base
weight plus its active adapters' scaled products, so LoRA runs generate through this decoder too.
Models it does not cover (not a float32 Llama on the CPU, rotary scaling other than the default,
attention or MLP biases, another activation than SiLU, adapters other than plain LoRA on the
projections, such as DoRA or trained embedding rows) return None from :func:`packed_llama_for`, and
the generator falls back to the transformers forward. Tests check every sampled token's
log-probability against a full transformers pass on a random tiny Llama (with and without LoRA
adapters), over turns with holes in the mask, with and without a shared prefix.

For scoring (``tokens.token_logprobs``: the update, the reference and teacher log-probabilities),
:func:`shared_prefix_hidden` runs the prefix that every row of a micro-batch starts with once,
with gradient, through the model's own layer modules (so any Llama, LoRA included).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils.checkpoint

# Room added when the key/value buffer is full: at least this many columns, or half the filled ones.
MIN_GROWTH = 256


def _mkl_packing_available() -> bool:
    return bool(getattr(torch._C, "has_mkl", False)) and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")


def _bf16_packing_available() -> bool:
    """oneDNN runs bf16 products on this CPU (it needs AVX-512; AVX-512 BF16 and AMX make them fast)."""
    return torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


class PackedLinear:
    """``x @ weight.T`` with the weight packed by MKL for ``rows`` rows (padded up to them).

    ``parts``: when ``weight`` stacks other tensors along its output rows (query, key and value of
    a layer), those tensors. Once packed, the product for more rows than packed (a prefill) runs
    over them, one product each, so the stacked copy is not kept: the packed product reads only
    its shape. SmolLM2's stacked query-key-value and gate-up matrices are 0.28 GB in float32.

    ``products="bf16"``: a bfloat16 copy of the weight (packed by oneDNN for ``rows`` rows where
    it supports bf16, else plain) multiplies the input rounded to bfloat16, for any row count;
    the float32 weight and ``parts`` are not kept. oneDNN accumulates in float32 and rounds the
    output to bfloat16, returned as float32: half the weight bytes a decoding step reads, and a
    different policy from the float32 one, which the loss corrects with the sampled tokens' own
    log-probabilities (``train.generation_logprobs``)."""

    def __init__(
        self, weight: torch.Tensor, rows: int, parts: Sequence[torch.Tensor] | None = None, products: str = "fp32"
    ) -> None:
        if products not in ("fp32", "bf16"):
            raise ValueError(f"products must be fp32 or bf16, got {products!r}")
        self.weight = weight
        self.rows = rows
        self.packed = None
        self.parts: list[torch.Tensor] | None = None
        self.bf16: torch.Tensor | None = None
        self.bf16_packed = False
        if products == "bf16":
            self.bf16_packed = _bf16_packing_available()
            low = weight.to(torch.bfloat16)
            self.bf16 = torch.ops.mkldnn._reorder_linear_weight(low, rows) if self.bf16_packed else low
            self.weight = weight.new_zeros(()).expand(weight.shape)  # its shape, no storage
        elif weight.dtype == torch.float32 and weight.device.type == "cpu" and _mkl_packing_available():
            self.packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, rows)
            if parts is not None:
                self.parts = list(parts)
                self.weight = weight.new_zeros(()).expand(weight.shape)  # its shape, no storage

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.bf16 is not None:
            low = x.to(torch.bfloat16)
            if self.bf16_packed:
                return torch.ops.mkldnn._linear_pointwise(low, self.bf16, None, "none", [], "").float()
            return F.linear(low, self.bf16).float()
        if self.packed is None or x.dim() != 2 or x.shape[0] > self.rows:
            if self.parts is not None:
                return torch.cat([F.linear(x, part) for part in self.parts], dim=-1)
            return F.linear(x, self.weight)
        n = x.shape[0]
        if n < self.rows:
            x = torch.cat([x, x.new_zeros(self.rows - n, x.shape[1])])
        return torch.ops.mkl._mkl_linear(x, self.packed, self.weight, None, self.rows)[:n]


class SideBlock:
    """Columns that only some rows of a :class:`KVBuffer` hold: the tails of new chunks far longer
    than the other rows' (a long tool output), kept for those rows alone.

    ``rows`` are the buffer rows that hold them (the others read none of these columns: their mask
    there is 0), ``start`` the block's first column in the per-row column order (the generator's
    mask, past a shared prefix), ``keys``/``values`` per layer (len(rows), kv heads, width, head dim)."""

    def __init__(self, rows: torch.Tensor, start: int, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        self.rows, self.start, self.keys, self.values = rows, start, keys, values

    @property
    def width(self) -> int:
        return self.keys[0].shape[2]

    def restricted(self, index: torch.Tensor, buffer_rows: int) -> SideBlock | None:
        """The block for a buffer whose rows become ``index`` (of ``buffer_rows``): its rows that
        ``index`` keeps, in their new places; None when it keeps none."""
        place = torch.full((buffer_rows,), -1)  # int64, on the CPU as the packed decoder
        place[self.rows] = torch.arange(len(self.rows))
        held = place[index]
        new_rows = (held >= 0).nonzero().flatten()
        if not len(new_rows):
            return None
        held = held[new_rows]
        return SideBlock(new_rows, self.start, [k[held] for k in self.keys], [v[held] for v in self.values])


class KVBuffer:
    """Keys and values of every layer: a main block (rows, kv heads, columns, head dim) with spare
    columns, which every forward appends to, and side blocks that hold columns for some rows only.

    Columns keep the order of the mask the forwards get (each row's real tokens in order, holes
    masked); ``main_order`` says which of them are the main block's, each side block its own range."""

    def __init__(self, layers: int) -> None:
        self.keys: list[torch.Tensor | None] = [None] * layers
        self.values: list[torch.Tensor | None] = [None] * layers
        self.columns = 0  # filled columns of the main block (of the last layer written)
        self.total_columns = 0  # columns in the mask's order: the main block's and the side blocks'
        self.main_order = torch.zeros(0, dtype=torch.long)  # the main block's columns in the mask's order
        self.sides: list[SideBlock] = []

    def filled_rows(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[0]

    def add_main_columns(self, width: int) -> None:
        """The next ``width`` columns of the mask are the main block's (before a forward appends them)."""
        new = torch.arange(self.total_columns, self.total_columns + width)
        self.main_order = new if not len(self.main_order) else torch.cat([self.main_order, new])
        self.total_columns += width

    def main_mask(self, per_row: torch.Tensor) -> torch.Tensor:
        """The main block's columns of a mask (rows, total columns)."""
        return per_row if len(self.main_order) == self.total_columns else per_row[:, self.main_order]

    def side_masks(self, per_row: torch.Tensor) -> list[torch.Tensor]:
        """Each side block's columns of a mask (rows, total columns), for the block's rows."""
        return [per_row[side.rows, side.start : side.start + side.width] for side in self.sides]

    def layer(self, layer: int, columns: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first ``columns`` keys and values of ``layer``'s main block."""
        keys, values = self.keys[layer], self.values[layer]
        assert keys is not None and values is not None
        return keys[:, :, :columns], values[:, :, :columns]

    def append(self, layer: int, keys: torch.Tensor, values: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Write columns ``start:start+width`` of ``layer``'s main block; its filled keys and values up to them."""
        end = start + keys.shape[2]
        buffer_k, buffer_v = self.keys[layer], self.values[layer]
        if buffer_k is None or buffer_v is None or buffer_k.shape[2] < end:
            shape = (keys.shape[0], keys.shape[1], end + max(MIN_GROWTH, end // 2), keys.shape[3])
            new_k, new_v = keys.new_empty(shape), values.new_empty(shape)
            if buffer_k is not None and buffer_v is not None and start:
                new_k[:, :, :start] = buffer_k[:, :, :start]
                new_v[:, :, :start] = buffer_v[:, :, :start]
            self.keys[layer], self.values[layer] = buffer_k, buffer_v = new_k, new_v
        buffer_k[:, :, start:end] = keys
        buffer_v[:, :, start:end] = values
        self.columns = end
        return buffer_k[:, :, :end], buffer_v[:, :, :end]

    def select(self, index: torch.Tensor) -> None:
        """Keep (or repeat) the rows ``index`` of every layer and side block."""
        rows = self.filled_rows()
        self.keys = [None if k is None else k[index] for k in self.keys]
        self.values = [None if v is None else v[index] for v in self.values]
        self.sides = [s for s in (side.restricted(index, rows) for side in self.sides) if s is not None]

    def rows(self, index: torch.Tensor) -> KVBuffer:
        """A copy of the rows ``index`` (their filled columns and side blocks), for a forward of those rows only."""
        part = KVBuffer(len(self.keys))
        part.keys = [None if k is None else k[index, :, : self.columns] for k in self.keys]
        part.values = [None if v is None else v[index, :, : self.columns] for v in self.values]
        part.columns, part.total_columns, part.main_order = self.columns, self.total_columns, self.main_order
        rows = self.filled_rows()
        part.sides = [s for s in (side.restricted(index, rows) for side in self.sides) if s is not None]
        return part

    def append_rows(self, part: KVBuffer, index: torch.Tensor, width: int) -> None:
        """Append ``width`` columns that only the rows ``index`` hold: ``part``'s last ``width``
        main columns (``part`` holds the rows ``index``, see :meth:`rows`), kept as a side block, so
        that the other rows' columns take no memory. Columns right after a side block, for rows it
        holds, extend it (the tails of one chunk fed in blocks become one block; rows it holds
        that ``index`` does not get zeros there, masked)."""
        start = part.columns - width
        keys = [k[:, :, start : part.columns] for k in part.keys if k is not None]
        values = [v[:, :, start : part.columns] for v in part.values if v is not None]
        last = self.sides[-1] if self.sides else None
        if last is not None and last.start + last.width == self.total_columns and bool(torch.isin(index, last.rows).all()):
            place = torch.full((self.filled_rows(),), -1)
            place[last.rows] = torch.arange(len(last.rows))
            held = place[index]
            for layer, (k, v) in enumerate(zip(keys, values)):
                new_k = k.new_zeros((len(last.rows), k.shape[1], width, k.shape[3]))
                new_v = v.new_zeros((len(last.rows), v.shape[1], width, v.shape[3]))
                new_k[held], new_v[held] = k, v
                last.keys[layer] = torch.cat([last.keys[layer], new_k], dim=2)
                last.values[layer] = torch.cat([last.values[layer], new_v], dim=2)
        else:
            keys, values = [k.clone() for k in keys], [v.clone() for v in values]  # part's buffer is freed after
            self.sides.append(SideBlock(index.clone(), self.total_columns, keys, values))
        self.total_columns += width


def merged_weight(module: Any, out: torch.Tensor | None = None) -> torch.Tensor:
    """The weight a bias-free linear ``module`` multiplies by: its own, or for a ``peft`` LoRA layer
    the base weight plus each active adapter's scaled product ``B @ A`` (none while adapters are
    disabled or already merged into the base). Written into ``out`` when given (rows of a fused
    matrix), else a new tensor for a LoRA layer and the module's own weight otherwise."""
    weight = module.weight  # a peft layer's ``weight`` is its base layer's
    lora = hasattr(module, "base_layer")
    active = module.active_adapters if lora and not (module.merged or module.disable_adapters) else []
    adapters = [name for name in active if name in module.lora_A]
    if not adapters:
        return weight if out is None else out.copy_(weight)
    for name in adapters:  # one fused product-and-sum per adapter, no temporary for the product
        b, a = module.lora_B[name].weight, module.lora_A[name].weight
        weight = torch.addmm(weight, b, a, alpha=module.scaling[name], out=out)
    return weight


def fused_weight(modules: Sequence[Any]) -> torch.Tensor:
    """The merged weights (:func:`merged_weight`) of ``modules`` stacked along their output rows:
    one matrix for their fused product (query, key and value; gate and up)."""
    weights = [m.weight for m in modules]  # a peft layer's ``weight`` is its base layer's
    out = weights[0].new_empty(sum(w.shape[0] for w in weights), weights[0].shape[1])
    start = 0
    for module, weight in zip(modules, weights):
        merged_weight(module, out=out[start : start + weight.shape[0]])
        start += weight.shape[0]
    return out


def _stacked(modules: Sequence[Any], rows: int, products: str = "fp32") -> PackedLinear:
    """One packed product for ``modules``' merged weights stacked (:func:`fused_weight`); without
    adapters the modules' own weights are the parts its prefill products run over, so the stacked
    copy lives only while it is packed (a LoRA layer's merged weight is a new tensor either way)."""
    parts = None if any(hasattr(m, "base_layer") for m in modules) else [m.weight for m in modules]
    return PackedLinear(fused_weight(modules), rows, parts, products)


def _adapters_are_plain_lora(model: Any) -> bool:
    """Every ``peft`` layer of ``model`` is a LoRA linear layer without DoRA on a projection, with the
    embedding and the head untouched: what :func:`merged_weight` reproduces."""
    plain = (torch.nn.Linear, torch.nn.Embedding)
    if not isinstance(model.get_input_embeddings(), plain) or not isinstance(model.get_output_embeddings(), plain):
        return False
    for module in model.modules():
        if module is model or not hasattr(module, "active_adapters") or not hasattr(module, "base_layer"):
            continue
        if not isinstance(module.base_layer, torch.nn.Linear) or not hasattr(module, "lora_A"):
            return False
        if any(module.use_dora.get(name, False) for name in module.active_adapters):
            return False
    return True


def packed_llama_for(model: Any, rows: int, products: str = "fp32") -> PackedLlama | None:
    """A :class:`PackedLlama` over ``model`` (a transformers model, or a plain LoRA wrapper of one)
    with ``products`` (fp32 or bf16) weight products, or None where the model is not a float32
    Llama on the CPU that this module reproduces exactly."""
    config = model.config
    if config.model_type != "llama" or (hasattr(model, "peft_config") and not _adapters_are_plain_lora(model)):
        return None
    weight = model.get_input_embeddings().weight
    if weight.dtype != torch.float32 or weight.device.type != "cpu":
        return None
    # transformers 5 names the rotary settings rope_parameters; 4.x rope_scaling (None: the default).
    rope = getattr(config, "rope_parameters", None) or config.rope_scaling or {}
    if rope.get("rope_type", "default") != "default":
        return None
    if config.attention_bias or config.mlp_bias or config.hidden_act != "silu" or config.pretraining_tp != 1:
        return None
    return PackedLlama(model, rows, products)


class PackedLlama:
    """The forward of a ``LlamaForCausalLM`` over a chunk of new columns, keeping its own cache.

    Args:
        model: The model (or a plain LoRA wrapper of one: :func:`merged_weight`); its weights are
            read (and packed) now.
        rows: The batch's row count the weights are packed for.
        products: ``fp32`` (the model's arithmetic), or ``bf16``: every weight product (projections
            and head) in bfloat16 (:class:`PackedLinear`), the rest (norms, rotations, attention,
            residuals, the cache) in float32.
    """

    def __init__(self, model: Any, rows: int, products: str = "fp32") -> None:
        config = model.config
        base = model.get_decoder()
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim  # every LlamaConfig of transformers >= 4.45 sets it (hidden / heads by default)
        self.eps = config.rms_norm_eps
        self.rotary = base.rotary_emb
        self.embed = base.embed_tokens.weight
        self.final_norm = base.norm.weight
        self.cache = KVBuffer(len(base.layers))
        self.shared = KVBuffer(len(base.layers))  # a prefix all rows share (see share_prefix)
        self.shared_length = 0
        with torch.no_grad():
            self.layers = [
                (
                    layer.input_layernorm.weight,
                    _stacked([layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj], rows, products),
                    PackedLinear(merged_weight(layer.self_attn.o_proj), rows, products=products),
                    layer.post_attention_layernorm.weight,
                    _stacked([layer.mlp.gate_proj, layer.mlp.up_proj], rows, products),
                    PackedLinear(merged_weight(layer.mlp.down_proj), rows, products=products),
                )
                for layer in base.layers
            ]
            self.head = PackedLinear(model.get_output_embeddings().weight, rows, products=products)

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, weight.shape, weight, self.eps)  # one fused op: x / sqrt(mean(x^2) + eps) * weight

    def share_prefix(self) -> None:
        """The one row fed so far becomes a prefix every row attends to, read once per step for all
        rows instead of copied into each (the per-row cache starts empty after it)."""
        if self.cache.filled_rows() != 1:
            raise ValueError("share_prefix needs a cache of exactly one row")
        self.shared, self.shared_length = self.cache, self.cache.columns
        self.cache = KVBuffer(len(self.layers))

    @torch.no_grad()
    def forward(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Hidden states (rows, width, hidden) after the final norm, for ``ids`` (rows, width) at
        ``positions`` appended as the last ``width`` columns of ``mask`` (rows, columns; 1 = real;
        a shared prefix's columns first)."""
        rows, width = ids.shape
        shared, cache = self.shared_length, self.cache
        per_row = mask[:, shared:].bool()  # the per-row columns, in the mask's order
        if per_row.shape[1] - width != cache.total_columns:
            earlier = per_row.shape[1] - width
            raise ValueError(f"the mask has {earlier} earlier per-row columns, the cache {cache.total_columns}")
        start = cache.columns  # where the new columns go in the main block
        cache.add_main_columns(width)
        x = F.embedding(ids, self.embed)
        cos, sin = self.rotary(x, positions)  # (rows, width, head_dim)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        main_keep, side_keep = cache.main_mask(per_row), cache.side_masks(per_row)
        if width == 1:  # additive masks on the per-row columns (the shared ones are all real)
            bias, *side_bias = [
                torch.zeros(kept.shape, dtype=x.dtype).masked_fill_(~kept, float("-inf"))[:, None, None, :]
                for kept in [main_keep, *side_keep]
            ]
        else:  # causal among the new columns (the main block's last), holes masked everywhere
            columns = [torch.ones(rows, shared, dtype=torch.bool)] if shared else []
            for side, kept in zip(cache.sides, side_keep):  # every row, zeros (masked) where the block has none
                columns.append(kept.new_zeros((rows, side.width)).index_copy_(0, side.rows, kept))
            keep = torch.cat([*columns, main_keep], dim=1)
            causal = torch.ones(width, keep.shape[1], dtype=torch.bool).tril(diagonal=keep.shape[1] - width)
            allowed = (keep[:, None, :] & causal[None])[:, None]  # (rows, 1, width, columns)
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        group, scale = self.heads // self.kv_heads, self.head_dim**-0.5
        for index, (norm_1, qkv, out, norm_2, gate_up, down) in enumerate(self.layers):
            h = self._norm(x, norm_1)
            projected = qkv(h.reshape(rows * width, -1)).view(rows, width, -1)
            # Queries and keys rotated together, then split: (rows, heads + kv heads, width, head dim).
            qk = _rotate(projected[..., : q_size + kv_size].view(rows, width, -1, self.head_dim).transpose(1, 2), cos, sin)
            q, k = qk[:, : self.heads], qk[:, self.heads :]
            v = projected[..., q_size + kv_size :].view(rows, width, self.kv_heads, self.head_dim).transpose(1, 2)
            keys, values = cache.append(index, k, v, start)
            if width == 1:
                attended = self._attend_one(
                    q.view(rows, self.kv_heads, group, self.head_dim), keys, values, bias, side_bias, index, scale
                )
                attended = attended.reshape(rows, 1, q_size)
            else:
                before_k, before_v = [], []
                if shared:
                    shared_keys, shared_values = self.shared.layer(index, shared)
                    before_k.append(shared_keys.expand(rows, -1, -1, -1))
                    before_v.append(shared_values.expand(rows, -1, -1, -1))
                for side in cache.sides:  # every row, zeros where the block has none (masked above)
                    side_k, side_v = side.keys[index], side.values[index]
                    before_k.append(side_k.new_zeros((rows, *side_k.shape[1:])).index_copy_(0, side.rows, side_k))
                    before_v.append(side_v.new_zeros((rows, *side_v.shape[1:])).index_copy_(0, side.rows, side_v))
                if before_k:
                    keys, values = torch.cat([*before_k, keys], dim=2), torch.cat([*before_v, values], dim=2)
                attended = F.scaled_dot_product_attention(q, keys, values, attn_mask=allowed, enable_gqa=True)
                attended = attended.transpose(1, 2).reshape(rows, width, q_size)
            x = x + out(attended.reshape(rows * width, -1)).view(rows, width, -1)
            h = self._norm(x, norm_2)
            gate, up = gate_up(h.reshape(rows * width, -1)).chunk(2, dim=-1)
            x = x + down(F.silu(gate) * up).view(rows, width, -1)
        return self._norm(x, self.final_norm)

    def _attend_one(
        self,
        q: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        bias: torch.Tensor,
        side_bias: list[torch.Tensor],
        layer: int,
        scale: float,
    ) -> torch.Tensor:
        """One query per row, grouped (rows, kv heads, group, head dim), over the shared prefix (one
        copy for all rows), the side blocks (their rows only) and the row's main columns; one
        softmax over all of them."""
        rows, kv_heads, group, dim = q.shape
        scores = (q @ keys.transpose(2, 3)) * scale + bias  # (rows, kv, group, main columns)
        if not self.shared_length and not self.cache.sides:
            return scores.softmax(dim=-1) @ values
        parts = []
        if self.shared_length:
            shared_keys, shared_values = self.shared.layer(layer, self.shared_length)  # (1, kv, shared, d)
            by_head = q.permute(1, 0, 2, 3).reshape(kv_heads, rows * group, dim)
            shared_scores = (by_head @ shared_keys[0].transpose(1, 2)) * scale  # (kv, rows * group, shared)
            parts.append(shared_scores.view(kv_heads, rows, group, -1).permute(1, 0, 2, 3))
        for side, side_b in zip(self.cache.sides, side_bias):  # -inf for the rows the block does not hold
            side_scores = (q[side.rows] @ side.keys[layer].transpose(2, 3)) * scale + side_b
            every_row = side_scores.new_full((rows, kv_heads, group, side.width), float("-inf"))
            parts.append(every_row.index_copy_(0, side.rows, side_scores))
        weights = torch.cat([*parts, scores], dim=-1).softmax(dim=-1)
        split = weights.split([p.shape[-1] for p in parts] + [scores.shape[-1]], dim=-1)
        attended = split[-1] @ values
        blocks = list(split[:-1])
        if self.shared_length:
            shared_weights = blocks.pop(0).permute(1, 0, 2, 3).reshape(kv_heads, rows * group, -1)
            attended = attended + (shared_weights @ shared_values[0]).view(kv_heads, rows, group, dim).permute(1, 0, 2, 3)
        for side, side_weights in zip(self.cache.sides, blocks):
            attended = attended.index_add(0, side.rows, side_weights[side.rows] @ side.values[layer])
        return attended

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The head's logits for hidden states (rows, hidden)."""
        return self.head(hidden)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


# ---- scoring many sequences that start alike ---------------------------------------------------------

MIN_SHARED_PREFIX = 16
"""the fewest leading tokens that all rows share worth a pass of their own, in generation's prefill
(``TurnGenerator``) and in scoring (:func:`shared_prefix_hidden`); below it the rows run whole"""


def scoring_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor, mask: torch.Tensor) -> int:
    """How many leading columns every row of a right-padded batch shares and no scored token needs
    as its predicting position: the longest common prefix of the rows, cut so that it holds only
    real tokens and ends before the column that predicts the first scored token (a scored token t
    is predicted from the hidden state at t - 1, which must be in the rows' own part)."""
    rows, width = input_ids.shape
    if rows < 2:
        return 0
    same = (input_ids == input_ids[:1]).all(dim=0) & attention_mask.bool().all(dim=0)
    length = int(same.long().cumprod(dim=0).sum())
    scored = mask.any(dim=0).nonzero()
    if len(scored):
        length = min(length, int(scored[0]) - 1)
    return max(0, min(length, width - 1))


def shared_prefix_supported(model: Any) -> bool:
    """Whether :func:`shared_prefix_hidden` reproduces ``model``'s decoder: a Llama-family model
    (LoRA adapters included, which live inside its projections) without attention dropout."""
    config = model.config
    return config.model_type == "llama" and not getattr(config, "attention_dropout", 0.0)


def shared_prefix_hidden(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, prefix: int) -> torch.Tensor:
    """The decoder's last hidden states (after the final norm) at columns ``prefix:`` of a
    right-padded batch whose rows all start with the same ``prefix`` tokens, with the prefix run
    once as one row instead of once per row; (rows, width - prefix, hidden), differentiable.

    The same arithmetic as the transformers forward of the whole batch (each layer's own modules:
    norms, projections with any LoRA adapters, MLP, rotary embedding), with the rows' queries
    attending to the prefix's keys and values (one copy, broadcast) and to their own columns
    causally, padding masked. The gradient reaching the prefix's keys and values is the sum over
    the rows, as it is when every row carries its own copy. Under the model's activation
    checkpointing each layer is recomputed in the backward pass (non-reentrant), as in the
    transformers forward.
    """
    decoder = model.get_decoder()
    rows, width = input_ids.shape
    own = width - prefix
    head_dim = model.config.head_dim
    heads, kv_heads = model.config.num_attention_heads, model.config.num_key_value_heads
    x_prefix = decoder.embed_tokens(input_ids[:1, :prefix])
    x_rows = decoder.embed_tokens(input_ids[:, prefix:])
    positions = torch.arange(width, device=input_ids.device)[None]
    cos, sin = decoder.rotary_emb(x_rows, positions)  # (1, width, head dim)
    cos_prefix, sin_prefix = cos[:, None, :prefix], sin[:, None, :prefix]
    cos_rows, sin_rows = cos[:, None, prefix:], sin[:, None, prefix:]
    # Each row's queries see the whole prefix, then its own columns causally, holes (padding) masked.
    causal = torch.ones(own, own, dtype=torch.bool, device=input_ids.device).tril()
    allowed = torch.cat(
        [
            torch.ones(rows, own, prefix, dtype=torch.bool, device=input_ids.device),
            causal[None] & attention_mask[:, None, prefix:].bool(),
        ],
        dim=2,
    )[:, None]  # (rows, 1, own, prefix + own)

    def attention_inputs(attn: Any, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        count, length = h.shape[:2]
        q = attn.q_proj(h).view(count, length, heads, head_dim).transpose(1, 2)
        k = attn.k_proj(h).view(count, length, kv_heads, head_dim).transpose(1, 2)
        v = attn.v_proj(h).view(count, length, kv_heads, head_dim).transpose(1, 2)
        return _rotate(q, cos, sin), _rotate(k, cos, sin), v

    def layer_forward(layer: Any, x_prefix: torch.Tensor, x_rows: torch.Tensor, last: bool):
        attn = layer.self_attn
        q, k, v = attention_inputs(attn, layer.input_layernorm(x_prefix), cos_prefix, sin_prefix)
        q_rows, k_rows, v_rows = attention_inputs(attn, layer.input_layernorm(x_rows), cos_rows, sin_rows)
        keys = torch.cat([k.expand(rows, -1, -1, -1), k_rows], dim=2)
        values = torch.cat([v.expand(rows, -1, -1, -1), v_rows], dim=2)
        attended = F.scaled_dot_product_attention(q_rows, keys, values, attn_mask=allowed, enable_gqa=True)
        x_rows = x_rows + attn.o_proj(attended.transpose(1, 2).reshape(rows, own, heads * head_dim))
        x_rows = x_rows + layer.mlp(layer.post_attention_layernorm(x_rows))
        if last:  # the rows read the prefix only through this layer's keys and values
            return x_prefix, x_rows
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x_prefix = x_prefix + attn.o_proj(attended.transpose(1, 2).reshape(1, prefix, heads * head_dim))
        x_prefix = x_prefix + layer.mlp(layer.post_attention_layernorm(x_prefix))
        return x_prefix, x_rows

    recompute = bool(getattr(decoder, "gradient_checkpointing", False)) and decoder.training and torch.is_grad_enabled()
    layers = list(decoder.layers)
    for index, layer in enumerate(layers):
        last = index == len(layers) - 1
        if recompute:
            x_prefix, x_rows = torch.utils.checkpoint.checkpoint(
                layer_forward, layer, x_prefix, x_rows, last, use_reentrant=False
            )
        else:
            x_prefix, x_rows = layer_forward(layer, x_prefix, x_rows, last)
    return decoder.norm(x_rows)
