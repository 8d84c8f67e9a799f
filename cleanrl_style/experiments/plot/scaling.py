"""Scaling studies: each line's final return against its critic's parameter count.

Runs that log ``model/critic_parameters`` (``sac_simba`` does, at step 0) are grouped by
architecture (their ``encoder`` argument) and env; each (line, env) is one point, at its parameter
count, with its mean final return over seeds and its interval. SimBa's claim (Lee et al., 2025,
arXiv:2410.09754) is that the return grows with the parameters under SimBa and not under an MLP.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from cleanrl_style.experiments.plot.data import RETURN, RunData, by_label_and_env, file_part, final_values
from cleanrl_style.experiments.plot.stats import band_note, mean_difference, seed_statistics
from cleanrl_style.experiments.plot.style import _colors, _pyplot, save_figure

PARAMETERS = "model/critic_parameters"


def _points(runs: list[RunData], metric: str, final_fraction: float) -> list[tuple[dict, np.ndarray]]:
    """Each (line, env) whose runs logged their parameter count: its key columns and its seeds' final
    ``metric``, sorted by env, architecture and parameter count."""
    points = []
    for (label, env), group in by_label_and_env(runs).items():
        group = [r for r in group if PARAMETERS in r.series and metric in r.series]
        if not group:
            continue
        key = {
            "agent": label,
            "env": env,
            "architecture": str(group[0].args.get("encoder", group[0].args.get("exp_name", label))),
            "critic_parameters": int(group[0].series[PARAMETERS][0, 2]),
        }
        points.append((key, final_values(group, metric, final_fraction)))
    return sorted(points, key=lambda p: (p[0]["env"], p[0]["architecture"], p[0]["critic_parameters"]))


def scaling_rows(
    runs: list[RunData], metric: str = RETURN, final_fraction: float = 0.1, ci: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> list[dict]:
    """One row per (line, env) whose runs logged their parameter count: the architecture, the count,
    n, the mean final ``metric`` and its interval (none under 5 seeds)."""
    return [
        {**key, **seed_statistics(finals, "final_mean", ci, n_boot, seed)}
        for key, finals in _points(runs, metric, final_fraction)
    ]


def growth_rows(
    runs: list[RunData], metric: str = RETURN, final_fraction: float = 0.1, ci: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> list[dict]:
    """What each step up in size gains: for each architecture and env, every pair of consecutive
    parameter counts, the difference of their mean final ``metric`` (larger minus smaller) with a
    stratified-bootstrap interval that resamples each point's seeds on its own (none where either
    point has under 5 seeds). An interval above zero says the larger network scored higher."""
    points = _points(runs, metric, final_fraction)
    rows = []
    for (a, x), (b, y) in zip(points, points[1:]):
        if (a["env"], a["architecture"]) != (b["env"], b["architecture"]):
            continue
        gain = mean_difference(y, x, ci, n_boot, seed)  # larger minus smaller
        rows.append(
            {
                "env": a["env"],
                "architecture": a["architecture"],
                "from_parameters": a["critic_parameters"],
                "to_parameters": b["critic_parameters"],
                "seeds_from": len(x),
                "seeds_to": len(y),
                "gain": gain.pop("difference"),
                **gain,
            }
        )
    return rows


def error_bar_ends(rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Each point's bar: its bootstrap interval where it has one (n >= 5), else its seeds' range,
    point by point, so one thin point does not take the intervals from the others on its line."""
    has_ci = [not np.isnan(r["ci_low"]) for r in rows]
    low = np.array([r["ci_low"] if ok else r["seed_min"] for r, ok in zip(rows, has_ci)])
    high = np.array([r["ci_high"] if ok else r["seed_max"] for r, ok in zip(rows, has_ci)])
    return low, high


def plot_scaling(rows: list[dict], out: Path, ci: float = 0.95, metric: str = RETURN) -> list[Path]:
    """``scaling_<env>.png`` for each env where an architecture has two parameter counts or more."""
    plt = _pyplot()
    from matplotlib import ticker

    paths = []
    for env in sorted({r["env"] for r in rows}):
        here = [r for r in rows if r["env"] == env]
        architectures = sorted({r["architecture"] for r in here})
        if max(len({r["critic_parameters"] for r in here if r["architecture"] == a}) for a in architectures) < 2:
            continue
        colors = _colors(architectures)
        fig, ax = plt.subplots(figsize=(5.2, 3.8), layout="constrained")
        for arch in architectures:
            points = [r for r in here if r["architecture"] == arch]
            x = np.array([r["critic_parameters"] for r in points], dtype=float)
            y = np.array([r["final_mean"] for r in points])
            low, high = error_bar_ends(points)
            n = sorted({r["seeds"] for r in points})
            ax.errorbar(
                x,
                y,
                yerr=[y - low, high - y],
                marker="o",
                capsize=3,
                color=colors[arch],
                label=f"{arch} (n={'/'.join(map(str, n))})",
            )
        ax.set_xscale("log")
        ax.set_xlabel("critic parameters (all critics)")
        ax.set_ylabel(f"final {metric}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        bars = band_note(ci).replace("band:", "bars:")
        ax.set_title(
            f"{env}: final {metric} against critic size\n" + textwrap.fill(f"(mean over seeds; {bars})", 70), fontsize=8
        )
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        paths.append(save_figure(fig, out / f"scaling_{file_part(env)}.png"))
    return paths
