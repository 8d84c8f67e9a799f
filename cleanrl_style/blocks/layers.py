"""Network building blocks: MLPs with LayerNorm before each nonlinearity, and the SimBa encoder."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn


def layer_init(layer: nn.Linear, gain: float = math.sqrt(2), bias: float = 0.0) -> nn.Linear:
    """Orthogonal weights with ``gain`` and constant bias (the PPO initialization)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, bias)
    return layer


def mlp(
    in_dim: int,
    hidden: Sequence[int],
    out_dim: int,
    activation: Callable[[], nn.Module] = nn.Tanh,
    layer_norm: bool = True,
    hidden_gain: float = math.sqrt(2),
    output_gain: float = 1.0,
) -> nn.Sequential:
    """``Linear -> [LayerNorm] -> activation`` per hidden width, then a linear output layer.

    LayerNorm sits between each hidden linear layer and its nonlinearity, the placement NaP assumes
    (the function is then invariant to the scale of the weights feeding each normalized unit).
    Hidden layers get orthogonal init with ``hidden_gain``, the output layer with ``output_gain``.
    Input ``(batch, in_dim)`` -> output ``(batch, out_dim)``.
    """
    layers: list[nn.Module] = []
    width = in_dim
    for h in hidden:
        layers.append(layer_init(nn.Linear(width, h), hidden_gain))
        if layer_norm:
            layers.append(nn.LayerNorm(h))
        layers.append(activation())
        width = h
    layers.append(layer_init(nn.Linear(width, out_dim), output_gain))
    return nn.Sequential(*layers)


class SimbaBlock(nn.Module):
    """Pre-LN residual block of SimBa: ``h + W2(ReLU(W1(LayerNorm(h))))``, W1: d->4d, W2: 4d->d.

    W1 and W2 use He-normal (Kaiming) initialization with zero biases.
    """

    def __init__(self, dim: int, expansion: int = 4):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, expansion * dim)
        self.fc2 = nn.Linear(expansion * dim, dim)
        for fc in (self.fc1, self.fc2):
            nn.init.kaiming_normal_(fc.weight, nonlinearity="relu")
            nn.init.zeros_(fc.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.fc2(torch.relu(self.fc1(self.norm(h))))


class SimbaEncoder(nn.Module):
    """SimBa encoder: ``Linear(in, d)`` (orthogonal, gain 1), ``num_blocks`` residual blocks, LayerNorm.

    Observation normalization (:class:`~cleanrl_style.blocks.normalization.RunningNorm`) is applied by the
    caller before the encoder, so the statistics can be shared and updated once per env step.
    Input ``(batch, in_dim)`` -> ``(batch, hidden_dim)``.
    """

    def __init__(self, in_dim: int, hidden_dim: int, num_blocks: int):
        super().__init__()
        self.embed = layer_init(nn.Linear(in_dim, hidden_dim), gain=1.0)
        self.blocks = nn.Sequential(*[SimbaBlock(hidden_dim) for _ in range(num_blocks)])
        self.final_norm = nn.LayerNorm(hidden_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.final_norm(self.blocks(self.embed(x)))


class MlpEncoder(nn.Module):
    """The plain-MLP counterpart of :class:`SimbaEncoder`, the baseline of SimBa's scaling claim: the
    same linear layers and initializations (``Linear(in, d)``, then per block ``d -> 4d -> d``), each
    followed by a ReLU, with no residual path and no LayerNorm. Input ``(batch, in_dim)`` ->
    ``(batch, hidden_dim)``."""

    def __init__(self, in_dim: int, hidden_dim: int, num_blocks: int, expansion: int = 4):
        super().__init__()
        layers: list[nn.Module] = [layer_init(nn.Linear(in_dim, hidden_dim), gain=1.0), nn.ReLU()]
        for _ in range(num_blocks):
            for fan_in, fan_out in ((hidden_dim, expansion * hidden_dim), (expansion * hidden_dim, hidden_dim)):
                fc = nn.Linear(fan_in, fan_out)
                nn.init.kaiming_normal_(fc.weight, nonlinearity="relu")
                nn.init.zeros_(fc.bias)
                layers += [fc, nn.ReLU()]
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
