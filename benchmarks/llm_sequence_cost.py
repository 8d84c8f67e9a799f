"""The cost of one long episode in the language-model update: a forward and backward pass of
``token_logprobs`` over one sequence of T tokens, as the agents' update runs it (fp32, the shared
prefix, activation checkpointing, one thread), beside the float32 matrix-product rate of the same
core (``timing.matmul_peak``), the bound the pass's products cannot beat.

    python benchmarks/llm_sequence_cost.py --model runs/.../model --lengths 1024 2048 4096

Prints, per length, the pass's seconds, its products' FLOPs, and the share of the measured matmul
rate they reached. FLOPs: 8 x weights x T for the decoder layers' linear maps (forward 2, the
forward that checkpointing recomputes 2, backward 4), 8 x layers x hidden x T^2 for the causal
attention's two products, counted alike, and 6 x vocabulary x hidden per scored token for the
output head, which ``token_logprobs`` applies at the scored positions only and checkpointing does
not recompute. Random token ids stand in for an episode: the cost depends on the
length, not the text. The process's peak RSS before and after each pass shows what the pass adds
(lengths in increasing order: the peak only grows); ``--logit-chunk`` sets how many scored tokens
share one vocabulary projection (``tokens.chosen_logprobs``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import matmul_peak  # noqa: E402

from cleanrl_style.llm import tokens  # noqa: E402
from cleanrl_style.llm.tokens import token_logprobs  # noqa: E402
from cleanrl_style.llm.train import build_policy, peak_rss_gib  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="", help="model folder (default: offline SmolLM2-135M-Instruct)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048])
    parser.add_argument("--scored-share", type=float, default=0.15, help="share of tokens after the prompt that are scored")
    parser.add_argument("--prompt", type=int, default=300, help="tokens before the first scored one")
    parser.add_argument(
        "--logit-chunk",
        type=int,
        default=tokens.LOGIT_CHUNK,
        help="scored tokens per vocabulary projection (tokens.LOGIT_CHUNK; a value past every length: one projection)",
    )
    args = parser.parse_args()
    tokens.LOGIT_CHUNK = args.logit_chunk
    if min(args.lengths) <= args.prompt:
        parser.error(f"every --lengths value must exceed --prompt ({args.prompt}) so that some tokens are scored")
    torch.set_num_threads(1)
    model = build_policy(args.model, "cpu", 1e-5, with_reference=False, gradient_checkpointing=True).policy
    model.train()
    config = model.config
    head = model.get_output_embeddings().weight.numel()
    # The decoder layers' linear maps: not the norms, the token embedding or the output head (tied or not).
    linear = sum(m.weight.numel() for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear))
    rate = matmul_peak(torch.float32, "cpu", size=1024)
    print(f"matmul (1024^3, fp32, one thread, timing.matmul_peak): {rate:.1f} GFLOP/s")
    g = torch.Generator().manual_seed(0)
    for length in args.lengths:
        ids = torch.randint(100, config.vocab_size - 100, (1, length), generator=g)
        mask = torch.zeros(1, length, dtype=torch.bool)
        mask[0, args.prompt :] = torch.rand(length - args.prompt, generator=g) < args.scored_share
        peak_before = peak_rss_gib()
        start = time.perf_counter()
        token_logprobs(model, ids, torch.ones_like(ids), mask).sum().backward()
        seconds = time.perf_counter() - start
        model.zero_grad(set_to_none=True)
        scored = int(mask.sum())
        # forward 2, recomputed forward 2, backward 4 FLOPs per weight and token; attention: QK^T and AV;
        # the head: forward 2 and backward 4 per weight and scored token, and 2 more where its chunks
        # are recomputed (more scored tokens than --logit-chunk)
        flops = 8 * linear * length + 8 * 2 * config.num_hidden_layers * config.hidden_size * length**2 / 2
        flops += (8 if scored > tokens.LOGIT_CHUNK else 6) * head * scored
        print(
            f"T={length} ({scored} scored, logit chunk {tokens.LOGIT_CHUNK}): {seconds:.1f} s forward + backward, "
            f"{flops / 1e12:.2f} TFLOP of products, {flops / seconds / 1e9:.1f} GFLOP/s = "
            f"{flops / seconds / 1e9 / rate:.0%} of the matmul rate; peak RSS {peak_before:.2f} GiB before, "
            f"{peak_rss_gib():.2f} GiB after"
        )


if __name__ == "__main__":
    main()
