"""User-input errors on the command line: one line ``error: ...``, exit status 2, nothing left behind.

:class:`UsageError` (and the env request errors that ``envs.make`` raises: unknown env,
unsupported space or backend) mean "the user asked for something that cannot work"; their
message names the problem and the fix. ``Run`` installs :func:`install_error_handler`, so in an
agent's process such an error, wherever it is raised, prints that one line instead of a
traceback, takes back what a run of this process wrote before its first checkpoint (the folders
it created, or the files it added to a folder that was there; only while it holds the folder's
lock, so the loser of a start race never touches the winner's folder), and exits with status 2
(argparse's status for a usage error). Importing ``cleanrl_style.runs.run`` installs it too, since an
agent may look its env up before it makes its ``Run``.

:func:`check_args` holds the checks of the flags that several agents share, by field name, so that
each rule is written once; an agent checks the flags only it has in a ``validate()`` method of
its ``Args``, which may also fill in derived fields (``Run`` calls it after ``--resume`` merged
the saved arguments).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import weakref
from typing import Any


class UsageError(ValueError):
    """A user-input error; the message names the problem and the fix."""


def require(condition: bool, message: str) -> None:
    if not condition:
        raise UsageError(message)


def flag(name: str) -> str:
    """The command-line spelling of a field (tyro's: dashes)."""
    return "--" + name.replace("_", "-")


# Fields shared by several agents, checked wherever present.
_AT_LEAST_ONE = (
    "num_envs",
    "checkpoint_every",
    "num_steps",
    "num_minibatches",
    "update_epochs",
    "buffer_size",
    "log_every",
    "micro_batch_size",
    "max_new_tokens",
    "num_critics",
    "critic_nets",
    "video_every",
)
_AT_LEAST_ZERO = ("seed", "eval_episodes", "torch_threads", "learning_starts", "warmup_steps", "eval_every", "progress_every")
_POSITIVE_FLOATS = ("learning_rate", "policy_lr", "q_lr", "alpha_lr", "updates_per_step", "clip_coef", "max_grad_norm",
                    "alpha", "adv_eps", "target_kl")  # fmt: skip
_NON_NEGATIVE_FLOATS = ("weight_decay", "ent_coef", "vf_coef", "kl_coef")
# (low, high, low included, high included); a value outside makes the update diverge or meaningless.
_INTERVALS = {
    "gamma": (0.0, 1.0, False, True),  # a discount factor
    "tau": (0.0, 1.0, False, True),  # the target networks' Polyak step
    "gae_lambda": (0.0, 1.0, True, True),
}
_WIDTHS = ("hidden_sizes",)  # layer widths, each at least 1


def check_range(name: str, value: float, low: float, high: float, low_in: bool = True, high_in: bool = True) -> None:
    """Raise :class:`UsageError` naming ``--name`` unless ``value`` lies in the interval (and is finite)."""
    inside = (
        math.isfinite(value) and (low <= value if low_in else low < value) and (value <= high if high_in else value < high)
    )
    interval = f"{'[' if low_in else '('}{low:g}, {high:g}{']' if high_in else ')'}"
    require(inside, f"{flag(name)} {value}: must lie in {interval}")


def check_args(args: Any) -> None:
    """Raise :class:`UsageError` for flag values that cannot work; call ``args.validate()`` if defined."""
    fields = {f.name for f in dataclasses.fields(args)}
    for name in _AT_LEAST_ONE:
        if name in fields:
            value = getattr(args, name)
            require(value >= 1, f"{flag(name)} {value}: must be at least 1")
    if "total_timesteps" in fields:
        # The LLM agents count iterations and take 0 for an evaluation of the starting model.
        least = getattr(args, "min_total_timesteps", 1)
        require(args.total_timesteps >= least, f"--total-timesteps {args.total_timesteps}: must be at least {least}")
    for name in _AT_LEAST_ZERO:
        if name in fields:
            value = getattr(args, name)
            require(value >= 0, f"{flag(name)} {value}: must be 0 or more")
    for name in _POSITIVE_FLOATS:
        value = getattr(args, name, None)  # None: off, or an agent's own default derived later
        if name in fields and value is not None:
            require(value > 0 and math.isfinite(value), f"{flag(name)} {value}: must be greater than 0 (and finite)")
    for name in _NON_NEGATIVE_FLOATS:
        if name in fields:
            value = getattr(args, name)
            require(value >= 0 and math.isfinite(value), f"{flag(name)} {value}: must be 0 or more (and finite)")
    for name, (low, high, low_in, high_in) in _INTERVALS.items():
        if name in fields and getattr(args, name) is not None:
            check_range(name, getattr(args, name), low, high, low_in, high_in)
    for name in _WIDTHS:
        if name in fields:
            widths = getattr(args, name)
            require(
                len(widths) > 0 and all(w >= 1 for w in widths),
                f"{flag(name)} {widths}: give one width of 1 or more per layer",
            )
    if "log_std_min" in fields and "log_std_max" in fields:
        require(
            math.isfinite(args.log_std_min) and math.isfinite(args.log_std_max) and args.log_std_min < args.log_std_max,
            f"--log-std-min {args.log_std_min} and --log-std-max {args.log_std_max}: the minimum must be below the maximum",
        )
    if "device" in fields:
        _check_device(args.device)
    validate = getattr(args, "validate", None)
    if callable(validate):
        validate()
    if "batch_size" in fields:
        require(args.batch_size >= 1, f"--batch-size {args.batch_size}: must be at least 1")
        if "buffer_size" in fields:
            require(
                args.batch_size <= args.buffer_size,
                f"--batch-size {args.batch_size} is larger than --buffer-size {args.buffer_size}: "
                "a batch is sampled from the buffer; lower the one or raise the other",
            )
    for starts in ("learning_starts", "warmup_steps"):
        if starts in fields and "total_timesteps" in fields:
            require(
                getattr(args, starts) < args.total_timesteps,
                f"--total-timesteps {args.total_timesteps} is not more than {flag(starts)} {getattr(args, starts)}: "
                f"the run would end before its first update; raise --total-timesteps or lower {flag(starts)}",
            )


def _check_device(device: str) -> None:
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError) as error:
        raise UsageError(f"--device {device!r}: not a torch device ({error}); use cpu, cuda or cuda:N") from None
    if parsed.type == "cuda":
        require(torch.cuda.is_available(), f"--device {device}: no CUDA device is available here; use --device cpu")
        if parsed.index is not None:
            count = torch.cuda.device_count()
            require(parsed.index < count, f"--device {device}: {count} CUDA device(s) are visible (cuda:0 ...)")


