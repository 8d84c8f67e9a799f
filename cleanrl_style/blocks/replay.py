"""Replay storage for the off-policy agents, on torch tensors on the training device.

One transition per sub-environment per vector step. What makes targets correct:

- ``next_obs`` is the observation the step really reached. With same-step autoreset the ``obs``
  returned by ``step`` already belongs to the next episode for finished sub-environments, so
  pass ``info["final_obs"]`` (equal to ``obs`` where nothing finished).
- ``terminated`` and ``truncated`` are stored separately. A target bootstraps unless the episode
  *terminated*: a time limit (truncation) is not a terminal state, and ``next_obs`` is then the
  true last observation to bootstrap from.

Two samplers: uniform (:class:`ReplayBuffer`) and the Fading sampler of Symphony
(:class:`FadingReplayBuffer`), which draws transitions with probability proportional to a weight
of their age, ``w(u)`` with ``u = i / n`` for the ``i``-th oldest of the ``n`` stored transitions.
The weight function is an argument, so another shape (e.g. a bell) is one function.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Batch:
    """A sampled minibatch; ``B`` transitions, every tensor on the buffer's device."""

    obs: torch.Tensor  # (B, *obs_shape)
    actions: torch.Tensor  # (B, *action_shape)
    rewards: torch.Tensor  # (B,)
    next_obs: torch.Tensor  # (B, *obs_shape), the true next observation (final_obs at episode ends)
    terminated: torch.Tensor  # (B,) float, 1.0 where the episode terminated: no bootstrap
    truncated: torch.Tensor  # (B,) float, 1.0 where a time limit cut the episode: bootstrap


class ReplayBuffer:
    """Circular transition storage with uniform sampling (with replacement).

    Args:
        capacity: transitions kept; the oldest are overwritten first.
        obs_shape, action_shape: shapes of one observation / action.
        device: where the storage and the sampled batches live (the training device).
    """

    FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated", "truncated")

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        device: str | torch.device = "cpu",
        obs_dtype: torch.dtype = torch.float32,
    ):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.device = torch.device(device)
        self.obs = torch.zeros((capacity, *obs_shape), dtype=obs_dtype, device=self.device)
        self.next_obs = torch.zeros((capacity, *obs_shape), dtype=obs_dtype, device=self.device)
        self.actions = torch.zeros((capacity, *action_shape), dtype=torch.float32, device=self.device)
        self.rewards = torch.zeros(capacity, dtype=torch.float32, device=self.device)
        self.terminated = torch.zeros(capacity, dtype=torch.float32, device=self.device)
        self.truncated = torch.zeros(capacity, dtype=torch.float32, device=self.device)
        self.pos = 0  # next slot to write
        self.size = 0

    def __len__(self) -> int:
        return self.size

    @torch.no_grad()
    def add(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
    ) -> None:
        """Store one vector step: every argument has a leading ``num_envs`` dimension.

        ``next_obs`` must be ``info["final_obs"]``, not the (already reset) observation.
        """
        n = obs.shape[0]
        if n > self.capacity:
            raise ValueError(f"a vector step of {n} transitions does not fit a buffer of {self.capacity}")
        idx = (self.pos + torch.arange(n, device=self.device)) % self.capacity
        self.obs[idx] = obs.to(self.device, self.obs.dtype)
        self.next_obs[idx] = next_obs.to(self.device, self.next_obs.dtype)
        self.actions[idx] = actions.to(self.device, torch.float32)
        self.rewards[idx] = rewards.to(self.device, torch.float32)
        self.terminated[idx] = terminated.to(self.device, torch.float32)
        self.truncated[idx] = truncated.to(self.device, torch.float32)
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def storage_index(self, rank: torch.Tensor) -> torch.Tensor:
        """Storage slots of the transitions of age rank ``rank`` (0 the oldest stored)."""
        start = self.pos if self.size == self.capacity else 0
        return (start + rank) % self.capacity

    def chronological(self) -> torch.Tensor:
        """Storage indices of the stored transitions, oldest first, shape ``(len(self),)``."""
        return self.storage_index(torch.arange(self.size, device=self.device))

    def _gather(self, idx: torch.Tensor) -> Batch:
        return Batch(*(getattr(self, name)[idx] for name in self.FIELDS))

    def sample(self, batch_size: int) -> Batch:
        """``batch_size`` transitions drawn uniformly with replacement."""
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        return self._gather(torch.randint(0, self.size, (batch_size,), device=self.device))

    @torch.no_grad()
    def fill_by_repeating(self) -> None:
        """Fill the whole capacity with copies of the stored transitions, keeping their order.

        Symphony's warm-up: a short exploration phase replicated to the buffer's size, so the
        age-weighted sampler starts from a full buffer whose oldest copies fade first.
        """
        if self.size == 0:
            raise RuntimeError("nothing to repeat: the buffer is empty")
        order = self.chronological()
        reps = torch.arange(self.capacity, device=self.device) % self.size
        src = order[reps]
        for name in self.FIELDS:
            field = getattr(self, name)
            field.copy_(field[src])
        # The last write was the newest transition; the next write overwrites the oldest copy.
        self.pos, self.size = 0, self.capacity

    def state_dict(self) -> dict[str, Any]:
        """The stored transitions in chronological order (only the filled part), for checkpoints."""
        order = self.chronological()
        state: dict[str, Any] = {name: getattr(self, name)[order].clone() for name in self.FIELDS}
        state["capacity"] = self.capacity
        return state

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, Any]) -> None:
        size = state["obs"].shape[0]
        if size > self.capacity:
            raise ValueError(f"saved buffer holds {size} transitions, more than this buffer's capacity {self.capacity}")
        for name in self.FIELDS:
            getattr(self, name)[:size] = state[name].to(self.device)
        self.size = size
        self.pos = size % self.capacity


