"""Training state kept in files while no computation reads it: a full fine-tune's AdamW moments and
its frozen reference model.

Training every weight of SmolLM2-135M in float32 holds the weights (0.54 GB), AdamW's two moments
(1.08 GB) and, with a KL term or TurnSight's ``--teacher initial``, a frozen reference copy
(0.54 GB). The moments are read only by ``optimizer.step()`` and the reference only while its
log-probabilities are computed, yet both stayed resident through generation (packed weights and
key/value caches) and the backward pass, which set a run's peak memory. Parked, they live in a file
of the run folder and come back for the moment they are used:

    parked = ParkedOptimizerState(optimizer, run.dir / "optimizer_state.parked.pt")   # hooks on the optimizer
    optimizer.step()            # loads the moments, steps, writes them back and frees them
    optimizer.state_dict()      # loads them for the checkpoint, frees them after
    reference = ParkedModule(frozen_copy, run.dir / "reference.parked.pt")
    with resident(reference) as model:   # the weights mapped from the file for this block
        ...

``torch.save`` and ``torch.load`` round-trip every tensor bit for bit, so a run with parked state
takes exactly the steps of one without (``tests/test_llm_parking.py``). The cost is writing and
reading the moments once per optimizer step (1.08 GB: 3.7 s on a 2-core AMD EPYC,
``benchmarks/llm_parking_cost.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch


def _write(obj: Any, path: Path) -> None:
    part = path.with_name(path.name + ".part")
    torch.save(obj, part)
    part.replace(path)  # a crash mid-write leaves the last whole file


class ParkedOptimizerState:
    """Keep ``optimizer``'s per-parameter state (AdamW's moments and step) in ``path`` between its steps.

    Hooks on the optimizer do the work: before ``step()`` the state is read back, after it the
    state is written and dropped; ``state_dict()`` (a checkpoint) reads it for the call and drops
    it after, and ``load_state_dict()`` (a resume) writes what it loaded and drops it. Hooks
    registered on the optimizer earlier run before these on each step.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, path: str | Path) -> None:
        self.optimizer, self.path = optimizer, Path(path)
        self.path.unlink(missing_ok=True)  # a file left by an earlier process is not this optimizer's
        optimizer.register_step_pre_hook(lambda *_: self.load())
        optimizer.register_step_post_hook(lambda *_: self.park())
        optimizer.register_state_dict_pre_hook(lambda *_: self.load())
        optimizer.register_state_dict_post_hook(lambda *_: self.drop())  # unchanged: the file still holds it
        optimizer.register_load_state_dict_post_hook(lambda *_: self.park())

    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def park(self) -> None:
        """Write the state to the file and drop it from memory."""
        state = self.optimizer.state
        if not state:
            return
        _write({i: state[p] for i, p in enumerate(self._params()) if p in state}, self.path)
        state.clear()

    def drop(self) -> None:
        """Drop the state from memory; the file holds the same values."""
        self.optimizer.state.clear()

    def load(self) -> None:
        """Read the state back from the file (nothing to read before the first step)."""
        if self.optimizer.state or not self.path.exists():
            return
        params = self._params()
        for i, values in torch.load(self.path, weights_only=True).items():
            self.optimizer.state[params[i]] = values

    def discard(self) -> None:
        """Forget the state in memory and on disk (the run has saved its last checkpoint)."""
        self.optimizer.state.clear()
        self.path.unlink(missing_ok=True)


class ParkedModule:
    """A frozen module whose parameters live in ``path`` except inside ``resident()``.

    Only parameters are parked; buffers (rotary frequencies) stay. Parameters shared between
    submodules (tied embeddings) are one tensor and come back as one.
    """

    def __init__(self, module: torch.nn.Module, path: str | Path) -> None:
        self.module, self.path = module, Path(path)
        _write({name: p.detach() for name, p in module.named_parameters()}, self.path)
        self._empty()

    def _empty(self) -> None:
        for p in self.module.parameters():
            p.data = torch.empty(0, dtype=p.dtype, device=p.device)

    @contextlib.contextmanager
    def resident(self) -> Iterator[torch.nn.Module]:
        """The module with its weights mapped from the file (read-only use) for the block."""
        weights = torch.load(self.path, weights_only=True, mmap=True)
        try:
            for name, p in self.module.named_parameters():
                p.data = weights[name]
            yield self.module
        finally:
            self._empty()
            del weights

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


def resident(module: Any) -> contextlib.AbstractContextManager[Any]:
    """``module.resident()`` for a :class:`ParkedModule`, the module itself otherwise."""
    return module.resident() if isinstance(module, ParkedModule) else contextlib.nullcontext(module)
