"""The resident memory the packed decoder's weights take: a ``PackedLlama`` built for SmolLM2 with
the stacked query-key-value and gate-up matrices freed once packed (the default: prefill products
run over the layers' own weights) against kept beside their packed copies (the peer, as the
decoder did before), each in a fresh process, alternating.

    python benchmarks/packed_weights_memory.py --rows 32 --rounds 2

Each process loads the model, touches every weight (so the model's own pages are resident before
the measurement), then builds the decoder; the figure is the growth of ``VmRSS`` over the build,
with glibc returning large freed blocks to the system as in the agents.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def measure(rows: int, keep_stacked: bool) -> float:
    import torch

    from cleanrl_style.llm import decoder
    from cleanrl_style.llm.model import load_causal_lm
    from cleanrl_style.llm.train import return_freed_memory_to_the_system

    def rss_mb() -> float:
        with open("/proc/self/status") as status:
            return int(next(line for line in status if line.startswith("VmRSS")).split()[1]) / 1024

    return_freed_memory_to_the_system()
    model, _ = load_causal_lm()
    model.eval()
    with torch.no_grad():
        sum(float(p.sum()) for p in model.parameters())  # every weight resident
    if keep_stacked:
        decoder._stacked = lambda modules, rows: decoder.PackedLinear(decoder.fused_weight(modules), rows)
    before = rss_mb()
    packed = decoder.PackedLlama(model, rows)
    grown = rss_mb() - before
    assert packed.layers
    return grown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", choices=["freed", "kept"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.rows, args.child == "kept")))
        return
    import torch

    print(f"{time.strftime('%Y-%m-%d')}, torch {torch.__version__}, {args.rows} rows")
    grown: dict[str, list[float]] = {"kept": [], "freed": []}
    for r in range(args.rounds):
        for variant in ("freed", "kept") if r % 2 == 0 else ("kept", "freed"):
            out = subprocess.run(
                [sys.executable, __file__, "--rows", str(args.rows), "--child", variant],
                capture_output=True,
                text=True,
                check=True,
            )
            grown[variant].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"  round {r}: stacked copies {variant:>5}: +{grown[variant][-1]:.0f} MB", flush=True)
    kept, freed = max(grown["kept"]), max(grown["freed"])
    print(f"the decoder's build, largest of {args.rounds}: stacked copies kept +{kept:.0f} MB, freed +{freed:.0f} MB")
    print(f"saved {kept - freed:.0f} MB")


if __name__ == "__main__":
    main()
