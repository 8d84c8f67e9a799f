"""Checkpoints that survive a killed run: atomic writes and full RNG state."""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

CHECKPOINT_NAME = "checkpoint.pt"


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Write ``state`` with ``torch.save`` atomically: to a temporary file, fsync, then rename.

    A run killed mid-write leaves the previous checkpoint intact, never a truncated one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        path = path / CHECKPOINT_NAME
    if not path.exists():
        raise FileNotFoundError(
            f"No checkpoint at {path}. A run writes {CHECKPOINT_NAME} into its folder under runs/ "
            "at every --checkpoint-every interval; pass that run folder."
        )
    # weights_only=False: the checkpoint holds RNG states and argument dicts, written by this suite.
    return torch.load(path, map_location=map_location, weights_only=False)


def rng_states() -> dict[str, Any]:
    """Python, NumPy and torch RNG states, to put in a checkpoint."""
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "torch_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if states.get("torch_cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["torch_cuda"])


def seed_everything(seed: int, deterministic: bool = True) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = deterministic
