"""An ensemble of identical networks evaluated in one batched call (critic ensembles).

The members' parameters are stacked along a leading ensemble dimension ``E`` and all members run
in one call, with no Python loop over members. Two ways to run them, computing the same function:

- **Batched layers** (used whenever possible): a copy of the member network whose ``nn.Linear``
  become batched matmuls (``baddbmm`` on ``(E, B, in)``), whose ``nn.LayerNorm`` carry ``(E, d)``
  affine parameters, and whose other parameters are stored as ``(E, 1, *shape)`` so they
  broadcast over the batch. This has little per-call overhead. Parameter-free modules (ReLU,
  residual blocks, containers) run unchanged on ``(E, B, d)`` tensors. A module with its own
  parameters other than Linear/LayerNorm must declare ``ensemble_broadcast = True``, a promise
  that its forward only broadcasts those parameters elementwise against the last dimensions.
- **vmap** (otherwise): ``torch.func.vmap`` over ``functional_call`` of the member network.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap
from torch.nn import functional as F


class BatchedLinear(nn.Module):
    """``E`` linear layers: weight ``(E, out, in)``, bias ``(E, out)``; ``(E, B, in) -> (E, B, out)``."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.bias = None if bias is None else nn.Parameter(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.bias is None:
            return torch.bmm(x, self.weight.transpose(1, 2))
        return torch.baddbmm(self.bias.unsqueeze(1), x, self.weight.transpose(1, 2))