def restore_buffer(checkpoint: dict[str, Any] | None, buffer: ReplayBuffer) -> bool:
    """Load a checkpoint's replay data into ``buffer``; False if there is none to load.

    A run saves its buffer only with ``--save-buffer`` (large files); one resumed without it starts
    from an empty buffer and must collect a new warm-up before it updates again.
    """
    if checkpoint is None or "buffer" not in checkpoint:
        return False
    buffer.load_state_dict(checkpoint["buffer"])
    return True


def buffer_checkpoint(buffer: ReplayBuffer, save: bool) -> dict[str, Any]:
    """The checkpoint entry for ``buffer`` (``{"buffer": ...}``) if ``save``, else nothing."""
    return {"buffer": buffer.state_dict()} if save else {}


def fading_tanh(u: torch.Tensor) -> torch.Tensor:
    """Symphony's fading weight ``tanh((pi * u) ** e)`` of the relative age ``u`` (0 oldest, 1 newest).

    About 0.27 at u = 0.2, 0.69 at 0.3, 0.95 at 0.4, then nearly 1: the oldest ~40% fade out.
    """
    return torch.tanh((math.pi * u) ** math.e)


class FadingReplayBuffer(ReplayBuffer):
    """Replay whose sampling probability depends on age: ``P(i) = w(i / n) / sum_j w(j / n)``.

    ``i`` counts the ``n`` stored transitions from the oldest (0) to the newest (n - 1), with
    replacement. ``weight_fn`` maps relative ages ``u`` in [0, 1) to non-negative weights;
    the default is :func:`fading_tanh`.

    ``keep_terminals``: the replay order of Symphony's official S3 code. There a full buffer drops
    its oldest transition on each add unless that one is terminal: a terminal oldest transition
    moves to the newest end, behind the one just added, and the second-oldest is dropped instead.
    A terminal transition then leaves only when it is second-oldest behind a terminal one, so they
    pile up, and each pass through the buffer brings them back to the newest end, where the fading
    weight draws them most. Off (the default), the oldest is dropped whatever it is.
    """

    def __init__(
        self,
        *args,
        weight_fn: Callable[[torch.Tensor], torch.Tensor] = fading_tanh,
        keep_terminals: bool = False,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        if keep_terminals and self.capacity < 2:
            raise ValueError(f"keep_terminals needs a capacity of 2 or more, got {self.capacity}")
        self.weight_fn = weight_fn
        self.keep_terminals = keep_terminals
        self._cdf_size = -1
        self._cdf = torch.empty(0, device=self.device)

    def add(self, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        # No decorator (the base add has torch.no_grad): the recycled rows are copies of storage, which
        # needs no gradient, and an undecorated method stays in reach of mutation testing.
        if not self.keep_terminals:
            return super().add(obs, actions, rewards, next_obs, terminated, truncated)
        fields = (obs, actions, rewards, next_obs, terminated, truncated)
        for i in range(obs.shape[0]):  # one transition at a time: each add may recycle the oldest
            recycled = None
            if self.size == self.capacity and self.terminated[self.pos] > 0:
                recycled = {name: getattr(self, name)[self.pos].clone() for name in self.FIELDS}
            super().add(*(field[i : i + 1] for field in fields))  # overwrites the oldest slot
            if recycled is not None:  # the second-oldest slot takes the terminal one: newest end
                for name, value in recycled.items():
                    getattr(self, name)[self.pos] = value
                self.pos = (self.pos + 1) % self.capacity

    def weights(self, n: int | None = None) -> torch.Tensor:
        """Unnormalized weights of ``n`` stored transitions (default: those stored), oldest first, shape ``(n,)``."""
        n = self.size if n is None else n
        u = torch.arange(n, device=self.device, dtype=torch.float64) / n
        return self.weight_fn(u)

    def probabilities(self) -> torch.Tensor:
        w = self.weights()
        return w / w.sum()

    def newest_share(self, newest: int) -> float:
        """Share of the sampling probability a full buffer gives its ``newest`` transitions.

        Symphony replicates its warm-up to fill the buffer: this is the share of batches drawn
        from the transitions collected after it, once ``newest`` of them have been stored.
        """
        w = self.weights(self.capacity)
        return float(w[self.capacity - min(max(newest, 0), self.capacity) :].sum() / w.sum())

    def sample(self, batch_size: int) -> Batch:
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        if self._cdf_size != self.size:  # the weights depend on the fill level only: cache them
            cdf = torch.cumsum(self.weights(), 0)
            self._cdf, self._cdf_size = cdf / cdf[-1], self.size
        # Inverse-CDF sampling: O(batch log n) per draw instead of multinomial's O(n).
        draws = torch.rand(batch_size, device=self.device, dtype=torch.float64)
        rank = torch.searchsorted(self._cdf, draws, right=True).clamp_max(self.size - 1)
        return self._gather(self.storage_index(rank))
