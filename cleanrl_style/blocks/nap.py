"""NaP (Normalize-and-Project, Lyle et al. 2024): keep every layer's weight norm at its initial value.

With LayerNorm before each nonlinearity the network is invariant to the scale of the weights
feeding a normalized unit, so a growing weight norm silently shrinks the effective learning rate
(about ``lr / ||W||`` for Adam). Projecting each layer back to its initial Frobenius norm after
every optimizer step, ``W <- W * ||W_init|| / ||W||``, makes the effective learning rate follow the
explicit learning-rate schedule instead.

Choices the paper leaves open are options here (docs/algorithms.md#nap lists them):

- ``layer_norm``: ``"joint"`` rescales each LayerNorm's ``(gamma, beta)`` together back to their
  initial joint norm (``sqrt(d)`` for ``gamma = 1, beta = 0``); ``"none"`` leaves them free.
- ``biases``: ``"none"`` leaves biases free; ``"joint"`` projects ``[W, b]`` together to its initial norm.
- ``project_output``: whether the output layers (``output_layers``) are projected too. Output
  layers feed no normalization, so their scale matters to the function; the default leaves them free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn


@dataclass
class _ProjectedGroup:
    name: str
    params: list[torch.Tensor]  # the group's parameters (nn.Parameter)
    init_norm: float


def _joint_norm(params: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.sqrt(cast(torch.Tensor, sum((p.detach().float() ** 2).sum() for p in params)))


def _contiguous_span(params: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """One 1-D tensor over the memory of ``params`` if they lie back to back in one storage, else None."""
    first = params[0].detach()
    if not all(p.is_contiguous() for p in params):
        return None
    offset = first.storage_offset()
    for p in params:
        if p.untyped_storage().data_ptr() != first.untyped_storage().data_ptr() or p.storage_offset() != offset:
            return None
        offset += p.numel()
    if len(params) == 1:
        return first.view(-1)
    return first.new_empty(0).set_(first.untyped_storage(), first.storage_offset(), (offset - first.storage_offset(),), (1,))


class NormProjector:
    """Records each layer's weight norm at construction and projects back to it on :meth:`project`.

    Create it right after initializing ``model``; call :meth:`project` after every
    ``optimizer.step()``. :meth:`layer_stats` gives the per-layer norms and effective learning
    rates for logging, whether or not projection is used (the paper's analysis plots both).
    """

    def __init__(
        self,
        model: nn.Module,
        output_layers: tuple[nn.Module, ...] | list[nn.Module] = (),
        project_output: bool = False,
        layer_norm: str = "joint",
        biases: str = "none",
    ):
        if layer_norm not in ("joint", "none"):
            raise ValueError(f"layer_norm must be 'joint' or 'none', got {layer_norm!r}")
        if biases not in ("joint", "none"):
            raise ValueError(f"biases must be 'joint' or 'none', got {biases!r}")
        output_ids = {id(m) for m in output_layers}
        self._params: list[torch.Tensor] | None = None  # flat view, built by _flatten()
        self.groups: list[_ProjectedGroup] = []
        self.weights: list[tuple[str, torch.Tensor]] = []  # every linear weight, for stats
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                self.weights.append((name, module.weight))
                if id(module) in output_ids and not project_output:
                    continue
                params = [module.weight]
                if biases == "joint" and module.bias is not None:
                    params.append(module.bias)
                self._add_group(name, params)
            elif isinstance(module, nn.LayerNorm) and module.elementwise_affine and layer_norm == "joint":
                params = [p for p in (module.weight, module.bias) if p is not None]
                self._add_group(name, params)

    def _add_group(self, name: str, params: list[torch.Tensor]) -> None:
        init_norm = float(_joint_norm(params))
        if init_norm > 0:  # a zero-initialized group has no scale to return to
            self.groups.append(_ProjectedGroup(name, params, init_norm))
        self._params = None

    def _flatten(self) -> list[torch.Tensor]:
        """Precompute what :meth:`project` touches, so projection is a few fused ops; returns the parameters."""
        params = self._params = [p for group in self.groups for p in group.params]
        self._first_ptr = params[0].data_ptr()
        device = params[0].device
        self._group_of_param = torch.tensor([g for g, group in enumerate(self.groups) for _ in group.params], device=device)
        self._init_norms = torch.tensor([group.init_norm for group in self.groups], device=device)
        # When every group is one span of memory (always true under FlatParameters, where a
        # LayerNorm's gamma and beta sit side by side), each group is a single tensor: one norm
        # and one scaling per group, with no regrouping.
        spans = [span for span in (_contiguous_span(group.params) for group in self.groups) if span is not None]
        self._spans = spans if len(spans) == len(self.groups) else None
        return params

    @torch.no_grad()
    def project(self) -> None:
        """Rescale every recorded group back to its initial norm (in place)."""
        if not self.groups:
            return
        params = self._params
        if params is None or params[0].data_ptr() != self._first_ptr:
            params = self._flatten()  # first call, or the parameters moved (.to(device), FlatParameters)
        if self._spans is not None:
            scale = self._init_norms / torch.stack(torch._foreach_norm(self._spans)).float().clamp_min(1e-12)
            # On the CPU a list of Python floats is the cheapest form; elsewhere avoid the host sync.
            if scale.device.type == "cpu":
                torch._foreach_mul_(self._spans, scale.tolist())
            else:
                torch._foreach_mul_(self._spans, list(scale.unbind()))
            return
        param_norms = torch.stack(torch._foreach_norm(params)).float()
        group_sq = torch.zeros_like(self._init_norms).index_add_(0, self._group_of_param, param_norms**2)
        scale = self._init_norms / group_sq.sqrt().clamp_min(1e-12)
        torch._foreach_mul_(params, list(scale[self._group_of_param].unbind()))

    def flat_spans(self, flat) -> list[tuple[tuple[tuple[int, int], ...], float]]:
        """Each group as ``(((offset, length), ...), initial norm)`` in ``flat.param`` (a
        :class:`FlatParameters`), for :func:`project_spans_` inside a compiled update. A group is
        one span when its parameters lie back to back (a LayerNorm's gamma and beta), several when
        they do not (in an :class:`Ensemble`, every member's gammas come before its betas)."""
        groups = []
        for group in self.groups:
            spans: list[tuple[int, int]] = []
            for p in group.params:
                offset = flat.offset_of(p)
                if spans and sum(spans[-1]) == offset:
                    spans[-1] = (spans[-1][0], spans[-1][1] + p.numel())
                else:
                    spans.append((offset, p.numel()))
            groups.append((tuple(spans), group.init_norm))
        return groups

    def state_dict(self) -> dict[str, float]:
        """Initial norms by group name: saved in checkpoints so a resumed run projects to the same norms."""
        return {group.name: group.init_norm for group in self.groups}

    def load_state_dict(self, state: dict[str, float]) -> None:
        names = {group.name for group in self.groups}
        if set(state) != names:
            raise ValueError(f"NaP state has groups {sorted(state)}, this model has {sorted(names)}")
        for group in self.groups:
            group.init_norm = float(state[group.name])
        self._params = None

    @torch.no_grad()
    def layer_stats(self, lr: float, prefix: str = "") -> dict[str, float]:
        """``{"nap/norm/<prefix><layer>": ||W||, "nap/eff_lr/<prefix><layer>": lr / ||W||}`` per linear weight."""
        stats: dict[str, float] = {}
        for name, weight in self.weights:
            norm = float(weight.detach().float().norm())
            stats[f"nap/norm/{prefix}{name}"] = norm
            stats[f"nap/eff_lr/{prefix}{name}"] = lr / max(norm, 1e-12)
        return stats


@torch.no_grad()
def project_spans_(flat: torch.Tensor, groups: Sequence[tuple[Sequence[tuple[int, int]], float]]) -> None:
    """:meth:`NormProjector.project` on a flat parameter vector: each group (its spans, from
    :meth:`NormProjector.flat_spans`) rescaled together to its initial norm.

    ``flat`` is written once, rebuilt from its scaled spans and the unscaled gaps between them. Inside
    ``torch.compile`` an in-place multiply per span would become a chain of slice scatters, which
    inductor fuses into passes over the vector that test every span at every element (a sixth of
    PPO-NaP's compiled minibatch step on the CPU, ``benchmarks/README.md``); one copy is cheap."""
    scaled: list[tuple[int, int, torch.Tensor]] = []
    for spans, init_norm in groups:
        parts = [flat[offset : offset + length] for offset, length in spans]
        norm = torch.stack([torch.linalg.vector_norm(part.float()) for part in parts]).norm()
        scale = init_norm / norm.clamp_min(1e-12)
        scaled += [(offset, length, scale) for offset, length in spans]
    if not scaled:
        return
    pieces, position = [], 0
    for offset, length, scale in sorted(scaled, key=lambda span: span[0]):
        if offset < position:
            raise ValueError(f"project_spans_: the span at {offset} overlaps the one before it (ending at {position})")
        if offset > position:
            pieces.append(flat[position:offset])
        pieces.append(flat[offset : offset + length] * scale)
        position = offset + length
    if position < flat.numel():
        pieces.append(flat[position:])
    flat.copy_(torch.cat(pieces))
