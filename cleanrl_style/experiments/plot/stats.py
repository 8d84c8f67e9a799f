"""Statistics, all from rliable: point estimates, stratified-bootstrap intervals (none under 5
seeds), the per-line summary table and its writer."""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from cleanrl_style.experiments.plot.data import RETURN, RunData, by_label_and_env, final_values

# ----- statistics (rliable) -----------------------------------------------------------------------
# Every aggregate and interval comes from rliable (Agarwal et al., 2021, "Deep Reinforcement Learning
# at the Edge of the Statistical Precipice", arXiv:2108.13264): its metrics and its stratified
# bootstrap (percentile intervals; seeds resampled within each env, never across envs).


def _rliable():
    from rliable import library, metrics

    return library, metrics


def iqm(values: np.ndarray) -> float:
    """Interquartile mean (rliable's ``aggregate_iqm``): drop the ``floor(n/4)`` lowest and highest, average the rest."""
    return float(_rliable()[1].aggregate_iqm(np.asarray(values, dtype=float)))


def iqm_per_point(scores: np.ndarray) -> np.ndarray:
    """rliable's ``aggregate_iqm`` at each point of the last axis of ``scores`` ``(runs, envs, points)``."""
    from scipy.stats import trim_mean  # what aggregate_iqm computes, here for every point at once

    return trim_mean(scores.reshape(-1, scores.shape[-1]), proportiontocut=0.25, axis=0)


def mean_per_point(scores: np.ndarray) -> np.ndarray:
    """rliable's ``aggregate_mean`` (mean over envs of the mean over runs) at each point of the last axis."""
    return _rliable()[1].aggregate_mean(scores)


ESTIMATORS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"mean": mean_per_point, "iqm": iqm_per_point}

# Below 5 seeds a percentile bootstrap is the seeds' range, not a 95% interval: with 3 seeds a resample
# of the top seed three times has probability 1/27 > 2.5%, so the interval's ends are the extreme seeds
# whatever their spread, and its coverage is nearer 75% than 95%. Fewer seeds get no interval.
MIN_SEEDS_FOR_CI = 5


def interval_method(n: int, ci: float = 0.95, min_runs: int = MIN_SEEDS_FOR_CI) -> str:
    """The interval a table reports over ``n`` seeds, named as the table names it."""
    return f"{ci:.0%} percentile bootstrap (rliable)" if n >= min_runs else f"none (n < {min_runs})"


def band_note(ci: float = 0.95) -> str:
    """What a figure's shaded band is, for its title."""
    return f"band: {ci:.0%} bootstrap CI over n >= {MIN_SEEDS_FOR_CI} seeds, the seeds' range where fewer"


