"""Shared plumbing of the single-file agents: normalization layers, NaP, logging, checkpoints, evaluation.

What is the algorithm stays in ``agents/<name>.py``; what is not lives here, written once.
"""

from cleanrl_style.checkpoint import load_checkpoint, save_checkpoint
from cleanrl_style.cli import args_from_dict
from cleanrl_style.compiling import compile_or_eager
from cleanrl_style.episodes import EpisodeStats
from cleanrl_style.flat_params import FlatParameters
from cleanrl_style.layers import SimbaBlock, SimbaEncoder, layer_init, mlp
from cleanrl_style.nap import NormProjector
from cleanrl_style.normalization import RewardScaler, RunningNorm
from cleanrl_style.run import BaseRunArgs, Run, RunArgs

__all__ = [
    "BaseRunArgs",
    "EpisodeStats",
    "FlatParameters",
    "NormProjector",
    "RewardScaler",
    "Run",
    "RunArgs",
    "RunningNorm",
    "SimbaBlock",
    "SimbaEncoder",
    "args_from_dict",
    "compile_or_eager",
    "layer_init",
    "load_checkpoint",
    "mlp",
    "save_checkpoint",
]
