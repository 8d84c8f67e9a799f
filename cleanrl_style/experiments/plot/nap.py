"""The NaP figure: each projected layer's weight norm and effective learning rate over training."""

from __future__ import annotations

import math
from pathlib import Path

from cleanrl_style.experiments.plot.data import RunData, by_label_and_env, file_part
from cleanrl_style.experiments.plot.stats import band_note
from cleanrl_style.experiments.plot.style import (
    _colors,
    _draw_band,
    _figure_legend,
    _legend_handles,
    _pyplot,
    plain_axis,
    save_figure,
    steps_axis,
)


def layers_by_position(run: RunData) -> RunData:
    """The run with its ``nap/*/<net>.<index>`` metrics renamed ``<net> layer <k>``, k counting the
    network's logged layers in order: with and without LayerNorm the same layer sits at different
    module indices (``actor.net.3`` against ``actor.net.2``), and the figure compares it across runs."""
    indices: dict[str, list[int]] = {}
    for metric in run.series:
        if metric.startswith("nap/norm/"):
            net, _, index = metric.split("/", 2)[2].rpartition(".")
            if net and index.isdigit():
                indices.setdefault(net, []).append(int(index))
    position = {(net, i): k + 1 for net, found in indices.items() for k, i in enumerate(sorted(found))}
    renamed = {}
    for metric, values in run.series.items():
        head, _, layer = metric.rpartition("/")
        net, _, index = layer.rpartition(".")
        if head in ("nap/norm", "nap/eff_lr") and index.isdigit() and (net, int(index)) in position:
            metric = f"{head}/{net} layer {position[net, int(index)]}"
        renamed[metric] = values
    return RunData(run.env, run.seed, run.label, renamed, run.args, run.path, run.reference)


def plot_nap(runs: list[RunData], out: Path, ci: float = 0.95, n_boot: int = 1000, seed: int = 0) -> list[Path]:
    """Per env: each layer's weight norm and, below it, its effective learning rate, one line per label.

    Layers fill up to four columns, each taking two rows (norm, effective lr); a panel holds the
    same layer of every run (see :func:`layers_by_position`).
    """
    plt = _pyplot()
    paths = []
    nap_runs = [layers_by_position(r) for r in runs if any(m.startswith("nap/norm/") for m in r.series)]
    for env in sorted({r.env for r in nap_runs}):
        here = [r for r in nap_runs if r.env == env]
        layers = sorted({m.split("/", 2)[2] for r in here for m in r.series if m.startswith("nap/norm/")})
        colors = _colors(sorted({r.label for r in here}))
        ncols = min(len(layers), 4)
        nrows = 2 * math.ceil(len(layers) / ncols)
        fig, axes = plt.subplots(
            nrows, ncols, figsize=(3.4 * ncols, 2.5 * nrows), squeeze=False, sharex=True, layout="constrained"
        )
        for ax in axes.flat:
            ax.set_visible(False)
        for i, layer in enumerate(layers):
            for row, (prefix, name) in enumerate((("nap/norm/", "weight norm"), ("nap/eff_lr/", "effective lr"))):
                ax = axes[2 * (i // ncols) + row, i % ncols]
                ax.set_visible(True)
                for (label, _), group in by_label_and_env(here).items():
                    _draw_band(ax, group, prefix + layer, "step", colors[label], "mean", ci, n_boot, seed, 1, label=label)
                if row == 1:
                    ax.set_yscale("log")
                ax.set_title(f"{layer}: {name}", fontsize=9)
                ax.grid(alpha=0.3)
                ax.tick_params(labelbottom=True)
                steps_axis(ax)
                plain_axis(ax)
        for ax in axes[-1]:
            ax.set_xlabel("environment steps")
        _figure_legend(fig, _legend_handles(axes.flat), len(layers) * 2)
        fig.suptitle(f"NaP on {env}: per-layer ||W|| and lr/||W|| (mean over seeds; {band_note(ci)})")
        path = out / f"nap_{file_part(env)}.png"
        paths.append(save_figure(fig, path, dpi=110))
    return paths
