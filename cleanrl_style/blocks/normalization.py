"""Running statistics that are part of the model: observation and return normalization.

Both are ``nn.Module`` buffers, so ``state_dict()`` saves them with the networks and a checkpoint
restores them for evaluation (CleanRL and SB3 lose them; evaluation then sees raw observations).
"""

from __future__ import annotations

import torch
from torch import nn


class RunningNorm(nn.Module):
    """Per-dimension running mean/variance, merged batch by batch with the parallel (Chan) update.

    With batch mean ``mb``, variance ``vb`` (population), count ``nb`` and running ``(m, v, n)``::

        d = mb - m;  n' = n + nb;  m' = m + d * nb / n'
        v' = (v * n + vb * nb + d^2 * n * nb / n') / n'

    starting from ``m = 0, v = 1, n = 1e-4``. ``forward`` returns ``(x - m) / sqrt(v + eps)``,
    optionally clipped. ``update`` changes the statistics only in training mode (``module.train()``);
    in evaluation mode they are frozen.

    Statistics are kept in float64 so that millions of merges do not drift.
    """

    mean: torch.Tensor  # buffers (registered in __init__)
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: int | tuple[int, ...], eps: float = 1e-8, clip: float | None = None):
        super().__init__()
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.eps = eps
        self.clip = clip
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge a batch ``x`` of shape ``(batch, *shape)`` into the statistics (training mode only)."""
        if not self.training:
            return
        x = x.reshape(-1, *self.mean.shape).to(torch.float64)
        batch_count = x.shape[0]
        if batch_count == 0:
            return
        batch_mean = x.mean(dim=0)
        # The centred mean of squares, not x.var(dim=0): torch's variance kernel costs ~4x more on a
        # small batch, and this runs on every environment step.
        centred = x - batch_mean
        batch_var = (centred * centred).mean(dim=0)
        delta = batch_mean - self.mean
        total = self.count + batch_count
        self.mean += delta * batch_count / total
        self.var.copy_((self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total) / total)
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = self.mean.to(x.dtype)
        std = torch.sqrt(self.var + self.eps).to(x.dtype)
        out = (x - mean) / std
        if self.clip is not None:
            out = out.clamp(-self.clip, self.clip)
        return out


class RewardScaler(nn.Module):
    """Scales rewards by the running std of the discounted return (Gymnasium's NormalizeReward).

    Keeps one discounted return per sub-environment, ``G = gamma * G * (1 - done) + r``, feeds it
    to a scalar :class:`RunningNorm` and returns ``r / sqrt(var(G) + eps)``, optionally clipped.
    Part of the checkpoint like the observation statistics.
    """

    discounted_return: torch.Tensor  # a buffer (registered in __init__)

    def __init__(self, num_envs: int, gamma: float, clip: float | None = 10.0, eps: float = 1e-8):
        super().__init__()
        self.gamma = gamma
        self.clip = clip
        self.eps = eps
        self.return_stats = RunningNorm(())
        self.register_buffer("discounted_return", torch.zeros(num_envs, dtype=torch.float64))

    @torch.no_grad()
    def forward(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        """``reward``/``done`` ``(num_envs,)`` from one vector step; ``done`` ends the return after it."""
        self.discounted_return.mul_(self.gamma).add_(reward.to(torch.float64))
        self.return_stats.update(self.discounted_return)
        self.discounted_return.masked_fill_(done.to(self.discounted_return.device), 0.0)
        scaled = reward / torch.sqrt(self.return_stats.var + self.eps).to(reward.dtype)
        if self.clip is not None:
            scaled = scaled.clamp(-self.clip, self.clip)
        return scaled
