"""Everything a single-file agent needs that is not its algorithm, written once.

The package has four rooms (CONTRIBUTING, "Layout"): ``blocks`` (the building blocks of networks
and updates), ``runs`` (the plumbing of one run), ``experiments`` (sweeps, recipes, results,
plots) and ``llm`` (the language-model plumbing). A control agent imports what it uses from here::

    from cleanrl_style import Run, RunArgs, NormProjector, Ensemble, ReplayBuffer, require
"""

from cleanrl_style.blocks.compiling import compile_or_eager
from cleanrl_style.blocks.ensemble import Ensemble
from cleanrl_style.blocks.flat_params import FlatParameters
from cleanrl_style.blocks.functional_adam import adam_hyperparameters, adam_state, adam_step_, adam_tensors, every_tensor
from cleanrl_style.blocks.layers import MlpEncoder, SimbaBlock, SimbaEncoder, layer_init, mlp
from cleanrl_style.blocks.nap import NormProjector, project_spans_
from cleanrl_style.blocks.normalization import RewardScaler, RunningNorm
from cleanrl_style.blocks.replay import (
    Batch,
    FadingReplayBuffer,
    ReplayBuffer,
    buffer_checkpoint,
    fading_tanh,
    restore_buffer,
)
from cleanrl_style.blocks.sorting import sort_rows
from cleanrl_style.runs.checkpoint import load_checkpoint, save_checkpoint
from cleanrl_style.runs.cli import args_from_dict, check_range, require
from cleanrl_style.runs.episodes import EpisodeStats
from cleanrl_style.runs.run import BaseRunArgs, Run, RunArgs

__all__ = [
    "BaseRunArgs",
    "Batch",
    "Ensemble",
    "EpisodeStats",
    "FadingReplayBuffer",
    "FlatParameters",
    "NormProjector",
    "ReplayBuffer",
    "RewardScaler",
    "Run",
    "RunArgs",
    "RunningNorm",
    "MlpEncoder",
    "adam_hyperparameters",
    "adam_state",
    "adam_step_",
    "adam_tensors",
    "SimbaBlock",
    "SimbaEncoder",
    "args_from_dict",
    "buffer_checkpoint",
    "check_range",
    "every_tensor",
    "compile_or_eager",
    "fading_tanh",
    "layer_init",
    "load_checkpoint",
    "mlp",
    "project_spans_",
    "require",
    "restore_buffer",
    "save_checkpoint",
    "sort_rows",
]
