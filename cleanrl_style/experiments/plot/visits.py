"""Task cycles (``envs.dmc``'s ``dmc:<domain>-<task>.<task>...-every<N>``): the return at the end of
each visit, and each later visit of a task against its first.

A network that loses plasticity learns each new visit less well than it learned the task the first
time, so its later visits end below its first; one that keeps it ends level or above (Lyle et al.,
2024, arXiv:2407.01800, for NaP). A visit's return is the mean of the episodic returns logged in its
last ``VISIT_FINAL_FRACTION`` of steps (its start still carries the previous task's episodes, which
the agent logs at the end of the iteration they finished in).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cleanrl_style.experiments.plot.data import RETURN, RunData, by_label_and_env, file_part
from cleanrl_style.experiments.plot.stats import band_note, seed_statistics
from cleanrl_style.experiments.plot.style import _colors, _pyplot, save_figure

VISIT_FINAL_FRACTION = 0.25


def cycle_of(run: RunData) -> tuple[tuple[str, ...], int] | None:
    """The run's tasks and agent steps per visit, if its env is a task cycle; else None."""
    from envs.dmc import cycle_visits

    return cycle_visits(str(run.args.get("env", run.env)), int(run.args.get("num_envs", 1)))


def visit_returns(run: RunData, metric: str = RETURN, fraction: float = VISIT_FINAL_FRACTION) -> np.ndarray:
    """Each visit's return (the mean of ``metric`` logged in its last ``fraction`` of steps; NaN
    where nothing was logged there), for every visit whose last ``fraction`` the run covered at least
    half of (an agent that counts steps in whole iterations stops a little short of a visit's
    end: PPO's 2,048-step batches end a 864,000-step run at 862,208); empty for a run whose env is
    not a task cycle."""
    cycle = cycle_of(run)
    if cycle is None or metric not in run.series:
        return np.array([])
    span = cycle[1]
    steps, values = run.series[metric][:, 0], run.series[metric][:, 2]
    visits = int((steps.max() + fraction / 2 * span) // span) if len(steps) else 0
    out = np.full(visits, np.nan)
    for v in range(visits):
        here = (steps > (v + 1 - fraction) * span) & (steps <= (v + 1) * span)
        if here.any():
            out[v] = values[here].mean()
    return out


def later_minus_first(returns: np.ndarray, n_tasks: int) -> float:
    """The mean, over the tasks visited twice or more, of (mean of the task's later visits' returns
    minus its first visit's): below 0 when later visits end lower than the first."""
    gaps = [returns[t + n_tasks :: n_tasks].mean() - returns[t] for t in range(n_tasks) if len(returns[t::n_tasks]) > 1]
    return float(np.mean(gaps)) if gaps else float("nan")


def visit_rows(runs: list[RunData], ci: float = 0.95, n_boot: int = 2000, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """Per (line, env, visit): the task, n, the mean return over seeds and its interval; and per
    (line, env): each run's later-minus-first gap (``later_minus_first``), mean and interval."""
    per_visit, gaps = [], []
    for (label, env), group in by_label_and_env(runs).items():
        cycle = cycle_of(group[0])
        returns = [visit_returns(r) for r in group]
        visits = min((len(x) for x in returns), default=0)
        if cycle is None or visits == 0:
            continue
        tasks = cycle[0]
        matrix = np.array([x[:visits] for x in returns])  # (seeds, visits)
        for v in range(visits):
            column = matrix[:, v][~np.isnan(matrix[:, v])]
            per_visit.append(
                {
                    "agent": label,
                    "env": env,
                    "visit": v + 1,
                    "task": tasks[v % len(tasks)],
                    "task_visit": v // len(tasks) + 1,
                    **seed_statistics(column, "return_mean", ci, n_boot, seed),
                }
            )
        run_gaps = np.array([later_minus_first(row, len(tasks)) for row in matrix])
        run_gaps = run_gaps[~np.isnan(run_gaps)]
        if len(run_gaps):
            stats = seed_statistics(run_gaps, "later_minus_first", ci, n_boot, seed)
            gaps.append({"agent": label, "env": env, "visits": visits, **stats, "seeds_below_zero": int((run_gaps < 0).sum())})
    return per_visit, gaps


def plot_visits(rows: list[dict], out: Path, ci: float = 0.95) -> list[Path]:
    """``visits_<env>.png``: one panel per task, its visits' returns (1st, 2nd, ...), one line per label."""
    plt = _pyplot()
    paths = []
    for env in sorted({r["env"] for r in rows}):
        here = [r for r in rows if r["env"] == env]
        tasks = list(dict.fromkeys(r["task"] for r in here))
        colors = _colors(sorted({r["agent"] for r in here}))
        fig, axes = plt.subplots(1, len(tasks), figsize=(3.6 * len(tasks), 3.4), squeeze=False, layout="constrained")
        for ax, task in zip(axes[0], tasks):
            for label in sorted({r["agent"] for r in here}):
                points = [r for r in here if r["agent"] == label and r["task"] == task]
                x = [r["task_visit"] for r in points]
                y = np.array([r["return_mean"] for r in points])
                ax.plot(x, y, marker="o", color=colors[label], label=f"{label} (n={points[0]['seeds']})")
                low, high = np.array([r["ci_low"] for r in points]), np.array([r["ci_high"] for r in points])
                if not np.isnan(low).all():
                    ax.fill_between(x, low, high, color=colors[label], alpha=0.2, lw=0)
                else:  # too few seeds for an interval: their range, lighter (band_note says so)
                    low, high = np.array([r["seed_min"] for r in points]), np.array([r["seed_max"] for r in points])
                    ax.fill_between(x, low, high, color=colors[label], alpha=0.12, lw=0)
            ax.set_title(task, fontsize=10)
            ax.set_xlabel("visit of this task")
            ax.set_xticks(sorted({r["task_visit"] for r in here if r["task"] == task}))
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(f"return, last {VISIT_FINAL_FRACTION:.0%} of the visit")
        axes[0][-1].legend(fontsize=8)
        fig.suptitle(f"{env}: each visit's return\n(mean over seeds; {band_note(ci)})", fontsize=10)
        paths.append(save_figure(fig, out / f"visits_{file_part(env)}.png"))
    return paths
