"""Finished episodes' statistics, as every control agent logs them.

The vector env reports a finished episode's return and length in ``info`` at the step it ends
(``info["done"]``, ``info["episode_return"]``, ``info["episode_length"]``). :class:`EpisodeStats`
gathers them between two log points and keeps a window of the most recent returns for the
progress display.
"""

from __future__ import annotations

from collections import deque

import torch


class EpisodeStats:
    """Returns and lengths of the episodes finished since the last :meth:`metrics` call, and a recent window."""

    def __init__(self, window: int = 20):
        self._returns: list[torch.Tensor] = []
        self._lengths: list[torch.Tensor] = []
        self._recent: deque[float] = deque(maxlen=window)

    def add(self, info: dict) -> bool:
        """Record the episodes that finished at this step; True if any did."""
        done = info["done"]
        if not done.any():
            return False
        returns = info["episode_return"][done]
        self._returns.append(returns)
        self._lengths.append(info["episode_length"][done])
        self._recent.extend(returns.tolist())
        return True

    def metrics(self) -> dict[str, float]:
        """``charts/episodic_return`` and ``charts/episodic_length``, means over the episodes recorded
        since the previous call (empty if none finished); the pending episodes are then cleared."""
        if not self._returns:
            return {}
        out = {
            "charts/episodic_return": torch.cat(self._returns).float().mean().item(),
            "charts/episodic_length": torch.cat(self._lengths).float().mean().item(),
        }
        self._returns.clear()
        self._lengths.clear()
        return out

    @property
    def recent_return(self) -> float | None:
        """Mean return of the last ``window`` finished episodes (None before the first)."""
        return sum(self._recent) / len(self._recent) if self._recent else None
