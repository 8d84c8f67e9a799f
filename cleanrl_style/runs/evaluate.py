"""Deterministic evaluation of a trained run, with the normalizer statistics it was trained with.

    python -m cleanrl_style.runs.evaluate runs/<run> [--episodes 10] [--seed 12345] [--capture-video]

Every continuous-control agent file defines ``Args`` and ``make_agent(args, vec_env)``, which builds
its model for an env; the model's ``act(obs)`` gives the deterministic action (observation
normalization included, frozen in ``eval()`` mode). The checkpoint records which agent file wrote
it, its arguments and the model's state (``checkpoint["agent"]``), so :func:`load_policy` rebuilds
any agent's policy the same way.

``--capture-video`` also films the first ``--video-episodes`` evaluation episodes into
``runs/<run>/videos/`` (see :mod:`cleanrl_style.runs.video`).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import tyro

import envs
from cleanrl_style.runs.checkpoint import load_checkpoint
from cleanrl_style.runs.cli import UsageError, action_repeat_of, args_from_dict, require

if TYPE_CHECKING:
    from cleanrl_style.runs.video import Episode

REPO_ROOT = Path(__file__).resolve().parents[2]


@torch.no_grad()
def evaluate_policy(
    act: Callable[[torch.Tensor], torch.Tensor],
    env_id: str,
    episodes: int = 10,
    seed: int = 12345,
    backend: str = "gymnasium",
    device: str | torch.device = "cpu",
    action_repeat: int = 1,
) -> np.ndarray:
    """Return the undiscounted returns of ``episodes`` episodes, shape ``(episodes,)``.

    One sub-environment per episode, each counted once: counting the first ``episodes`` episodes
    to finish would favour short (often failed) episodes. ``action_repeat``: the policy acts every
    that many simulator steps, as it did in training (``--action-repeat``).
    """
    vec = envs.make(env_id, num_envs=episodes, backend=backend, device=device, seed=seed, action_repeat=action_repeat)
    returns = torch.full((episodes,), float("nan"))
    obs, _ = vec.reset()
    try:
        while torch.isnan(returns).any():
            obs, _, _, _, info = vec.step(act(obs))
            first_finish = info["done"].cpu() & torch.isnan(returns)
            returns[first_finish] = info["episode_return"].cpu()[first_finish]
    finally:
        vec.close()
    return returns.numpy()


def import_agent(agent_file: str):
    """Import an agent script as a module (its training loop sits under ``__main__`` and does not run)."""
    path = Path(agent_file)
    if not path.exists():  # the repository moved since training: look in this checkout's agents/
        path = REPO_ROOT / "agents" / path.name
    spec = importlib.util.spec_from_file_location(f"agent_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    # Registered before running it: dataclasses look their module up in sys.modules.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    if not hasattr(module, "make_agent"):
        raise AttributeError(f"{path} defines no make_agent(args, vec_env); it cannot be evaluated here.")
    return module


def load_policy(agent_module, checkpoint: dict, vec_env: envs.TorchVectorEnv) -> torch.nn.Module:
    """The trained model of ``checkpoint``, rebuilt by its agent file's ``make_agent`` for ``vec_env``."""
    args = args_from_dict(agent_module.Args, checkpoint["args"])
    policy = agent_module.make_agent(args, vec_env)
    policy.load_state_dict(checkpoint["agent"])
    return policy


def load_run_policy(run_dir: str, device: str = "cpu", trust: bool = False):
    """The run's saved policy (normalizer statistics frozen), its checkpoint, and its env id.

    ``trust``: load a checkpoint that holds more than tensors and plain data (see :func:`load_checkpoint`)."""
    if not Path(run_dir).exists():
        raise UsageError(f"{run_dir}: no such run folder; pass the folder of a run, e.g. runs/<run> (ls runs/)")
    checkpoint = load_checkpoint(run_dir, map_location=device, trust=trust)
    agent = import_agent(checkpoint["agent_file"])
    env_id = checkpoint["args"]["env"]
    probe = envs.make(env_id, num_envs=1, backend="gymnasium", device=device)
    policy = load_policy(agent, checkpoint, probe)
    probe.close()
    policy.eval()  # freezes the running statistics
    return policy, checkpoint, env_id


