"""What every training run needs besides its algorithm: arguments, folder, logs, checkpoints, resume.

An agent's ``Args`` dataclass extends :class:`RunArgs` (vector-env agents) or :class:`BaseRunArgs`; the agent then does::

    args = tyro.cli(Args)
    run = Run(args, agent_file=__file__)     # resolves --resume, seeds, opens logs
    ...
    if run.checkpoint: restore from run.checkpoint (its "global_step", models, optimizers...)
    ...
    run.watch(agent, vec_env)                # the live policy and env, for --capture-video
    run.log(global_step, {...}); run.progress(global_step, recent_return, sps)
    run.save(global_step, model=..., optimizer=...)   # atomic, adds RNG states, args, elapsed
    run.close()
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import re
import shlex
import shutil
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, cast

import torch

from cleanrl_style.runs import provenance
from cleanrl_style.runs.checkpoint import (
    CHECKPOINT_NAME,
    load_checkpoint,
    remove_stale_temporaries,
    rng_states,
    save_checkpoint,
    seed_everything,
    set_rng_states,
)
from cleanrl_style.runs.cli import (
    UsageError,
    action_repeat_of,
    check_args,
    flag,
    forget_on_user_error,
    install_error_handler,
)
from cleanrl_style.runs.logger import CSV_NAME, RunLogger, read_progress
from cleanrl_style.runs.progress import Progress
from cleanrl_style.runs.video import VideoRecorder

LOCK_NAME = ".lock"
install_error_handler()  # agents may meet a user error before their Run (an env looked up early)

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
    """deterministic evaluation episodes at the end of training, and every --eval-every steps (0 to skip)"""
    track: bool = False
    """also log to Weights & Biases"""
    wandb_project: str = "cleanrl-style"
    """Weights & Biases project, with --track"""
    progress_bar: bool = True
    """show a progress bar on the terminal (without one, plain progress lines are printed instead)"""
    progress_every: float = 30.0
    """seconds between two plain progress lines, printed when there is no bar (log files, sweeps); 0: none"""
    trust_checkpoint: bool = False
    """with --resume: also load a checkpoint that holds Python objects beyond tensors and plain data (as
    older versions wrote), which runs code stored in the file; only for checkpoints you made or trust"""
    precision: Literal["fp32", "bf16"] = "fp32"
    """arithmetic of the networks' forward and backward passes: fp32, or bf16 autocast (weights,
    gradients and optimizer state stay float32; on CPUs with AVX-512 BF16 or AMX, and on GPUs)"""

    # Flags a resumed run may change (recorded in its args.json); any other flag that differs
    # from the saved run's is refused. A larger --total-timesteps extends a run.
    resume_may_change: ClassVar[frozenset[str]] = frozenset(
        {"total_timesteps", "checkpoint_every", "eval_episodes", "progress_bar", "progress_every", "torch_threads", "device",
         "backend", "env_threads", "compile", "track", "wandb_project", "capture_video", "video_every", "video_size", "resume",
         "trust_checkpoint", "eval_every"}
    )  # fmt: skip


@dataclass
class RunArgs(BaseRunArgs):
    """The flags of the agents on vector environments (``envs.make``)."""

    num_envs: int = 1
    """number of parallel sub-environments"""
    backend: str = "auto"
    """vector-env backend: auto (the fastest that supports the env), gymnasium, mujoco, envpool, warp"""
    env_threads: int = 0
    """threads that step the sub-environments on the backends with a thread pool (mujoco, envpool);
    0: one per CPU. 1 keeps the physics on one core (for a one-core comparison with a serial peer)"""
    capture_video: bool = False
    """film the deterministic policy into runs/<run>/videos/*.mp4 and TensorBoard: at the start, every
    --video-every training episodes, and at the end (off-screen MuJoCo rendering, MUJOCO_GL=egl by default)"""
    video_every: int = 1000
    """with --capture-video: training episodes (all sub-environments together) between two videos"""
    video_size: tuple[int, int] = (256, 256)
    """with --capture-video: width and height of the videos in pixels (even numbers)"""
    eval_every: int = 0
    """also evaluate the deterministic policy (--eval-episodes episodes, as at the end) every this many
    environment steps during training, logged as eval/return_mean at the step it ran; 0: only at the end"""
    compile: Literal["auto", "on", "off"] = "auto"
    """torch.compile the update step (a one-off compile of 10-60 s at the first update, then cheaper
    updates; falls back to eager with a warning if the toolchain cannot compile). auto: the agent's
    own rule, stated in its docstring"""


def _args_from_saved(args: Any, run_dir: Path) -> Any:
    """The saved run's arguments with the flags given now applied where they may change.

    Given flags are read from the command line (``--resume`` on it) by parsing it again over the
    saved arguments; for a ``Run`` built in code, the fields that differ from their defaults.
    Flags that contradict the saved run are refused, all of them named.
    """
    try:
        saved = json.loads((run_dir / "args.json").read_text())
    except (OSError, ValueError) as error:
        raise UsageError(f"--resume {run_dir}: cannot read its args.json ({error})") from None
    fields = {f.name: f for f in dataclasses.fields(args)}
    unknown = set(saved) - set(fields)
    if unknown:
        raise UsageError(
            f"--resume {run_dir}: its args.json has arguments this agent does not know: {sorted(unknown)}; "
            "resume it with the agent file that started it"
        )
    saved_args = dataclasses.replace(args, **{k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()})
    if any(a == "--resume" or a.startswith("--resume=") for a in sys.argv[1:]):
        import tyro

        given_args = tyro.cli(type(args), args=sys.argv[1:], default=saved_args)
    else:  # built in code: what differs from the defaults was asked for
        defaults = type(args)()
        given_args = dataclasses.replace(
            saved_args, **{n: getattr(args, n) for n in fields if getattr(args, n) != getattr(defaults, n)}
        )
    changed = {n for n in fields if getattr(given_args, n) != getattr(saved_args, n)}
    conflicts = sorted(changed - args.resume_may_change)
    if conflicts:
        listed = ", ".join(f"{flag(n)} {getattr(given_args, n)!r} (saved: {getattr(saved_args, n)!r})" for n in conflicts)
        raise UsageError(
            f"--resume {run_dir}: these flags contradict the saved run: {listed}. A resumed run keeps its "
            f"arguments; drop those flags, or start a new run. Flags a resume may change: "
            f"{', '.join(sorted(flag(n) for n in args.resume_may_change - {'resume'}))}"
        )
    return dataclasses.replace(given_args, resume=args.resume)


def _act(policy: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """The agent model's ``act(obs)`` (a method every agent's model defines; nn.Module does not declare it)."""
    return cast(Callable[[torch.Tensor], torch.Tensor], policy.act)


def _lock_run_directory(run_dir: Path) -> int:
    """Hold an exclusive ``flock`` on the run directory; the kernel releases it when the process dies."""
    fd = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise UsageError(
            f"{run_dir} is in use: another process (pid {holder}) is writing this run. Wait for it to end, "
            "or give this run another --run-dir."
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _make_run_directory(run_dir: Path, what: str) -> list[Path]:
    """Create ``run_dir`` and its missing parents; return the folders this call made, deepest first.

    Each is made with one ``mkdir``, so of two runs started at once on a new folder exactly one
    made it; the other finds it there and never counts it as its own.
    """
    if run_dir.exists() and not run_dir.is_dir():
        raise UsageError(f"{what} {run_dir}: a file, not a folder; give the path of a folder (new, or empty)")
    missing = [d for d in (run_dir, *run_dir.parents) if not d.exists()]
    made = []
    for folder in reversed(missing):
        try:
            os.mkdir(folder)
            made.append(folder)
        except FileExistsError:
            if not folder.is_dir():
                raise UsageError(f"{what} {run_dir}: {folder} is a file, not a folder; choose another path") from None
        except OSError as error:
            raise UsageError(
                f"{what} {run_dir}: cannot be created ({error.strerror}: {folder}); choose a folder you can write to"
            ) from None
    return made[::-1]


def _check_tracking() -> None:
    """--track needs wandb installed; the W&B key itself is wandb.init's to find (RunLogger)."""
    import importlib.util

    if importlib.util.find_spec("wandb") is None:
        raise UsageError("--track needs wandb: pip install wandb (or drop --track)")


class Run:
    """One training run: folder, seeding, logger, progress bar, checkpoint save/restore."""

    def __init__(self, args: Any, agent_file: str):
        install_error_handler()  # user errors from here on: one line, exit status 2
        self.agent_file = os.path.abspath(agent_file)
        self.checkpoint: dict[str, Any] | None = None
        self.checkpointed = False
        self.created_dirs: list[Path] = []  # folders this run made (deepest first); a resume makes none
        self._files_before: set[str] | None = None
        if args.resume:
            self.dir = Path(args.resume)
            if not (self.dir / "args.json").exists():
                raise UsageError(
                    f"--resume {args.resume}: no args.json there. Pass the folder of an earlier run, e.g. runs/<run>."
                )
            saved_json = (self.dir / "args.json").read_text()
            args = _args_from_saved(args, self.dir)
            check_args(args)
            self._lock_fd: int | None = _lock_run_directory(self.dir)
            remove_stale_temporaries(self.dir)
            if not (self.dir / CHECKPOINT_NAME).exists():
                self._release_lock()
                raise UsageError(
                    f"--resume {self.dir}: no checkpoint there (its run ended before its first one, written every "
                    f"--checkpoint-every {args.checkpoint_every} steps), so nothing to resume; start a new run with "
                    f"another --run-dir, or delete the folder (rm -r {shlex.quote(str(self.dir))}) and start again"
                )
            try:
                self.checkpoint = load_checkpoint(
                    self.dir / CHECKPOINT_NAME, map_location=args.device, trust=args.trust_checkpoint
                )
            except UsageError:
                self._release_lock()
                raise
            step = int(self.checkpoint["global_step"])
            if args.total_timesteps < step:
                self._release_lock()
                raise UsageError(
                    f"--total-timesteps {args.total_timesteps}: the run is already at step {step}; "
                    "pass a larger value to extend it, or none to finish it as saved"
                )
            updated_json = json.dumps(dataclasses.asdict(args), indent=2, default=str)
            if json.loads(updated_json) != json.loads(saved_json):  # flags changed on resume are part of the run now
                tmp = self.dir / "args.json.tmp"
                tmp.write_text(updated_json)
                os.replace(tmp, self.dir / "args.json")
        else:
            if not args.exp_name:
                args = dataclasses.replace(args, exp_name=Path(agent_file).stem)
            check_args(args)
            env_name = re.sub(r"[:/ ]", "-", args.env)  # module:EnvId, text/ToolUse-v0, tools:bank
            name = f"{env_name}__{args.exp_name}__{args.seed}__{int(time.time())}"
            self.dir = Path(args.run_dir) if args.run_dir else RUNS_DIR / name
            if args.track:
                _check_tracking()
            what = "--run-dir" if args.run_dir else "run folder"
            self.created_dirs = _make_run_directory(self.dir, what)
            before = set(os.listdir(self.dir))
            # The loser of a start race raises here and so never owns (nor removes) the folder.
            self._lock_fd = _lock_run_directory(self.dir)
            self._refuse_unless_new(self.dir)
            self._files_before = None if self.created_dirs else before
            forget_on_user_error(self)  # from here a user error takes back what this run wrote
            remove_stale_temporaries(self.dir)
        self.args = args
        self.name = self.dir.name
        if args.torch_threads > 0:
            torch.set_num_threads(args.torch_threads)
        seed_everything(args.seed)
        if args.precision == "bf16" and self.device.type == "cpu" and not provenance.cpu_has_native_bf16():
            warnings.warn(
                "--precision bf16 on a CPU without AVX-512 BF16 or AMX: torch emulates bf16 matrix products, "
                "much slower than fp32 here. Use --precision fp32 on such a CPU.",
                RuntimeWarning,
                stacklevel=2,
            )
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
        provenance.append_record(
            self.dir, {**provenance.describe(Path(self.agent_file).parent, args.device), "start_step": self.start_step}
        )
        if self.checkpoint is not None:
            print(f"resuming {self.dir} from step {self.start_step:,}", flush=True)
        else:
            print(f"run folder: {self.dir}", flush=True)
        self._progress = Progress(args.total_timesteps, self.start_step, bar=args.progress_bar, every=args.progress_every)
        self.video: VideoRecorder | None = None
        self._watched: tuple[Any, Any] | None = None
        if getattr(args, "capture_video", False):  # checked now: a machine that cannot render fails before training
            self.video = VideoRecorder(args.env, self.dir / "videos", *args.video_size)
        self._last_checkpoint_step = self.start_step
        self._sps_mark = (time.time(), self.start_step)
        self._eval_every = getattr(args, "eval_every", 0) if isinstance(args, RunArgs) else 0
        self._next_eval = (self.start_step // self._eval_every + 1) * self._eval_every if self._eval_every > 0 else 0

    @property
    def device(self) -> torch.device:
        return torch.device(self.args.device)

    def autocast(self) -> torch.autocast:
        """The ``--precision`` context: bf16 autocast on the run's device, or a no-op for fp32."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.args.precision == "bf16")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.logger.log(step, metrics)

    def sps(self, step: int) -> float:
        """Environment steps per second since the previous call."""
        now = time.time()
        then, then_step = self._sps_mark
        self._sps_mark = (now, step)
        return (step - then_step) / max(now - then, 1e-9)

    def progress(
        self,
        step: int,
        recent_return: float | None = None,
        sps: float | None = None,
        extra: dict[str, float | str] | None = None,
    ) -> None:
        """Show progress (a bar on a terminal, else a plain line every --progress-every seconds; see
        :mod:`cleanrl_style.runs.progress`) with the agent's figures, e.g. ``extra={"tokens/s": 14.6}``;
        with --eval-every, evaluate the watched policy when another --eval-every steps have passed;
        with --capture-video, film the policy when --video-every more training episodes have finished."""
        self._progress.update(step, recent_return, sps, extra)
        if self._eval_every > 0 and self._watched is not None and step >= self._next_eval:
            self._next_eval = (step // self._eval_every + 1) * self._eval_every
            self._evaluate(self._watched[0], step)
        if self.video is not None and self._watched is not None:
            episodes = self._watched[1].episodes_finished
            if episodes >= self._next_video_episode:
                self._film(self._watched[0], step)
                self._next_video_episode: int = (episodes // self.args.video_every + 1) * self.args.video_every

    def record(self, **fields: Any) -> None:
        """Add what the agent decided at start to this start's provenance record, e.g.
        ``run.record(compiled_update=True)`` (what ``--compile auto`` chose)."""
        provenance.update_last_record(self.dir, fields)

    def make_vector_env(self, **kwargs: Any) -> Any:
        """The training env from the run's flags: ``envs.make`` with --env, --num-envs, --backend,
        --env-threads, the run's device, and seed ``--seed`` plus the steps done (so a resumed run's
        envs do not replay the first episodes). ``kwargs`` go to ``envs.make`` (e.g. ``action_repeat``)."""
        import envs  # imported on use: the language-model agents' runs make no vector env

        args = self.args
        if not isinstance(args, RunArgs):
            raise TypeError(f"make_vector_env needs an agent's RunArgs (--num-envs, --backend), got {type(args).__name__}")
        return envs.make(
            args.env,
            args.num_envs,
            backend=args.backend,
            device=self.device,
            seed=args.seed + self.start_step,
            num_threads=args.env_threads,
            **kwargs,
        )

    def watch(self, policy: torch.nn.Module, vec_env: Any) -> None:
        """The live policy (its ``act(obs)``) and the training env (its ``episodes_finished``), for
        --capture-video: the policy is filmed now (unless the run resumes) and after every --video-every
        training episodes. Does nothing without --capture-video."""
        self._watched = (policy, vec_env)
        provenance.update_last_record(self.dir, provenance.env_record(vec_env))
        self._next_video_episode = self.args.video_every
        if self.video is not None and self.start_step == 0:
            self._film(policy, 0)

    def _film(self, policy: torch.nn.Module, step: int) -> None:
        """One episode of the deterministic policy, always from the same start (seed + 20,000)."""
        if self.video is None:  # callers check --capture-video first
            return
        path = self.dir / "videos" / f"step_{step:09d}.mp4"
        if path.exists():  # filmed at this step already (the last periodic video, or before a resume)
            return
        started = time.time()
        episode = self.video.record(
            _act(policy), path, seed=self.args.seed + 20_000, device=self.device, action_repeat=action_repeat_of(self.args)
        )
        self.logger.log_video("videos/policy", episode.frames, episode.fps, step, path)
        self._progress.write(f"video: {path} ({episode.length} steps, return {episode.episode_return:.1f})")
        mark_time, mark_step = self._sps_mark  # charts/SPS measures training: the filming time is left out
        self._sps_mark = (mark_time + time.time() - started, mark_step)

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
        self.checkpointed = True
        self._last_checkpoint_step = global_step

    def checkpoint_due(self, global_step: int) -> bool:
        return global_step - self._last_checkpoint_step >= self.args.checkpoint_every

    def final_evaluation(self, policy: torch.nn.Module, global_step: int) -> None:
        """Deterministic evaluation at the end of training (``--eval-episodes``), logged as ``eval/*``.

        ``policy.act(obs)`` gives actions for raw observations; ``policy.eval()`` freezes its
        normalizer statistics. A resumed run that had already evaluated does not log it twice. With
        --capture-video the final policy is filmed first (also with --eval-episodes 0). Training's
        progress ends here, so that its last line (or the finished bar) comes before the evaluation.
        """
        self._progress.close()
        if self.video is not None:
            policy.eval()
            self._film(policy, global_step)
        episodes = self.args.eval_episodes
        if episodes <= 0:
            return
        done_before = [v for s, _, v in read_progress(self.dir).get("eval/return_mean", []) if s == global_step]
        if done_before:
            print(f"already evaluated at step {global_step}: return {done_before[-1]:.1f}")
            return
        policy.eval()
        self._evaluate(policy, global_step)

    def _evaluate(self, policy: torch.nn.Module, step: int) -> None:
        """--eval-episodes deterministic episodes from the same starts (seed + 10,000), logged as ``eval/*`` at ``step``."""
        episodes = self.args.eval_episodes
        if episodes <= 0:
            return
        from cleanrl_style.runs.evaluate import evaluate_policy  # here: `python -m cleanrl_style.runs.evaluate` imports run

        started, training = time.time(), policy.training
        policy.eval()  # frozen normalizer statistics; training resumes in the mode it was in
        try:
            returns = evaluate_policy(
                _act(policy),
                self.args.env,
                episodes,
                seed=self.args.seed + 10_000,
                device=self.device,
                action_repeat=action_repeat_of(self.args),
            )
        finally:
            policy.train(training)
        self.log(step, {"eval/return_mean": returns.mean(), "eval/return_std": returns.std()})
        self._progress.write(
            f"evaluation over {episodes} episodes at step {step:,}: {returns.mean():.1f} +- {returns.std():.1f}"
        )
        mark_time, mark_step = self._sps_mark  # charts/SPS measures training: the evaluation time is left out
        self._sps_mark = (mark_time + time.time() - started, mark_step)

    def close(self) -> None:
        """End the run: the last progress line, the logs closed, the folder unlocked, and where it all is."""
        self._close()
        if self.checkpointed and not getattr(self, "_told_where", False):
            self._told_where = True
            print(f"run folder: {self.dir}", flush=True)
            if isinstance(self.args, RunArgs):  # agents with make_agent(); cleanrl_style.runs.evaluate rebuilds them
                print(f"evaluate it: python -m cleanrl_style.runs.evaluate {shlex.quote(str(self.dir))}", flush=True)

    def _close(self) -> None:
        # Also called on a Run that a user error cut short while it was being made (discard).
        if getattr(self, "_progress", None) is not None:
            self._progress.close()
        video = getattr(self, "video", None)
        if video is not None:
            video.close()
            self.video = None
        logger = getattr(self, "logger", None)
        if logger is not None:
            logger.close()
            del self.logger
        self._release_lock()  # the run directory is free for another writer

    def _release_lock(self) -> None:
        lock_fd = getattr(self, "_lock_fd", None)
        if lock_fd is not None:
            os.close(lock_fd)
            self._lock_fd = None

    def _refuse_unless_new(self, run_dir: Path) -> None:
        """Refuse a folder that holds a run: its logs would be mixed with this run's (called with the lock held)."""
        if (run_dir / CHECKPOINT_NAME).exists():
            problem = f"{run_dir} already holds a run; pass --resume {run_dir} to continue it, or another --run-dir"
        elif (run_dir / "args.json").exists() or (run_dir / CSV_NAME).exists():
            problem = (
                f"{run_dir} holds the logs of a run that ended before its first checkpoint (no checkpoint to resume "
                f"from); choose another --run-dir, or delete the folder (rm -r {shlex.quote(str(run_dir))}) and start again"
            )
        else:
            return
        self._release_lock()
        raise UsageError(problem)

    def discard(self) -> None:
        """Take back what this run wrote: a user error ended it before its first checkpoint.

        The folders it created go; in a folder that was there before, only the files it added. The
        lock is held until they are gone, so that no other run starts there in between.
        """
        lock_fd, self._lock_fd = getattr(self, "_lock_fd", None), None
        if lock_fd is None:  # closed, or never held the lock: nothing there is this run's to take back
            return
        try:
            self._close()
            if self.created_dirs:
                shutil.rmtree(self.created_dirs[0], ignore_errors=True)
                for parent in self.created_dirs[1:]:
                    try:
                        os.rmdir(parent)  # only while empty: another run may have appeared there meanwhile
                    except OSError:
                        break
            elif self._files_before is not None:
                for name in set(os.listdir(self.dir)) - self._files_before:
                    path = self.dir / name
                    if path.is_dir() and not path.is_symlink():
                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        path.unlink(missing_ok=True)
        finally:
            os.close(lock_fd)
