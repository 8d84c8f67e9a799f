"""A tiny randomly initialized causal LM for the LLM tests: nothing is downloaded.

The tokenizer is SmolLM2's, from the converted cache of ``cleanrl_style.llm.model`` when that
exists on the machine; otherwise a small byte-level BPE is trained here on the environment's own
text, with a ChatML template. The model is a 2-layer Llama built from a config with a fixed seed.

Its weights are drawn with a standard deviation of 0.3 (transformers' default, 0.02, gives
near-uniform logits and attention, and an untied head that echoes its input), so the next-token
distribution depends on each token's position and on content far back: greedy decoding writes
varied tokens, and a cache that misplaces, unmasks or swaps tokens changes the log-probabilities
by far more than rounding does (the tests that check the cache rely on this). Grouped-query
attention (4 query heads, 2 key/value heads) as in SmolLM2; the RMSNorm weights are drawn around 1
instead of all 1, so a norm that drops its weight changes the logits.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

INIT_STD = 0.3
NORM_WEIGHT_STD = 0.3  # the RMSNorm weights are 1 + N(0, 0.3^2) instead of all 1

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def cached_smollm2_tokenizer_dir() -> Path | None:
    try:
        from cleanrl_style.llm.model import converted_cache_dir, default_model_dir, find_gguf

        gguf = find_gguf(default_model_dir())
        folder = converted_cache_dir(gguf) if gguf else None
    except Exception:
        return None
    return folder if folder is not None and (folder / "tokenizer.json").exists() else None


def build_tokenizer():
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    folder = cached_smollm2_tokenizer_dir()
    if folder is not None:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    else:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        from envs.text import ExpertPolicy, ToolUseEnv, rollout

        env = ToolUseEnv(split=None, num_tasks=40, seed=0, variants=("base", "missing_parameter"))
        texts = [m["content"] for t in range(40) for m in rollout(env, ExpertPolicy(), options={"task_id": t}).messages]
        raw = Tokenizer(models.BPE())
        raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        raw.decoder = decoders.ByteLevel()
        raw.train_from_iterator(
            texts,
            trainers.BpeTrainer(
                vocab_size=2000,
                special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            ),
        )
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=raw, eos_token="<|im_end|>", bos_token="<|im_start|>", unk_token="<|endoftext|>"
        )
        tokenizer.chat_template = CHATML
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def build_tiny_model(tokenizer, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        initializer_range=INIT_STD,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # transformers sets every RMSNorm weight to 1: vary them, so that a norm losing its weight shows
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                parameter.add_(torch.randn_like(parameter) * NORM_WEIGHT_STD)
    return model


def save_tiny_model(folder: Path, seed: int = 0) -> Path:
    """A tiny model and its tokenizer as a transformers folder (what ``--model`` takes)."""
    tokenizer = build_tokenizer()
    model = build_tiny_model(tokenizer, seed)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@functools.cache
def bf16_attention_error() -> str | None:
    """The error of torch's bfloat16 attention on this CPU, or None where it runs.

    With torch 2.13.0 on an Intel Xeon with AMX and ``ATEN_CPU_CAPABILITY=avx2`` (how the suite
    checks the AVX2 kernels on a newer CPU), a bf16 ``scaled_dot_product_attention`` with a mask
    raises "pack_vnni2 is only supported when avx512 is supported"; the bf16 agent runs skip there."""
    import torch.nn.functional as F

    x = torch.randn(1, 1, 128, 16, dtype=torch.bfloat16)  # from 64 keys on, the kernel takes the packed path
    try:
        F.scaled_dot_product_attention(x, x, x, attn_mask=torch.ones(1, 1, 128, 128, dtype=torch.bool).tril())
    except RuntimeError as exc:
        return str(exc)
    return None