def evaluate_run(run_dir: str, episodes: int = 10, seed: int = 12345, device: str = "cpu", trust: bool = False) -> np.ndarray:
    policy, checkpoint, env_id = load_run_policy(run_dir, device, trust)
    repeat = action_repeat_of(checkpoint["args"])
    return evaluate_policy(policy.act, env_id, episodes=episodes, seed=seed, device=device, action_repeat=repeat)


def film_run(
    run_dir: str,
    episodes: int = 1,
    seed: int = 12345,
    device: str = "cpu",
    size: tuple[int, int] = (256, 256),
    trust: bool = False,
) -> list[Episode]:
    """MP4s of the first ``episodes`` evaluation episodes under ``<run>/videos/``, also in the run's TensorBoard.

    Episode ``i`` starts from ``seed + i``, the seed of the evaluation's sub-environment ``i``, so it
    is the episode the evaluation scores.
    """
    from torch.utils.tensorboard import SummaryWriter

    from cleanrl_style.runs.video import VideoRecorder, add_to_tensorboard

    policy, checkpoint, env_id = load_run_policy(run_dir, device, trust)
    step = int(checkpoint["global_step"])
    recorder = VideoRecorder(env_id, Path(run_dir) / "videos", *size)
    filmed = []
    writer = SummaryWriter(run_dir)
    try:
        for i in range(episodes):
            path = Path(run_dir) / "videos" / f"eval_step_{step:09d}_seed_{seed + i}.mp4"
            episode = recorder.record(
                policy.act, path, seed=seed + i, device=device, action_repeat=action_repeat_of(checkpoint["args"])
            )
            add_to_tensorboard(writer, f"videos/evaluation_seed_{seed + i}", episode.frames, episode.fps, step)
            filmed.append(episode)
    finally:
        writer.close()
        recorder.close()
    return filmed


@dataclass
class EvaluateArgs:
    run: tyro.conf.Positional[str]
    """the run folder, runs/<run>"""
    episodes: int = 10
    """number of deterministic episodes"""
    seed: int = 12345
    """seed of the evaluation environments (differs from training seeds by default)"""
    device: str = "cpu"
    """torch device"""
    capture_video: bool = False
    """also film evaluation episodes into runs/<run>/videos/ (and the run's TensorBoard)"""
    video_episodes: int = 1
    """with --capture-video: how many of the evaluation episodes to film (the first ones)"""
    video_size: tuple[int, int] = (256, 256)
    """with --capture-video: width and height in pixels (even numbers)"""
    trust_checkpoint: bool = False
    """load a checkpoint that holds Python objects beyond tensors and plain data (as older versions
    wrote), which runs code stored in the file; only for checkpoints you made or trust"""


def main(argv: list[str] | None = None) -> None:
    args = tyro.cli(EvaluateArgs, args=argv, prog="python -m cleanrl_style.runs.evaluate")
    require(args.episodes >= 1, f"--episodes {args.episodes}: must be at least 1")
    if args.capture_video:
        require(args.video_episodes >= 1, f"--video-episodes {args.video_episodes}: must be at least 1")
        from cleanrl_style.runs.video import check_rendering

        check_rendering()  # a machine that cannot render fails before the evaluation, not after
    returns = evaluate_run(args.run, args.episodes, args.seed, args.device, args.trust_checkpoint)
    print(f"{args.run}: return {returns.mean():.1f} +- {returns.std():.1f} over {len(returns)} episodes")
    if args.capture_video:
        for i, episode in enumerate(
            film_run(args.run, args.video_episodes, args.seed, args.device, args.video_size, args.trust_checkpoint)
        ):
            summary = f"{episode.length} steps, return {episode.episode_return:.1f}; evaluation episode {i}"
            print(f"video: {episode.path} ({summary})")


if __name__ == "__main__":
    main(sys.argv[1:])
