"""What every training run needs besides its algorithm: arguments, folder, logs, checkpoints, resume.

An agent's ``Args`` dataclass extends :class:`RunArgs` (vector-env agents) or :class:`BaseRunArgs`; the agent then does::

    args = tyro.cli(Args)
    run = Run(args, agent_file=__file__)     # resolves --resume, seeds, opens logs
    ...
    if run.checkpoint: restore from run.checkpoint (its "global_step", models, optimizers...)
    ...
    run.log(global_step, {...}); run.progress(global_step, recent_return)
    run.save(global_step, model=..., optimizer=...)   # atomic, adds RNG states, args, elapsed
    run.close()
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cleanrl_style.checkpoint import (
    CHECKPOINT_NAME,
    load_checkpoint,
    rng_states,
    save_checkpoint,
    seed_everything,
    set_rng_states,
)
from cleanrl_style.logger import RunLogger, read_progress

RUNS_DIR = Path(os.environ.get("CLEANRL_STYLE_RUNS", "runs"))


@dataclass
class BaseRunArgs:
    """Plumbing flags shared by every agent (the algorithm's own flags live in the agent file)."""

    env: str = "Humanoid"
    """environment: a short name (Humanoid, Ant, Hopper, ...) or any registered Gymnasium id"""
    seed: int = 1
    """seed of the run (environments, networks, sampling)"""
    total_timesteps: int = 1_000_000
    """total environment steps, summed over sub-environments"""
    device: str = "cpu"
    """torch device for the networks and the environment tensors (cpu, cuda, cuda:1, ...)"""
    torch_threads: int = 1
    """torch CPU threads (0: torch's default). One is fastest for small networks: more threads
    oversubscribe the cores the environments need and slow an update by 10x or more"""
    exp_name: str = ""
    """experiment name in the run folder's name; default: the agent file's name"""
    run_dir: str = ""
    """write the run here instead of runs/<env>__<exp_name>__<seed>__<time>"""
    resume: str = ""
    """continue the killed or finished run in this folder (runs/<run>) from its last checkpoint, with its saved arguments"""
    checkpoint_every: int = 50_000
    """write a checkpoint every this many environment steps (and at the end)"""
    eval_episodes: int = 10
    """deterministic evaluation episodes at the end of training (0 to skip)"""
    track: bool = False
    """also log to Weights & Biases"""
    wandb_project: str = "cleanrl-style"
    """Weights & Biases project, with --track"""
    progress_bar: bool = True
    """show a progress bar on the terminal"""


@dataclass
class RunArgs(BaseRunArgs):
    """The flags of the agents on vector environments (``envs.make``)."""

    num_envs: int = 1
    """number of parallel sub-environments"""
    backend: str = "auto"
    """vector-env backend: auto (the fastest that supports the env), gymnasium, mujoco, envpool, warp"""


def args_from_dict(args_class: type, saved: dict[str, Any]) -> Any:
    """Rebuild an agent's ``Args`` from its JSON/checkpoint form (JSON turns tuples into lists)."""
    return args_class(**{k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()})


def _args_from_saved(args: Any, run_dir: Path) -> Any:
    saved = json.loads((run_dir / "args.json").read_text())
    fields = {f.name for f in dataclasses.fields(args)}
    unknown = set(saved) - fields
    if unknown:
        raise ValueError(f"{run_dir}/args.json has arguments this agent does not know: {sorted(unknown)}")
    saved = {k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()}
    return dataclasses.replace(args, **{**saved, "resume": args.resume, "progress_bar": args.progress_bar})


class Run:
    """One training run: folder, seeding, logger, progress bar, checkpoint save/restore."""

    def __init__(self, args: Any, agent_file: str):
        self.agent_file = os.path.abspath(agent_file)
        self.checkpoint: dict[str, Any] | None = None
        if args.resume:
            self.dir = Path(args.resume)
            if not (self.dir / "args.json").exists():
                raise FileNotFoundError(
                    f"--resume {args.resume}: no args.json there. Pass the folder of an earlier run, e.g. runs/<run>."
                )
            args = _args_from_saved(args, self.dir)
            if (self.dir / CHECKPOINT_NAME).exists():
                self.checkpoint = load_checkpoint(self.dir / CHECKPOINT_NAME, map_location=args.device)
        else:
            if not args.exp_name:
                args = dataclasses.replace(args, exp_name=Path(agent_file).stem)
            env_name = re.sub(r"[:/ ]", "-", args.env)  # module:EnvId, text/ToolUse-v0, tools:bank
            name = f"{env_name}__{args.exp_name}__{args.seed}__{int(time.time())}"
            self.dir = Path(args.run_dir) if args.run_dir else RUNS_DIR / name
            if (self.dir / CHECKPOINT_NAME).exists():
                raise FileExistsError(
                    f"{self.dir} already holds a run; pass --resume {self.dir} to continue it, or another --run-dir."
                )
        self.args = args
        self.name = self.dir.name
        if args.torch_threads > 0:
            torch.set_num_threads(args.torch_threads)
        seed_everything(args.seed)
        self.start_step = 0
        elapsed = 0.0
        if self.checkpoint is not None:
            set_rng_states(self.checkpoint["rng"])
            self.start_step = int(self.checkpoint["global_step"])
            elapsed = float(self.checkpoint.get("elapsed", 0.0))
        self.logger = RunLogger(
            self.dir,
            dataclasses.asdict(args),
            resume_step=self.start_step if args.resume else None,
            elapsed=elapsed,
            track=args.track,
            wandb_project=args.wandb_project,
        )
        self._bar = None
        if args.progress_bar:
            from tqdm import tqdm

            self._bar = tqdm(
                total=args.total_timesteps, initial=self.start_step, unit="step", dynamic_ncols=True, disable=None
            )
        self._last_checkpoint_step = self.start_step
        self._sps_mark = (time.time(), self.start_step)

    @property
    def device(self) -> torch.device:
        return torch.device(self.args.device)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.logger.log(step, metrics)

    def sps(self, step: int) -> float:
        """Environment steps per second since the previous call."""
        now = time.time()
        then, then_step = self._sps_mark
        self._sps_mark = (now, step)
        return (step - then_step) / max(now - then, 1e-9)

    def progress(self, step: int, recent_return: float | None = None, sps: float | None = None) -> None:
        if self._bar is None:
            return
        self._bar.update(step - self._bar.n)
        postfix = {}
        if sps is not None:
            postfix["SPS"] = f"{sps:,.0f}"
        if recent_return is not None:
            postfix["return"] = f"{recent_return:.1f}"
        if postfix:
            self._bar.set_postfix(postfix, refresh=False)

    def save(self, global_step: int, **state: Any) -> None:
        """Checkpoint ``state`` (state dicts, tensors) with RNG states, args, step and elapsed time."""
        save_checkpoint(
            self.dir / CHECKPOINT_NAME,
            {
                **state,
                "global_step": global_step,
                "elapsed": self.logger.elapsed,
                "rng": rng_states(),
                "args": dataclasses.asdict(self.args),
                "agent_file": self.agent_file,
            },
        )
        self._last_checkpoint_step = global_step

    def checkpoint_due(self, global_step: int) -> bool:
        return global_step - self._last_checkpoint_step >= self.args.checkpoint_every

    def final_evaluation(self, policy: torch.nn.Module, global_step: int) -> None:
        """Deterministic evaluation at the end of training (``--eval-episodes``), logged as ``eval/*``.

        ``policy.act(obs)`` gives actions for raw observations; ``policy.eval()`` freezes its
        normalizer statistics. A resumed run that had already evaluated does not log it twice.
        """
        episodes = self.args.eval_episodes
        if episodes <= 0:
            return
        done_before = [v for s, _, v in read_progress(self.dir).get("eval/return_mean", []) if s == global_step]
        if done_before:
            print(f"already evaluated at step {global_step}: return {done_before[-1]:.1f}")
            return
        from cleanrl_style.evaluate import evaluate_policy

        policy.eval()
        returns = evaluate_policy(policy.act, self.args.env, episodes, seed=self.args.seed + 10_000, device=self.device)
        self.log(global_step, {"eval/return_mean": returns.mean(), "eval/return_std": returns.std()})
        print(f"evaluation over {episodes} episodes: {returns.mean():.1f} +- {returns.std():.1f}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        self.logger.close()
