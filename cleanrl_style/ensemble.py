"""An ensemble of identical networks evaluated in one batched call (critic ensembles).

The members' parameters are stacked along a leading ensemble dimension and the member network is
run once under ``torch.func.vmap``: one call, batched matmuls, no Python loop over members.
Plain ``nn.Sequential`` MLPs (Linear, LayerNorm, parameter-free activations) take a hand-batched
path instead (``baddbmm`` per layer), which has less per-call overhead than ``vmap`` for the small
networks of continuous control; both paths compute the same function.
"""

from __future__ import annotations

import copy
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F
from torch.func import functional_call, stack_module_state, vmap


class Ensemble(nn.Module):
    """``size`` independently initialized copies of ``make_member()``, evaluated together.

    ``forward(*inputs)`` feeds the same inputs to every member and returns the outputs stacked,
    ``(size, *member_output_shape)``. Parameters are stored stacked, ``(size, *param_shape)``,
    so one optimizer step updates every member.

    :meth:`members` gives ordinary modules whose parameters are views of the stacked ones, for
    per-member tools such as :class:`~cleanrl_style.nap.NormProjector` (project each member's
    layers to their own initial norm) and for inspection.
    """

    def __init__(self, make_member: Callable[[], nn.Module], size: int):
        super().__init__()
        if size < 1:
            raise ValueError(f"ensemble size must be >= 1, got {size}")
        members = [make_member() for _ in range(size)]
        params, buffers = stack_module_state(members)
        self.size = size
        self.param_names = list(params)
        self.buffer_names = list(buffers)
        # Dots are not allowed in parameter names: store "net.0.weight" as "net__0__weight".
        for name, value in params.items():
            self.register_parameter(name.replace(".", "__"), nn.Parameter(value.detach().clone()))
        for name, value in buffers.items():
            self.register_buffer(name.replace(".", "__"), value.detach().clone())
        # A stateless template (meta tensors) that functional_call fills with each member's tensors.
        self.__dict__["template"] = copy.deepcopy(members[0]).to("meta")
        self.batched_mlp = not buffers and isinstance(members[0], nn.Sequential) and all(
            isinstance(m, (nn.Linear, nn.LayerNorm)) or not any(True for _ in m.parameters()) for m in members[0]
        )

    def stacked_params(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name.replace(".", "__")) for name in self.param_names}

    def stacked_buffers(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name.replace(".", "__")) for name in self.buffer_names}

    def _member_forward(self, params, buffers, *inputs):
        return functional_call(self.template, (params, buffers), inputs)

    def forward(self, *inputs: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        """Every member on the same ``inputs``; ``detach_params`` lets gradients reach only the inputs
        (an actor's loss through a critic without computing the critic's parameter gradients)."""
        params = self.stacked_params()
        if detach_params:
            params = {k: v.detach() for k, v in params.items()}
        if self.batched_mlp and len(inputs) == 1:
            return self._mlp_forward(params, inputs[0])
        in_dims = (0, 0) + (None,) * len(inputs)
        return vmap(self._member_forward, in_dims=in_dims, randomness="different")(params, self.stacked_buffers(), *inputs)

    def _mlp_forward(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """The hand-batched path: ``x`` ``(B, in)`` -> ``(size, B, out)``."""
        h = x.expand(self.size, *x.shape)
        for i, layer in enumerate(self.template):
            if isinstance(layer, nn.Linear):
                w, b = params[f"{i}.weight"], params.get(f"{i}.bias")
                h = torch.bmm(h, w.transpose(1, 2)) if b is None else torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))
            elif isinstance(layer, nn.LayerNorm):
                h = F.layer_norm(h, layer.normalized_shape, eps=layer.eps)
                w, b = params.get(f"{i}.weight"), params.get(f"{i}.bias")
                if w is not None:
                    h = h * w.unsqueeze(1) if b is None else torch.addcmul(b.unsqueeze(1), h, w.unsqueeze(1))
            else:
                h = layer(h)
        return h

    def members(self) -> nn.ModuleList:
        """The members as ordinary modules whose parameters share memory with the stacked ones.

        Build these after moving the ensemble to its device; in-place changes (an optimizer step,
        a NaP projection, ``load_state_dict``) are seen on both sides.
        """
        views = []
        for e in range(self.size):
            member = copy.deepcopy(self.template).to_empty(device=next(self.parameters()).device)
            for name, stacked in self.stacked_params().items():
                owner, _, leaf = name.rpartition(".")
                module = member.get_submodule(owner) if owner else member
                setattr(module, leaf, nn.Parameter(stacked.data[e], requires_grad=False))
            for name, stacked in self.stacked_buffers().items():
                owner, _, leaf = name.rpartition(".")
                module = member.get_submodule(owner) if owner else member
                setattr(module, leaf, stacked.data[e])
            views.append(member)
        return nn.ModuleList(views)
