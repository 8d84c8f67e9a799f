"""Across envs: normalized scores, the IQM, median and mean of each line, performance profiles and
the probability of improvement, as tables and figures."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from cleanrl_style.experiments.plot.data import RETURN, RunData, final_value
from cleanrl_style.experiments.plot.stats import (
    AGGREGATES,
    MIN_SEEDS_FOR_CI,
    aggregate_metrics,
    interval_estimate,
    interval_method,
    probability_of_improvement,
    score_distribution,
)
from cleanrl_style.experiments.plot.style import _colors, _figure_legend, _legend_handles, _pyplot, save_figure


def normalized_scores(
    runs: list[RunData], metric: str = RETURN, final_fraction: float = 0.1
) -> dict[str, dict[str, np.ndarray]]:
    """Final scores min-max normalized per env: ``{label: {env: scores (runs, 1)}}``.

    An env's normalization spans the final scores of every run on it (all lines), so 0 is the worst
    run and 1 the best; published curves, when given, take part like any other line. An env on which
    every run scored the same (all solved it) tells the lines nothing apart and is left out.
    """
    finals = {id(r): final_value(r.series[metric], final_fraction) for r in runs if metric in r.series}
    bounds: dict[str, tuple[float, float]] = {}
    for r in runs:
        if id(r) in finals:
            lo, hi = bounds.get(r.env_key, (math.inf, -math.inf))
            bounds[r.env_key] = (min(lo, finals[id(r)]), max(hi, finals[id(r)]))
    per_label: dict[str, dict[str, list[float]]] = {}
    for r in sorted(runs, key=lambda r: (r.label, r.env_key, r.seed)):
        if id(r) in finals and bounds[r.env_key][1] > bounds[r.env_key][0]:
            lo, hi = bounds[r.env_key]
            per_label.setdefault(r.label, {}).setdefault(r.env_key, []).append((finals[id(r)] - lo) / (hi - lo))
    return {
        label: {env: np.array(v).reshape(-1, 1) for env, v in sorted(per_env.items())} for label, per_env in per_label.items()
    }


def aggregate_rows(
    runs: list[RunData], metric: str = RETURN, final_fraction: float = 0.1, ci: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> list[dict]:
    """Per line, across envs: IQM, median and mean of the normalized final scores, stratified bootstrap CIs."""
    rows = []
    for label, per_env in normalized_scores(runs, metric, final_fraction).items():
        groups = list(per_env.values())
        point, low, high = interval_estimate(groups, aggregate_metrics, ci, n_boot, seed)
        row = {
            "agent": label,
            "envs": len(groups),
            "env_names": " ".join(per_env),
            "runs": sum(len(g) for g in groups),
            "interval": interval_method(min(len(g) for g in groups), ci),
        }
        for i, name in enumerate(AGGREGATES):
            row.update({name: float(point[i]), f"{name}_low": float(low[i]), f"{name}_high": float(high[i])})
        rows.append(row)
    return rows


def performance_profiles(
    runs: list[RunData],
    metric: str = RETURN,
    final_fraction: float = 0.1,
    ci: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    taus: np.ndarray | None = None,
) -> tuple[np.ndarray, dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """Per line: the fraction of its runs (all envs) whose normalized final score exceeds each tau, with CIs.

    Returns ``(taus, {label: (profile, low, high)})``.
    """
    taus = np.linspace(0.0, 1.0, 101) if taus is None else np.asarray(taus, dtype=float)
    profiles = {}
    for label, per_env in normalized_scores(runs, metric, final_fraction).items():
        profiles[label] = interval_estimate(list(per_env.values()), score_distribution(taus), ci, n_boot, seed)
    return taus, profiles


def improvement_rows(
    runs: list[RunData], metric: str = RETURN, final_fraction: float = 0.1, ci: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> list[dict]:
    """P(X > Y) for every pair of lines, over the envs both ran: the probability that a run of X
    scores above a run of Y on an env picked at random, with a stratified bootstrap CI.

    Each pair appears once, X being the line with the higher aggregate IQM (so P is mostly >= 0.5).
    """
    scores = normalized_scores(runs, metric, final_fraction)
    order = {label: aggregate_metrics(*per_env.values())[0] for label, per_env in scores.items()}
    labels = sorted(scores, key=lambda lab: (-order[lab], lab))
    rows = []
    for i, x in enumerate(labels):
        for y in labels[i + 1 :]:
            shared = sorted(set(scores[x]) & set(scores[y]))
            if not shared:
                continue
            arrays = [scores[x][e] for e in shared] + [scores[y][e] for e in shared]
            point, low, high = interval_estimate(arrays, probability_of_improvement(len(shared)), ci, n_boot, seed)
            rows.append(
                {
                    "x": x,
                    "y": y,
                    "envs": len(shared),
                    "env_names": " ".join(shared),
                    "probability": float(point[0]),
                    "low": float(low[0]),
                    "high": float(high[0]),
                }
            )
    return rows


def plot_aggregate(rows: list[dict], out: Path, ci: float = 0.95) -> Path | None:
    """IQM, median and mean of normalized final scores per line, with their CIs (horizontal bars)."""
    if not rows:
        return None
    plt = _pyplot()
    rows = sorted(rows, key=lambda r: r["iqm"])
    colors = _colors([r["agent"] for r in rows])
    fig, axes = plt.subplots(
        1,
        len(AGGREGATES),
        figsize=(3.4 * len(AGGREGATES), 0.45 * len(rows) + 1.4),
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
    for ax, key in zip(axes[0], AGGREGATES):
        for i, r in enumerate(rows):
            if not math.isnan(r[f"{key}_low"]):  # no bar where a line has under 5 runs on an env
                ax.barh(
                    i,
                    r[f"{key}_high"] - r[f"{key}_low"],
                    left=r[f"{key}_low"],
                    height=0.6,
                    color=colors[r["agent"]],
                    alpha=0.6,
                )
            ax.plot([r[key], r[key]], [i - 0.3, i + 0.3], color="black", lw=1.5)
        ax.set_yticks(range(len(rows)), [f"{r['agent']} ({r['envs']} envs, {r['runs']} runs)" for r in rows])
        ax.set_title({"iqm": "IQM", "median": "Median", "mean": "Mean"}[key], fontsize=10)
        lows = [r[f"{key}_low"] for r in rows if not math.isnan(r[f"{key}_low"])]
        highs = [r[f"{key}_high"] for r in rows if not math.isnan(r[f"{key}_high"])]
        ax.set_xlim(min([0.0, *lows]) - 0.02, max([1.0, *highs]) + 0.02)
        ax.grid(axis="x", alpha=0.3)
    fig.supxlabel("final return, min-max normalized per env", fontsize=10)
    fig.suptitle(
        f"Aggregate across envs ({ci:.0%} stratified bootstrap CI, rliable; none under {MIN_SEEDS_FOR_CI} runs)", fontsize=11
    )
    path = out / "aggregate.png"
    return save_figure(fig, path)


def plot_performance_profile(
    taus: np.ndarray, profiles: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], out: Path, n_envs: int, ci: float = 0.95
) -> Path | None:
    """Score distributions: the fraction of runs above each normalized score, one line per label."""
    if not profiles:
        return None
    plt = _pyplot()
    colors = _colors(sorted(profiles))
    fig, ax = plt.subplots(figsize=(5.2, 3.8), layout="constrained")
    for label, (profile, low, high) in sorted(profiles.items(), key=lambda kv: -kv[1][0].mean()):
        linestyle = "--" if label.endswith("(published)") else "-"
        ax.plot(taus, profile, color=colors[label], lw=1.8, label=label, linestyle=linestyle)
        ax.fill_between(taus, low, high, color=colors[label], alpha=0.2, lw=0)
    ax.set_xlabel(r"normalized final return $\tau$ (min-max per env)")
    ax.set_ylabel(r"fraction of runs with score > $\tau$")
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    _figure_legend(fig, _legend_handles([ax]), 1)
    fig.suptitle(
        f"Performance profile over {n_envs} envs "
        f"({ci:.0%} stratified bootstrap CI, rliable; none under {MIN_SEEDS_FOR_CI} runs)",
        fontsize=11,
    )
    path = out / "performance_profile.png"
    return save_figure(fig, path)


def plot_improvement(rows: list[dict], out: Path, ci: float = 0.95) -> Path | None:
    """P(X > Y) for each pair of lines, with its CI; 0.5 is no difference."""
    if not rows:
        return None
    plt = _pyplot()
    width = 0.075 * max(max(len(r["x"]), len(r["y"]) + 2) for r in rows) + 5.5
    fig, ax = plt.subplots(figsize=(width, 0.7 * len(rows) + 1.5), layout="constrained")
    for i, r in enumerate(reversed(rows)):
        if not math.isnan(r["low"]):  # no bar where a line has under 5 runs on an env
            ax.barh(i, r["high"] - r["low"], left=r["low"], height=0.5, color="tab:blue", alpha=0.5)
        ax.plot([r["probability"]] * 2, [i - 0.25, i + 0.25], color="black", lw=1.5)
    ax.set_yticks(range(len(rows)), [f"{r['x']}\n> {r['y']} ({r['envs']} envs)" for r in reversed(rows)], fontsize=9)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.axvline(0.5, color="gray", ls="--", lw=1)
    ax.set_xlim(0, 1)
    ax.set_xlabel("P(X > Y); 0.5: no difference")
    ax.grid(axis="x", alpha=0.3)
    fig.suptitle(
        f"Probability of improvement ({ci:.0%} stratified bootstrap CI, rliable; none under {MIN_SEEDS_FOR_CI} runs)",
        fontsize=11,
    )
    path = out / "probability_of_improvement.png"
    return save_figure(fig, path)