def interval_estimate(
    scores: np.ndarray | list[np.ndarray],
    func: Callable[..., np.ndarray],
    ci: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    min_runs: int = MIN_SEEDS_FOR_CI,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """rliable's stratified-bootstrap interval of ``func``; returns (point estimate, low, high).

    ``scores``: an array ``(runs, envs, ...)`` (runs resampled within each env), or a list of such
    arrays resampled independently (envs or algorithms with different numbers of runs), in which
    case ``func`` takes them as separate arguments. Where an array has fewer than ``min_runs`` runs,
    low and high are NaN (see ``MIN_SEEDS_FOR_CI``).
    """
    arrays = scores if isinstance(scores, list) else [scores]
    if min(len(a) for a in arrays) < min_runs:
        point = np.asarray(func(*arrays))
        return point, np.full(point.shape, np.nan), np.full(point.shape, np.nan)
    library, _ = _rliable()
    # rliable draws its resampling indices from NumPy's global generator: seed it, then restore it.
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        points, intervals = library.get_interval_estimates(
            {"x": scores}, func, reps=n_boot, confidence_interval_size=ci, method="percentile"
        )
    finally:
        np.random.set_state(state)
    return np.asarray(points["x"]), np.asarray(intervals["x"][0]), np.asarray(intervals["x"][1])


def bootstrap_ci(
    values: np.ndarray,
    estimator: str = "mean",
    ci: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    min_runs: int = MIN_SEEDS_FOR_CI,
) -> tuple[float, float]:
    """Percentile bootstrap CI of ``estimator`` over seeds ``values`` ``(n_seeds,)`` (one env); returns
    (low, high), NaN with fewer than ``min_runs`` seeds."""
    scores = np.asarray(values, dtype=float).reshape(-1, 1, 1)
    _, low, high = interval_estimate(scores, ESTIMATORS[estimator], ci, n_boot, seed, min_runs)
    return float(low[0]), float(high[0])


def aggregate_metrics(*per_env: np.ndarray) -> np.ndarray:
    """IQM, median and mean across envs of normalized scores, one array ``(runs, 1)`` per env.

    rliable's definitions: the IQM pools every run of every env (``aggregate_iqm``); the median and
    the mean are taken over the envs' mean scores (``aggregate_median``, ``aggregate_mean``). With
    the same number of runs on every env this is rliable's functions on the ``(runs, envs)`` matrix.
    """
    _, metrics = _rliable()
    env_means = np.array([metrics.aggregate_mean(scores) for scores in per_env]).reshape(1, -1)
    return np.array(
        [
            metrics.aggregate_iqm(np.concatenate(per_env)),
            metrics.aggregate_median(env_means),
            metrics.aggregate_mean(env_means),
        ]
    )


AGGREGATES = ("iqm", "median", "mean")


def score_distribution(taus: np.ndarray) -> Callable[..., np.ndarray]:
    """The performance profile at ``taus``: the fraction of all runs (every env) scoring above each tau.

    rliable's ``score_distributions`` on the pooled runs (its ``create_performance_profile`` with
    ``use_score_distribution=True``), taking one array ``(runs, 1)`` per env.
    """
    library, _ = _rliable()
    return lambda *per_env: library.score_distributions(np.concatenate(per_env), taus)


def probability_of_improvement(n_envs: int) -> Callable[..., np.ndarray]:
    """P(X > Y) averaged over envs (rliable's ``probability_of_improvement``), from the arguments
    ``x_env1, ..., x_envN, y_env1, ..., y_envN``, each an array ``(runs, 1)``."""
    _, metrics = _rliable()

    def poi(*scores: np.ndarray) -> np.ndarray:
        xs, ys = scores[:n_envs], scores[n_envs:]
        return np.array([np.mean([metrics.probability_of_improvement(x, y) for x, y in zip(xs, ys)])])

    return poi


def seed_statistics(values: np.ndarray, mean_name: str, ci: float = 0.95, n_boot: int = 2000, seed: int = 0) -> dict:
    """A table's columns for one estimate over seeds: n, the mean (named ``mean_name``), the
    interval's method and ends (NaN under ``MIN_SEEDS_FOR_CI`` seeds), and the seeds' range."""
    values = np.asarray(values, dtype=float)
    low, high = bootstrap_ci(values, "mean", ci, n_boot, seed) if len(values) else (float("nan"), float("nan"))
    empty = not len(values)
    return {
        "seeds": len(values),
        mean_name: float("nan") if empty else float(values.mean()),
        "interval": interval_method(len(values), ci),
        "ci_low": low,
        "ci_high": high,
        "seed_min": float("nan") if empty else float(values.min()),
        "seed_max": float("nan") if empty else float(values.max()),
    }


def summary_rows(
    runs: list[RunData], metric: str = RETURN, final_fraction: float = 0.1, ci: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> list[dict]:
    """One row per (line, env): final ``metric`` mean with its bootstrap CI (none under 5 seeds; the
    ``interval`` column names the method), the seeds' lowest and highest, and the IQM."""
    rows = []
    for (label, env), group in by_label_and_env(runs).items():
        finals = final_values(group, metric, final_fraction)
        if not len(finals):
            continue
        steps = max(r.series[metric][:, 0].max() for r in group if metric in r.series)
        stats = seed_statistics(finals, "final_mean", ci, n_boot, seed)
        row = {"agent": label, "env": env, "seeds": stats.pop("seeds"), "steps": int(steps), **stats, "final_iqm": iqm(finals)}
        evals = [r.series["eval/return_mean"][-1, 2] for r in group if "eval/return_mean" in r.series]
        row["eval_mean"] = float(np.mean(evals)) if evals else float("nan")
        rows.append(row)
    return rows


def mean_difference(higher: np.ndarray, lower: np.ndarray, ci: float = 0.95, n_boot: int = 2000, seed: int = 0) -> dict:
    """``mean(higher) - mean(lower)`` over two sets of seeds, with the interval's method and ends from a
    bootstrap that resamples each set on its own (NaN ends where either has under 5 seeds)."""
    point, low, high = interval_estimate(
        [np.reshape(higher, (-1, 1)), np.reshape(lower, (-1, 1))],
        lambda u, v: np.array([u.mean() - v.mean()]),
        ci,
        n_boot,
        seed,
    )
    method = interval_method(min(len(higher), len(lower)), ci)
    return {"difference": float(point[0]), "interval": method, "ci_low": float(low[0]), "ci_high": float(high[0])}


def difference_rows(
    runs: list[RunData], metric: str = RETURN, final_fraction: float = 0.1, ci: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> list[dict]:
    """Every pair of lines on each env: the difference of their mean final ``metric`` (the higher
    line minus the lower), with a stratified-bootstrap interval that resamples each line's seeds on
    its own (none where either line has under 5 seeds). An interval above zero says the first line
    scored higher; two lines' own intervals can overlap while this one stays above zero."""
    finals: dict[str, dict[str, np.ndarray]] = {}
    for (label, env), group in by_label_and_env(runs).items():
        values = final_values(group, metric, final_fraction)
        if len(values):
            finals.setdefault(env, {})[label] = values
    rows = []
    for env, lines in finals.items():
        labels = sorted(lines, key=lambda lab: (-lines[lab].mean(), lab))
        for i, x in enumerate(labels):
            for y in labels[i + 1 :]:
                a, b = lines[x], lines[y]
                head = {"env": env, "higher": x, "lower": y, "seeds_higher": len(a), "seeds_lower": len(b)}
                rows.append(head | mean_difference(a, b, ci, n_boot, seed))
    return rows


def write_table(rows: list[dict], csv_path: Path, md_path: Path | None = None, title: str = "") -> None:
    if not rows:
        return
    fields = list(rows[0])
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    if md_path is not None:

        def fmt(v):
            if isinstance(v, float):
                return "-" if math.isnan(v) else f"{v:.4g}"
            return str(v)

        lines = [f"# {title}\n"] if title else []
        lines += ["| " + " | ".join(fields) + " |", "|" + "---|" * len(fields)]
        lines += ["| " + " | ".join(fmt(r[k]) for k in fields) + " |" for r in rows]
        md_path.write_text("\n".join(lines) + "\n")