class BatchedLayerNorm(nn.Module):
    """``E`` LayerNorms over the last dimension, affine parameters ``(E, d)``."""

    def __init__(self, norm: nn.LayerNorm, weight: torch.Tensor | None, bias: torch.Tensor | None):
        super().__init__()
        self.normalized_shape, self.eps = tuple(norm.normalized_shape), norm.eps
        self.weight = None if weight is None else nn.Parameter(weight)
        self.bias = None if bias is None else nn.Parameter(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.layer_norm(x, self.normalized_shape, eps=self.eps)
        if self.weight is not None:
            h = h * self.weight.unsqueeze(1)
        if self.bias is not None:
            h = h + self.bias.unsqueeze(1)
        return h


def _batched_network(member: nn.Module, stacked: dict[str, torch.Tensor]) -> nn.Module | None:
    """A copy of ``member`` running all members at once on ``(E, B, ...)``, or None if not possible."""
    if isinstance(member, (nn.Linear, nn.LayerNorm)) or any(
        len(norm.normalized_shape) != 1 for norm in member.modules() if isinstance(norm, nn.LayerNorm)
    ):
        return None
    net = copy.deepcopy(member)
    for name, module in list(net.named_modules()):
        owner, _, leaf = name.rpartition(".")
        parent = net.get_submodule(owner) if owner else net
        prefix = f"{name}." if name else ""
        if isinstance(module, nn.Linear):
            setattr(parent, leaf, BatchedLinear(stacked[f"{prefix}weight"], stacked.get(f"{prefix}bias")))
        elif isinstance(module, nn.LayerNorm):
            setattr(parent, leaf, BatchedLayerNorm(module, stacked.get(f"{prefix}weight"), stacked.get(f"{prefix}bias")))
        elif module._parameters:
            if not getattr(module, "ensemble_broadcast", False):
                return None
            for pname in list(module._parameters):
                setattr(module, pname, nn.Parameter(stacked[f"{prefix}{pname}"].unsqueeze(1)))
        if module._buffers:
            return None
    return net


class Ensemble(nn.Module):
    """``size`` independently initialized copies of ``make_member()``, evaluated together.

    ``forward(*inputs)`` feeds the same inputs ``(B, ...)`` to every member and returns the outputs
    stacked, ``(size, B, ...)``. One optimizer step over ``parameters()`` updates every member.

    :meth:`stacked_params` gives each member parameter with a leading ensemble dimension, and
    :meth:`members` ordinary modules whose parameters are views of the stacked ones, for per-member
    tools such as :class:`~cleanrl_style.blocks.nap.NormProjector` and for inspection.
    """

    template: nn.Module  # kept out of the module tree (set through __dict__ in __init__)

    def __init__(self, make_member: Callable[[], nn.Module], size: int, batched: bool = True):
        super().__init__()
        if size < 1:
            raise ValueError(f"ensemble size must be >= 1, got {size}")
        members = [make_member() for _ in range(size)]
        params, buffers = stack_module_state(members)
        params = {k: v.detach().clone() for k, v in params.items()}
        self.size = size
        self.param_names = list(params)
        self.buffer_names = list(buffers)
        # A stateless template (meta tensors): the member's structure, for members() and vmap.
        self.__dict__["template"] = copy.deepcopy(members[0]).to("meta")
        self.batched = _batched_network(members[0], params) if batched else None
        if self.batched is None:
            # Dots are not allowed in parameter names: store "net.0.weight" as "net__0__weight".
            for name, value in params.items():
                self.register_parameter(name.replace(".", "__"), nn.Parameter(value))
            for name, value in buffers.items():
                self.register_buffer(name.replace(".", "__"), value.detach().clone())

    def stacked_params(self) -> dict[str, torch.Tensor]:
        """``{member parameter name: tensor (size, *member_shape)}``, views of the parameters."""
        if self.batched is None:
            return {name: getattr(self, name.replace(".", "__")) for name in self.param_names}
        out = {}
        for name in self.param_names:
            p = self.batched.get_parameter(name)
            owner = self.batched.get_submodule(name.rpartition(".")[0]) if "." in name else self.batched
            out[name] = p if isinstance(owner, (BatchedLinear, BatchedLayerNorm)) else p.squeeze(1)
        return out

    def stacked_buffers(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name.replace(".", "__")) for name in self.buffer_names}

    def _member_forward(self, params, buffers, *inputs):
        return functional_call(self.template, (params, buffers), inputs)

    def forward(self, *inputs: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        """Every member on the same ``inputs``; ``detach_params`` lets gradients reach only the inputs
        (an actor's loss through a critic without computing the critic's parameter gradients).

        Detaching runs the network on detached copies of its parameters (``functional_call``), which
        ``torch.compile`` traces without a graph break, rather than toggling ``requires_grad``.
        """
        if self.batched is not None:
            expanded = tuple(x.expand(self.size, *x.shape) for x in inputs)
            if not detach_params:
                return self.batched(*expanded)
            detached = {name: p.detach() for name, p in self.batched.named_parameters()}
            return functional_call(self.batched, detached, expanded)
        params = self.stacked_params()
        if detach_params:
            params = {name: p.detach() for name, p in params.items()}
        in_dims = (0, 0) + (None,) * len(inputs)
        return vmap(self._member_forward, in_dims=in_dims, randomness="different")(params, self.stacked_buffers(), *inputs)

    def members(self) -> nn.ModuleList:
        """The members as ordinary modules whose parameters share memory with the stacked ones.

        Build these after moving the ensemble to its device; in-place changes (an optimizer step,
        a NaP projection, ``load_state_dict``) are seen on both sides.
        """
        device = next(self.parameters()).device
        stacked, buffers = self.stacked_params(), self.stacked_buffers()
        views = []
        for e in range(self.size):
            member = copy.deepcopy(self.template).to_empty(device=device)
            for name, value in stacked.items():
                owner, _, leaf = name.rpartition(".")
                module = member.get_submodule(owner) if owner else member
                setattr(module, leaf, nn.Parameter(value.data[e], requires_grad=False))
            for name, value in buffers.items():
                owner, _, leaf = name.rpartition(".")
                module = member.get_submodule(owner) if owner else member
                setattr(module, leaf, value.data[e])
            views.append(member)
        return nn.ModuleList(views)
