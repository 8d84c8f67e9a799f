"""Run folders as data: loading, labelling, grouping, and the curves and final values read from them."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cleanrl_style.runs.logger import CSV_NAME, read_progress

RETURN = "charts/episodic_return"
LLM_METRICS = ("charts/success_rate", "charts/test_success_rate", "charts/zero_variance_fraction")
SPARSE_POINTS = 12  # a curve with at most this many logged points is drawn at them, with markers
REFERENCE_CSV = Path(__file__).resolve().parents[1] / "reference_curves" / "gym_mujoco_v4.csv"
# Arguments that do not make two runs different experiments (they never name a line).
NOT_HYPERPARAMETERS = {
    "env",
    "seed",
    "exp_name",
    "run_dir",
    "resume",
    "progress_bar",
    "progress_every",
    "capture_video",
    "video_every",
    "video_size",
    "track",
    "wandb_project",
    "torch_threads",
    "device",
    "checkpoint_every",
    "eval_episodes",
    "backend",
    "batch_size",
    "minibatch_size",
    "num_iterations",
}


@dataclass
class RunData:
    """One run's logs. ``series[metric]`` is an array ``(n, 3)`` of ``(step, time, value)`` rows."""

    env: str
    seed: int
    label: str
    series: dict[str, np.ndarray]
    args: dict = field(default_factory=dict)
    path: Path | None = None
    reference: bool = False

    @property
    def env_key(self) -> str:
        """The env without its version (``Hopper-v5`` -> ``Hopper``): runs and references meet here."""
        return self.env.split(":")[-1].split("-v")[0]


def final_value(series: np.ndarray, fraction: float = 0.1) -> float:
    """Mean of the values logged in the last ``fraction`` of the run's steps (the last value if none)."""
    steps, values = series[:, 0], series[:, 2]
    last = steps.max()
    window = values[steps >= last - fraction * last]
    return float(window.mean()) if len(window) else float(values[-1])


def final_values(group: list[RunData], metric: str, fraction: float = 0.1) -> np.ndarray:
    """:func:`final_value` of ``metric`` for each run of ``group`` that logged it, shape ``(runs,)``."""
    return np.array([final_value(r.series[metric], fraction) for r in group if metric in r.series])


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over ``window`` points (shorter at the start)."""
    if window <= 1:
        return values
    cumsum = np.cumsum(np.insert(values, 0, 0.0))
    counts = np.minimum(np.arange(1, len(values) + 1), window)
    return (cumsum[1:] - cumsum[np.arange(1, len(values) + 1) - counts]) / counts


def curves_on_grid(
    runs: list[RunData], metric: str, x: str = "step", points: int | None = 100, smooth_window: int = 1
) -> tuple[np.ndarray, np.ndarray] | None:
    """Each run's metric interpolated on a shared grid ``(points,)``; returns (grid, values ``(runs, points)``).

    The grid spans the range every run covers, so each point averages the same seeds. ``points=None``
    puts the grid at the logged x values instead (a sparsely logged curve drawn where it has data).
    """
    column = 0 if x == "step" else 1
    data = [
        (r.series[metric][:, column], smooth(r.series[metric][:, 2], smooth_window))
        for r in runs
        if metric in r.series and len(r.series[metric])
    ]
    data = [(xs, ys) for xs, ys in data if np.all(np.isfinite(xs))]
    if not data:
        return None
    lo, hi = max(xs.min() for xs, _ in data), min(xs.max() for xs, _ in data)
    if points is None:
        logged = np.unique(np.concatenate([xs for xs, _ in data]))
        grid = logged[(logged >= lo) & (logged <= hi)]
    else:
        grid = np.linspace(lo, hi, points) if hi > lo else np.array([hi])
    return grid, np.stack([np.interp(grid, xs, ys) for xs, ys in data])


# ----- loading -----------------------------------------------------------------------------------


def _resolved_env(env: str) -> str:
    try:
        from envs.registry import resolve_env_id

        return resolve_env_id(env)
    except Exception:  # an env registered only in the process that trained it
        return env


def find_run_dirs(paths: Sequence[str | Path]) -> list[Path]:
    found = []
    for path in map(Path, paths):
        if (path / CSV_NAME).exists():
            found.append(path)
        else:
            found += sorted(p.parent for p in path.rglob(CSV_NAME))
    return [p for p in dict.fromkeys(found) if (p / "args.json").exists()]


def load_run(run_dir: Path) -> RunData:
    args = json.loads((run_dir / "args.json").read_text())
    series = {k: np.asarray(v, dtype=float).reshape(-1, 3) for k, v in read_progress(run_dir).items()}
    sweep_label = None
    if (run_dir / "sweep.json").exists():
        sweep_label = json.loads((run_dir / "sweep.json").read_text()).get("label")
    run = RunData(_resolved_env(str(args.get("env", "?"))), int(args.get("seed", 0)), sweep_label or "", series, args, run_dir)
    return run


def label_runs(runs: list[RunData], group_by: list[str] | None = None) -> None:
    """Name each run's line: by ``group_by`` arguments, else the sweep label, else agent + differing arguments."""
    by_agent: dict[str, list[RunData]] = {}
    for r in runs:
        by_agent.setdefault(str(r.args.get("exp_name", "run")), []).append(r)
    for agent, group in by_agent.items():
        if group_by:
            keys = group_by
        else:
            keys = sorted(
                k
                for k in set().union(*(r.args for r in group)) - NOT_HYPERPARAMETERS
                if len({json.dumps(r.args.get(k), sort_keys=True) for r in group}) > 1
            )
        for r in group:
            if group_by or not r.label:
                r.label = " ".join([agent, *(f"{k}={r.args.get(k)}" for k in keys)])


def load_runs(paths: Sequence[str | Path], group_by: list[str] | None = None) -> list[RunData]:
    runs = [load_run(d) for d in find_run_dirs(paths)]
    label_runs(runs, group_by)
    return runs


def by_label_and_env(runs: list[RunData]) -> dict[tuple[str, str], list[RunData]]:
    groups: dict[tuple[str, str], list[RunData]] = {}
    for r in runs:
        groups.setdefault((r.label, r.env), []).append(r)
    return dict(sorted(groups.items(), key=lambda kv: (kv[0][1], kv[1][0].reference, kv[0][0])))


def file_part(env: str) -> str:
    """``env`` as part of a file name: ``text/ToolUse-v0`` -> ``text_ToolUse-v0``, ``tools:bank`` -> ``tools-bank``."""
    return re.sub(r"[^\w.+-]", "-", env.replace("/", "_"))
