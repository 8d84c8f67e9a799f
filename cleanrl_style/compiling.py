"""``torch.compile`` with a way out: compiled at the first call, run eagerly if compiling fails.

Small networks on a CPU are bound by per-op overhead, which compiling removes (PPO-NaP's minibatch
loss and backward: about 0.65 ms compiled against 1.1 ms eager on the 2-core machine). But
compiling needs a working toolchain (a C++ compiler on the CPU, Triton on a GPU), so a run that
cannot compile warns once, with the reason, and goes on eagerly instead of dying at its first update.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import torch


def snapshot(*objects) -> Callable[[], None]:
    """Copy the state of ``objects`` (modules, optimizers, anything with ``state_dict``/``load_state_dict``)
    and torch's CPU RNG; return a function that puts it all back."""
    saved = [copy.deepcopy(obj.state_dict()) for obj in objects]
    rng = torch.get_rng_state()

    def restore() -> None:
        for obj, state in zip(objects, saved):
            obj.load_state_dict(state)
        torch.set_rng_state(rng)

    return restore


def compile_or_eager(
    fn: Callable,
    enabled: bool,
    off_flag: str = "--compile off",
    state: Callable[[], Callable[[], None]] | None = None,
) -> Callable:
    """``fn`` compiled with ``torch.compile`` if ``enabled``, falling back to ``fn`` if the first call fails.

    The fallback reruns the same call eagerly, so an error of ``fn`` itself (a shape mismatch, say)
    still raises, from the eager run. A compiled call can fail after part of it ran (a graph break
    splits it into pieces, each compiled when reached), so a function with side effects, an update
    step say, passes ``state``: called before the first attempt, it saves what ``fn`` changes and
    returns the function that restores it (see :func:`snapshot`); the fallback restores before it
    reruns. Without ``state``, ``fn`` must be free of side effects.
    """
    if not enabled:
        return fn
    chosen: list[Callable] = []

    def call(*args, **kwargs):
        if chosen:
            return chosen[0](*args, **kwargs)
        restore = state() if state is not None else None
        try:
            compiled = torch.compile(fn, dynamic=False)  # may itself refuse (an unsupported Python, say)
            out = compiled(*args, **kwargs)
        except Exception as err:  # compilation errors come from several torch subsystems
            reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
            warnings.warn(
                f"torch.compile of {getattr(fn, '__name__', 'the function')} failed ({type(err).__name__}: "
                f"{reason[:200]}); running it eagerly (same results, slower). Pass {off_flag} to skip the attempt.",
                RuntimeWarning,
                stacklevel=2,
            )
            chosen.append(fn)
            if restore is not None:
                restore()
            return fn(*args, **kwargs)
        chosen.append(compiled)
        return out

    return call
