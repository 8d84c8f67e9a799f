"""``torch.compile`` with a way out: compiled at the first call, run eagerly if compiling fails.

Small networks on a CPU are bound by per-op overhead, which compiling removes (PPO-NaP's minibatch
loss and backward: about 0.65 ms compiled against 1.1 ms eager on the 2-core machine). But
compiling needs a working toolchain (a C++ compiler on the CPU, Triton on a GPU), so a run that
cannot compile warns once, with the reason, and goes on eagerly instead of dying at its first update.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import torch


def compile_or_eager(
    fn: Callable,
    enabled: bool,
    off_flag: str = "--compile off",
    mutated: Callable[[], Sequence[torch.Tensor]] | None = None,
    options: dict | None = None,
) -> Callable:
    """``fn`` compiled with ``torch.compile`` if ``enabled``, falling back to ``fn`` if the first call fails.

    The fallback reruns the same call eagerly, so an error of ``fn`` itself (a shape mismatch, say)
    still raises, from the eager run. For that rerun to be safe ``fn`` must be free of side effects
    (the agents' loss functions), or ``mutated`` must return every tensor it changes in place (an
    optimizer step): those are copied before the first call and put back before the eager rerun.
    ``options`` go to inductor (``torch.compile(options=...)``), e.g. ``{"fallback_random": True}``.
    """
    if not enabled:
        return fn
    chosen: list[Callable] = []

    def call(*args, **kwargs):
        if chosen:
            return chosen[0](*args, **kwargs)
        saved = [t.detach().clone() for t in mutated()] if mutated is not None else []
        try:
            compiled = torch.compile(fn, dynamic=False, options=options)  # may itself refuse (an unsupported Python, say)
            out = compiled(*args, **kwargs)
        except Exception as err:  # compilation errors come from several torch subsystems
            if mutated is not None:
                with torch.no_grad():
                    for t, copy in zip(mutated(), saved):
                        t.copy_(copy)
            reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
            warnings.warn(
                f"torch.compile of {getattr(fn, '__name__', 'the function')} failed ({type(err).__name__}: "
                f"{reason[:200]}); running it eagerly (same results, slower). Pass {off_flag} to skip the attempt.",
                RuntimeWarning,
                stacklevel=2,
            )
            chosen.append(fn)
            return fn(*args, **kwargs)
        chosen.append(compiled)
        return out

    return call
