"""A module's parameters in one contiguous tensor, so optimizer-side work is a few ops, not dozens.

Small networks on a CPU spend more time in per-tensor bookkeeping than in arithmetic: with twenty
parameter tensors, zeroing the gradients, clipping their global norm and an Adam step are each
dozens of tiny ops (measured on PPO's 64x64 actor-critic: about a third of each minibatch update).
After ``flat = FlatParameters(model)`` every parameter of ``model`` is a view into ``flat.param``
and every gradient a view into ``flat.param.grad``; autograd accumulates into those views in
place, so::

    optimizer = torch.optim.Adam([flat.param], ...)   # one tensor for the whole model
    flat.zero_grad(); loss.backward(); flat.clip_grad_norm_(0.5); optimizer.step()

computes what the per-parameter versions compute. The model itself is unchanged: same forward,
same ``state_dict`` (``load_state_dict`` copies into the views).

Create it after ``model.to(device)`` (moving a model replaces its parameters and breaks the views),
and zero gradients with :meth:`zero_grad`, never ``optimizer.zero_grad()`` (that would detach
``flat.param.grad`` from the views autograd writes to: :meth:`zero_grad` checks for it).
"""

from __future__ import annotations

import math

import torch
from torch import nn


class FlatParameters:
    def __init__(self, module: nn.Module, trainable: bool = True):
        """``trainable=False`` flattens every parameter of a frozen module (a target network), with no
        gradient buffer: a Polyak update becomes one ``lerp_`` of two flat tensors."""
        named = [(name, p) for name, p in module.named_parameters() if p.requires_grad or not trainable]
        params = [p for _, p in named]
        if not params:
            raise ValueError("FlatParameters: the module has no trainable parameters")
        kinds = {(p.device, p.dtype) for p in params}
        if len(kinds) > 1:
            raise ValueError(f"FlatParameters: parameters must share one device and dtype, found {sorted(map(str, kinds))}")
        self.module = module
        self.params = params
        self.names = [name for name, _ in named]
        self.shapes = [tuple(p.shape) for p in params]
        total = sum(p.numel() for p in params)
        self.param = nn.Parameter(torch.empty(total, device=params[0].device, dtype=params[0].dtype), trainable)
        grad = torch.zeros_like(self.param) if trainable else None
        self.param.grad = grad
        offset = 0
        with torch.no_grad():
            for p in params:
                n = p.numel()
                self.param[offset : offset + n].copy_(p.reshape(-1))
                p.data = self.param.data[offset : offset + n].view_as(p)
                if grad is not None:
                    p.grad = grad[offset : offset + n].view_as(p)
                offset += n
        self._grad_buffer = grad

    def views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{parameter name: slice of flat}`` shaped like the module's parameters, for a functional call.

        ``torch.func.functional_call(module, fp.views(x), inputs)`` evaluates the module at the flat
        vector ``x`` (``fp.param`` itself, a detached copy, the target network's vector), so
        ``torch.func.grad`` can differentiate with respect to ``x`` as one tensor.

        The pieces come from one ``torch.split``, whose gradient is one concatenation. Sliced one by
        one, each slice's gradient is a zero-padded copy of the whole vector, and inductor fuses
        their sum into passes that test every parameter's range at every element, which took more
        time in PPO-NaP's compiled minibatch step on the CPU than its matrix products
        (``benchmarks/README.md``).
        """
        pieces = torch.split(flat, [math.prod(shape) for shape in self.shapes])
        return {name: piece.view(shape) for name, piece, shape in zip(self.names, pieces, self.shapes)}

    def reparametrized(self, vector: torch.Tensor):
        """A context in which the module's parameters are read from ``vector`` (laid out as
        :attr:`param`), so that unchanged code (a loss calling the module's methods) is a function of
        ``vector``, which ``torch.func.grad`` can differentiate."""
        return torch.nn.utils.stateless._reparametrize_module(self.module, self.views(vector))

    def offset_of(self, view: torch.Tensor) -> int:
        """Where ``view`` (a parameter of the module, or a view of one) starts in :attr:`param`."""
        if view.untyped_storage().data_ptr() != self.param.untyped_storage().data_ptr():
            raise ValueError("FlatParameters.offset_of: the tensor does not live in this flat buffer")
        return int(view.storage_offset() - self.param.storage_offset())

    @property
    def _grad(self) -> torch.Tensor:
        if self._grad_buffer is None:
            raise RuntimeError("FlatParameters(trainable=False) has no gradients to zero or clip")
        return self._grad_buffer

    def zero_grad(self) -> None:
        # optimizer.zero_grad() replaces param.grad; module.zero_grad() clears every p.grad (the first
        # one tells): either way autograd would no longer write into the flat buffer.
        if self.param.grad is not self._grad or self.params[0].grad is None:
            raise RuntimeError(
                "FlatParameters: gradients were detached from the flat buffer (optimizer.zero_grad() or "
                "module.zero_grad() sets them to None); call FlatParameters.zero_grad() instead"
            )
        self._grad.zero_()

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Scale all gradients so their global L2 norm is at most ``max_norm``; returns the norm before.

        The same scaling as ``torch.nn.utils.clip_grad_norm_``: ``min(1, max_norm / (norm + 1e-6))``.
        """
        norm = torch.linalg.vector_norm(self._grad)
        self._grad.mul_((max_norm / (norm + 1e-6)).clamp(max=1.0))
        return norm
