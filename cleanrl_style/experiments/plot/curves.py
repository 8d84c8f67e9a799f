"""Learning curves: one panel per env, one line per agent or flag value, over steps or wall time."""

from __future__ import annotations

import textwrap
from pathlib import Path

from cleanrl_style.experiments.plot.data import RETURN, SPARSE_POINTS, RunData, by_label_and_env
from cleanrl_style.experiments.plot.stats import band_note
from cleanrl_style.experiments.plot.style import (
    _colors,
    _draw_band,
    _figure_legend,
    _legend_handles,
    _panels,
    plain_axis,
    save_figure,
    steps_axis,
)


def curves_figure(
    runs: list[RunData],
    metric: str = RETURN,
    x: str = "step",
    estimator: str = "mean",
    ci: float = 0.95,
    n_boot: int = 2000,
    smooth_window: int = 1,
    seed: int = 0,
):
    """One panel per env, one line (estimator across seeds, CI band) per label; None without data."""
    runs = [r for r in runs if metric in r.series and (x == "step" or not r.reference)]
    envs = sorted({r.env_key for r in runs})
    if not envs:
        return None
    colors = _colors(sorted({r.label for r in runs}))
    fig, axes = _panels(len(envs))
    for ax, env_key in zip(axes, envs):
        here = [r for r in runs if r.env_key == env_key]
        for (label, _), group in by_label_and_env(here).items():
            # A published curve logged at a few steps (SimbaV2: every 50k) is drawn at those steps, with markers.
            sparse = group[0].reference and max(len(r.series[metric]) for r in group) <= SPARSE_POINTS
            _draw_band(
                ax,
                group,
                metric,
                x,
                colors[label],
                estimator,
                ci,
                n_boot,
                seed,
                smooth_window,
                points=None if sparse else 100,
                label=f"{label} (n={len(group)})",
                linestyle="--" if group[0].reference else "-",
                marker="o" if sparse else None,
            )
        ax.set_title(" / ".join(sorted({r.env for r in here})), fontsize=10)
        ax.set_xlabel("environment steps" if x == "step" else "wall-clock time (s)")
        if x == "step":
            steps_axis(ax)
        ax.set_ylabel(metric.split("/")[-1].replace("_", " "))
        ax.grid(alpha=0.3)
        plain_axis(ax)
    _figure_legend(fig, _legend_handles(axes), len(envs))
    band = f"{'IQM' if estimator == 'iqm' else 'mean'} across seeds; {band_note(ci)}"
    title = f"{metric} over {'environment steps' if x == 'step' else 'wall-clock time'}"
    if len(envs) < 3:  # a narrow figure takes the title on several lines
        title += "\n" + textwrap.fill(f"({band})", 64)
    else:
        title += f" ({band})"
    fig.suptitle(title, fontsize=11)
    return fig


def plot_curves(runs: list[RunData], out: Path, metric: str = RETURN, x: str = "step", *args, **kwargs) -> Path | None:
    """``curves_steps.png`` (``x="step"``) or ``curves_time.png`` (``x="time"``); see :func:`curves_figure`."""
    fig = curves_figure(runs, metric, x, *args, **kwargs)
    if fig is None:
        return None
    path = out / f"curves_{'steps' if x == 'step' else 'time'}.png"
    return save_figure(fig, path)