def user_error_types() -> tuple[type[BaseException], ...]:
    from envs.core import EnvRequestError

    return (UsageError, EnvRequestError)


# Runs of this process that hold their folder's lock and have not yet checkpointed; a user error
# that ends the process takes back what each wrote (``run.discard()``): the folders it created, or
# in a folder that was there before, only the files it added.
_fresh_runs: weakref.WeakSet = weakref.WeakSet()


def forget_on_user_error(run: Any) -> None:
    _fresh_runs.add(run)


def _remove_fresh_run_directories() -> None:
    for run in list(_fresh_runs):
        if not getattr(run, "checkpointed", True):
            run.discard()
        _fresh_runs.discard(run)


def install_error_handler() -> None:
    """Make a user error that ends the process print one line and exit with status 2."""
    if getattr(sys.excepthook, "_cleanrl_style", False):
        return
    previous = sys.excepthook

    def handle(kind, error, traceback):
        if not issubclass(kind, user_error_types()):
            return previous(kind, error, traceback)
        _remove_fresh_run_directories()
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        sys.exit(2)

    setattr(handle, "_cleanrl_style", True)  # noqa: B010  (marks our hook; a function has no such declared attribute)
    sys.excepthook = handle


def args_from_dict(args_class: type, saved: dict[str, Any]) -> Any:
    """Rebuild an agent's ``Args`` from its JSON/checkpoint form (JSON turns tuples into lists)."""
    return args_class(**{k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()})


def action_repeat_of(args: Any) -> int:
    """The simulator steps a run applied each action for: its saved args (a dict) or its ``Args``;
    saved resolved (``--action-repeat``), 1 for agents and runs without the flag."""
    value = args.get("action_repeat", 1) if isinstance(args, dict) else getattr(args, "action_repeat", 1)
    return int(value)
