"""What every figure shares: panels, colors, legends, axes, and the band drawn around a line."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from cleanrl_style.experiments.plot.data import RunData, curves_on_grid
from cleanrl_style.experiments.plot.stats import ESTIMATORS, MIN_SEEDS_FOR_CI, interval_estimate

# ----- figures -----------------------------------------------------------------------------------
# Panels keep a fixed size and the figure grows around them: the legend and titles take their own
# room instead of squeezing the plots (constrained layout, legend outside the axes).


def save_figure(fig, path: Path, dpi: int = 120) -> Path:
    """Write ``fig`` to ``path`` and free it (pyplot keeps every open figure alive)."""
    fig.savefig(path, dpi=dpi)
    _pyplot().close(fig)
    return path


def panel_size(n: int) -> tuple[float, float]:
    """Inches per env panel: one or two envs get larger panels, so titles and ticks take less of them."""
    return (6.0, 4.2) if n == 1 else (5.2, 3.8) if n == 2 else (4.4, 3.3)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _colors(labels: list[str]) -> dict[str, tuple]:
    plt = _pyplot()
    from matplotlib.colors import to_rgba

    own = [lab for lab in labels if not lab.endswith("(published)")]
    published = [lab for lab in labels if lab.endswith("(published)")]
    # Own lines take the palette from its start (tab10), published ones from its end (four dark
    # colors, then tab10 backwards): no two lines share a color until there are more than fourteen,
    # and the published curves keep their colors from figure to figure. Own lines beyond fourteen take
    # tab20's light shades (a recipe with many arms), then repeat.
    palette = [plt.cm.tab10(i) for i in range(10)] + [to_rgba(c) for c in ("#b8860b", "#000080", "#7f0000", "black")]
    own_palette = palette + [plt.cm.tab20(2 * i + 1) for i in range(10)]
    colors = {lab: own_palette[i % len(own_palette)] for i, lab in enumerate(sorted(own))}
    colors.update({lab: palette[-1 - i % len(palette)] for i, lab in enumerate(sorted(published))})
    return colors


def panel_grid(n: int) -> tuple[int, int]:
    """(rows, columns) for ``n`` panels: near-square, at most 4 columns (12 panels: 3 x 4)."""
    ncols = 1 if n == 1 else 2 if n in (2, 4) else 3 if n in (3, 5, 6, 9) else 4
    return math.ceil(n / ncols), ncols


def _panels(n: int, sharex: bool = False):
    plt = _pyplot()
    nrows, ncols = panel_grid(n)
    panel = panel_size(n)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(panel[0] * ncols, panel[1] * nrows), squeeze=False, layout="constrained", sharex=sharex
    )
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _figure_legend(fig, handles: dict, n_panels: int) -> None:
    """The legend beside a single panel (below it when the names are long), below several; the figure
    grows by the legend's size."""
    if not handles:
        return
    width, height = fig.get_size_inches()
    label_width = 0.075 * max(len(label) for label in handles) + 0.6  # inches, at font size 9
    if n_panels == 1 and label_width < 0.5 * width:
        fig.set_size_inches(width + label_width, max(height, 0.25 * len(handles) + 0.5))
        fig.legend(list(handles.values()), list(handles), loc="outside right center", frameon=False, fontsize=9)
        return
    ncol = max(1, min(len(handles), int(width // label_width)))
    fig.set_size_inches(width, height + 0.25 * math.ceil(len(handles) / ncol) + 0.2)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=ncol, frameon=False, fontsize=9)


def _legend_handles(axes) -> dict:
    handles: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    return dict(sorted(handles.items(), key=lambda kv: (kv[0].endswith("(published)"), kv[0])))


def plain_axis(ax, min_relative_span: float = 0.02) -> None:
    """Plain tick labels on the y axis (no ``1e-6+1.13e1`` offsets), and a flat line drawn flat.

    When everything on the axis varies by less than ``min_relative_span`` of its size (a projected
    weight norm), the limits widen to that span around the data, so float noise is not magnified
    into a jagged curve.
    """
    low, high = ax.dataLim.y0, ax.dataLim.y1
    if np.isfinite(low) and np.isfinite(high):
        center, size = (low + high) / 2, max(abs(low), abs(high))
        if size > 0 and high - low < min_relative_span * size:
            half = min_relative_span * size / 2
            if ax.get_yscale() == "log":
                ax.set_ylim(center / (1 + min_relative_span), center * (1 + min_relative_span))
            else:
                ax.set_ylim(center - half, center + half)
    if ax.get_yscale() == "linear":
        ax.ticklabel_format(axis="y", useOffset=False, style="plain")


def _format_steps(value: float, _position=None) -> str:
    """Tick label of a step count: 0, 500, 25k, 1.5M."""
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def steps_axis(ax) -> None:
    """Environment steps on the x axis as 25k / 1M, so ticks stay short on narrow panels."""
    from matplotlib.ticker import FuncFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(_format_steps))


def _draw_band(
    ax,
    runs: list[RunData],
    metric: str,
    x: str,
    color,
    estimator: str,
    ci: float,
    n_boot: int,
    seed: int,
    smooth_window: int,
    points: int | None = 100,
    label: str | None = None,
    linestyle: str = "-",
    marker: str | None = None,
) -> bool:
    curve = curves_on_grid(runs, metric, x, points, smooth_window)
    if curve is None:
        return False
    grid, values = curve
    scores = values[:, None, :]  # (runs, 1 env, points)
    center = ESTIMATORS[estimator](scores)
    # A metric logged once (a final test success rate) is a point, drawn as a marker.
    marker = marker or ("o" if len(grid) == 1 else None)
    ax.plot(grid, center, color=color, label=label, linestyle=linestyle, lw=1.6, marker=marker)
    if len(values) >= MIN_SEEDS_FOR_CI:
        _, lo, hi = interval_estimate(scores, ESTIMATORS[estimator], ci, n_boot, seed)
        _draw_interval(ax, grid, center, lo, hi, color, alpha=0.2)
    elif len(values) > 1:  # too few seeds for an interval: their range, lighter (band_note says so)
        _draw_interval(ax, grid, center, values.min(axis=0), values.max(axis=0), color, alpha=0.12)
    return True


def _draw_interval(ax, grid, center, lo, hi, color, alpha: float) -> None:
    """A band along the x grid; at a single x (a metric logged once) a band has no width, so an error bar."""
    if len(grid) == 1:
        yerr = np.array([[center[0] - lo[0]], [hi[0] - center[0]]])
        ax.errorbar(grid, center, yerr=yerr, color=color, alpha=min(1.0, 4 * alpha), capsize=3, lw=1.2, linestyle="none")
    else:
        ax.fill_between(grid, lo, hi, color=color, alpha=alpha, lw=0)
