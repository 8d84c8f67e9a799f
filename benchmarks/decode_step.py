"""One decoding step of the packed decoder with float32 weight products against bfloat16 ones
(``--generation-precision bf16``), and where each step's time goes, in the same process,
alternating rounds.

    python benchmarks/decode_step.py --rows 8 --prefix 800 --steps 32 --rounds 4

SmolLM2-135M-Instruct, one torch thread. Each round and precision builds a ``PackedLlama`` for
``--rows`` rows, feeds a shared prefix of ``--prefix`` tokens once (``share_prefix``), then 30
tokens of each row's own, then times ``--steps`` decoding steps (one token a row, fed the greedy
token of the step before; the head's logits included). The medians of the rounds' ms per step,
their ratio and the tokens/s of the batch (rows / step time) are printed, beside the read
bandwidth bound of each: the weights' bytes (float32, or bfloat16: half) over the best of 5 sums
of a 256 MB tensor. Last, ``torch.profiler`` over 8 steps of each precision splits a step into
the weight products (``mkl::_mkl_linear``, ``mkldnn::_linear_pointwise``, ``aten::linear``),
attention over the cache (``aten::matmul``/``bmm``, ``softmax``) and the rest (norms,
rotations, residuals, the cache's writes), by self CPU time.

A third variant, ``skipped``, times the bf16 decoder with every weight product skipped: each packed
projection returns the output it gave at the round's first step, so the step reads no weights and
does everything else (attention over the cache, norms, rotations, residuals, the cache's writes;
the products' own conversions to and from bf16 are skipped with them). Its time plus the bf16
weights' bytes at the measured read bandwidth is a lower bound on the step of this decoder with
its products at the bound; the tokens/s that implies, an upper bound, is printed last.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time

import torch
from llm_rollout_throughput import cpu_model, git_commit, read_bandwidth  # benchmarks/, beside this script

from cleanrl_style.llm.decoder import PackedLinear, PackedLlama
from cleanrl_style.llm.model import load_causal_lm

PRODUCTS = ("mkl::_mkl_linear", "mkldnn::_linear_pointwise", "aten::addmm", "aten::mm")
ATTENTION = ("aten::bmm", "aten::_softmax", "aten::matmul")


def prepared(model, rows: int, prefix: int, products: str) -> tuple[PackedLlama, torch.Tensor, torch.Tensor]:
    """A decoder holding a shared prefix and 30 tokens of each row; the next token and mask."""
    packed = PackedLlama(model, rows, products)
    draw = torch.Generator().manual_seed(0)
    shared = torch.randint(0, 49152, (1, prefix), generator=draw)
    packed.forward(shared, torch.arange(prefix)[None], torch.ones(1, prefix, dtype=torch.long))
    packed.share_prefix()
    own = torch.randint(0, 49152, (rows, 30), generator=draw)
    mask = torch.ones(rows, prefix + 30, dtype=torch.long)
    hidden = packed.forward(own, prefix + torch.arange(30).expand(rows, -1), mask)
    return packed, packed.logits(hidden[:, -1]).argmax(dim=-1), mask


@contextlib.contextmanager
def products_skipped():
    """Every ``PackedLinear`` returns the output it first gave for its input's shape: a decoding
    step that reads no weights (the values are stale, the work besides the products is the same)."""
    call = PackedLinear.__call__
    outputs: dict[tuple[int, tuple[int, ...]], torch.Tensor] = {}

    def reuse(self: PackedLinear, x: torch.Tensor) -> torch.Tensor:
        key = (id(self), tuple(x.shape))
        if key not in outputs:
            outputs[key] = call(self, x)
        return outputs[key]

    PackedLinear.__call__ = reuse  # type: ignore[method-assign]
    try:
        yield
    finally:
        PackedLinear.__call__ = call  # type: ignore[method-assign]


def steps(
    packed: PackedLlama, token: torch.Tensor, mask: torch.Tensor, count: int
) -> tuple[float, torch.Tensor, torch.Tensor]:
    """Seconds per decoding step over ``count`` steps; the next token and the mask after them."""
    rows = token.shape[0]
    started = time.perf_counter()
    for _ in range(count):
        mask = torch.cat([mask, torch.ones(rows, 1, dtype=torch.long)], dim=1)
        positions = torch.full((rows, 1), mask.shape[1] - 1)
        hidden = packed.forward(token[:, None], positions, mask)
        token = packed.logits(hidden[:, -1]).argmax(dim=-1)
    return (time.perf_counter() - started) / count, token, mask


def profile(model, args, products: str) -> dict[str, float]:
    """ms per step in the products, the attention and the rest (self CPU time, 8 steps)."""
    packed, token, mask = prepared(model, args.rows, args.prefix, products)
    _, token, mask = steps(packed, token, mask, 2)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        steps(packed, token, mask, 8)
    parts = {"products": 0.0, "attention": 0.0, "rest": 0.0}
    for event in prof.key_averages():
        part = "products" if event.key in PRODUCTS else "attention" if event.key in ATTENTION else "rest"
        parts[part] += event.self_cpu_time_total / 1e3 / 8
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prefix", type=int, default=800, help="shared prefix tokens")
    parser.add_argument("--steps", type=int, default=32, help="decoding steps timed per round")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, _ = load_causal_lm()
    model.eval()
    load_before = os.getloadavg()[0]
    precisions = ("fp32", "bf16")
    names = (*precisions, "skipped")
    seconds: dict[str, list[float]] = {name: [] for name in names}
    with torch.no_grad():
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                packed, token, mask = prepared(model, args.rows, args.prefix, "bf16" if name == "skipped" else name)
                with products_skipped() if name == "skipped" else contextlib.nullcontext():
                    _, token, mask = steps(packed, token, mask, 2)  # warm
                    seconds[name].append(steps(packed, token, mask, args.steps)[0])
                print(f"round {r}: {name}: {seconds[name][-1] * 1e3:.1f} ms per step", flush=True)
                del packed
        parts = {name: profile(model, args, name) for name in precisions}
    reading = read_bandwidth()
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    print(
        f"\n{args.rows} rows, a shared prefix of {args.prefix} tokens and 30 of each row's own, {args.steps} steps a round; "
        f"{time.strftime('%Y-%m-%d')}, {cpu_model()}, {os.cpu_count()} cores, 1 torch thread, 1-minute load average "
        f"{load_before:.1f} before and {os.getloadavg()[0]:.1f} after; torch {torch.__version__}; commit {git_commit()}"
    )
    for name in precisions:
        step = statistics.median(seconds[name])
        bound = reading / (weight_bytes / (2 if name == "bf16" else 1))
        split = ", ".join(f"{part} {ms:.1f}" for part, ms in parts[name].items())
        print(
            f"{name}: {step * 1e3:.1f} ms per step (median; rounds {', '.join(f'{s * 1e3:.1f}' for s in seconds[name])}), "
            f"{args.rows / step:.1f} tokens/s for {args.rows} rows; read bound {bound:.1f} steps/s, "
            f"{bound * args.rows:.0f} tokens/s; profiled ms per step: {split}"
        )
    ratios = sorted(a / b for a, b in zip(seconds["fp32"], seconds["bf16"]))
    print(
        f"bf16 / fp32 speed: {statistics.median(seconds['fp32']) / statistics.median(seconds['bf16']):.2f}x "
        f"(per round: {', '.join(f'{x:.2f}' for x in ratios)}); read bandwidth {reading / 1e9:.1f} GB/s"
    )
    rest = statistics.median(seconds["skipped"])
    bf16_read = weight_bytes / 2 / reading  # seconds to read the bf16 weights once
    fastest = rest + bf16_read
    print(
        f"without the weight products (bf16 decoder): {rest * 1e3:.1f} ms per step (median; rounds "
        f"{', '.join(f'{s * 1e3:.1f}' for s in seconds['skipped'])}); with bf16 products at the read bound "
        f"({bf16_read * 1e3:.1f} ms) a step would take {fastest * 1e3:.1f} ms: "
        f"{args.rows / fastest:.0f} tokens/s for {args.rows} rows at most"
    )


if __name__ == "__main__":
    main()
