"""Figures and tables from run folders: learning curves, aggregates across envs, NaP, LLM metrics.

    python -m cleanrl_style.plot runs/sweep [more run folders or parents] --out plots/ [--reference]

Reads every run under the given folders (a folder with ``progress.csv`` and ``args.json``) and writes:

``curves_steps.png`` / ``curves_time.png``
    one panel per env, the metric (``--metric``, default ``charts/episodic_return``) over environment
    steps / wall-clock seconds, one line per agent or flag value: the mean across seeds with a
    bootstrap confidence band (``--estimator iqm`` for the interquartile mean instead).
``summary.md`` / ``summary.csv``
    the final return of each line on each env (mean over the last ``--final-fraction`` of a run's
    steps), mean, bootstrap CI and IQM over seeds; ``eval/return_mean`` too where runs logged it.
``aggregate.png`` / ``aggregate.csv``
    across envs: each run's final return is min-max normalized per env (over every run plotted),
    then the IQM, median and mean of a line, with stratified bootstrap CIs (seeds resampled within
    each env).
``performance_profile.png`` / ``.csv`` (runs on two envs or more)
    the score distribution of each line: the fraction of its runs whose normalized final return
    exceeds each threshold, with CI bands.
``probability_of_improvement.png`` / ``.csv`` (two lines or more, on two envs or more)
    for each pair of lines X, Y: the probability that a run of X beats a run of Y on an env picked
    at random (over the envs both ran), with its CI.
``nap_<env>.png``
    the NaP figure: per-layer weight norm and effective learning rate (``nap/norm/*``,
    ``nap/eff_lr/*``) over training, one line per agent or flag value (with and without projection).
``llm_<env>.png``
    for language-model agents: ``charts/success_rate`` (and ``charts/test_success_rate``),
    ``charts/zero_variance_fraction`` and each seed's wall time per iteration.
``llm_summary.md`` / ``llm_summary.csv``
    for language-model agents, one row per (line, env): held-out success at each evaluated
    iteration and at the last, the mean training success and zero-variance fraction over the
    iterations, and the wall time (means over seeds).

Lines are named by the sweep's label (``sweep.json``), else by the agent (``exp_name``) and the
arguments that differ between its runs; ``--group-by nap learning_rate`` names them by those
arguments instead. ``--reference`` overlays the published Gymnasium-MuJoCo curves shipped in
``cleanrl_style/reference_curves/`` (evaluation returns on the v4 tasks; Apache-2.0, see its README)
on the matching envs, cut at the runs' budget (alone: at the budget all published algorithms
reached), and adds them to the summary and the aggregates.

Statistics come from rliable (Agarwal et al., 2021, arXiv:2108.13264): the IQM drops the lowest and
the highest quarter of the values (``floor(n / 4)`` each) and averages the rest; a CI is the
``(1 - ci) / 2`` and ``(1 + ci) / 2`` percentiles of the estimate over ``--n-boot`` resamples of the
seeds, with replacement, within each env. With fewer than ``MIN_SEEDS_FOR_CI`` (5) seeds there is
no interval: tables leave it empty and name the method ``none (n < 5)``, and figures shade the seeds'
range instead, saying so in their titles.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import tyro

from cleanrl_style.logger import CSV_NAME, read_progress

RETURN = "charts/episodic_return"
LLM_METRICS = ("charts/success_rate", "charts/test_success_rate", "charts/zero_variance_fraction")
SPARSE_POINTS = 12  # a curve with at most this many logged points is drawn at them, with markers
REFERENCE_CSV = Path(__file__).resolve().parent / "reference_curves" / "gym_mujoco_v4.csv"
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


def final_value(series: np.ndarray, fraction: float = 0.1) -> float:
    """Mean of the values logged in the last ``fraction`` of the run's steps (the last value if none)."""
    steps, values = series[:, 0], series[:, 2]
    last = steps.max()
    window = values[steps >= last - fraction * last]
    return float(window.mean()) if len(window) else float(values[-1])


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


def load_reference(envs: set[str] | None = None, path: Path = REFERENCE_CSV) -> list[RunData]:
    """The published curves as runs (label ``<algorithm> (published)``, no wall time), for envs keys in ``envs``."""
    rows: dict[tuple[str, str, int], list[tuple[float, float]]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            key = (row["algorithm"], row["env_id"], int(row["seed"]))
            if envs is None or row["env_id"].split("-v")[0] in envs:
                rows.setdefault(key, []).append((float(row["env_step"]), float(row["episodic_return"])))
    runs = []
    for (algorithm, env_id, seed), points in sorted(rows.items()):
        points.sort()
        series = np.array([(s, np.nan, v) for s, v in points])
        runs.append(
            RunData(env_id, seed, f"{algorithm} (published)", {RETURN: series}, {"exp_name": algorithm}, reference=True)
        )
    return runs


def cut_at(run: RunData, max_step: float) -> RunData:
    """The run with its rows after ``max_step`` dropped (a published curve at our budget)."""
    series = {k: v[v[:, 0] <= max_step] for k, v in run.series.items()}
    series = {k: v for k, v in series.items() if len(v)}
    return RunData(run.env, run.seed, run.label, series, run.args, run.path, run.reference)


# ----- tables ------------------------------------------------------------------------------------


def by_label_and_env(runs: list[RunData]) -> dict[tuple[str, str], list[RunData]]:
    groups: dict[tuple[str, str], list[RunData]] = {}
    for r in runs:
        groups.setdefault((r.label, r.env), []).append(r)
    return dict(sorted(groups.items(), key=lambda kv: (kv[0][1], kv[1][0].reference, kv[0][0])))


def summary_rows(
    runs: list[RunData], metric: str = RETURN, final_fraction: float = 0.1, ci: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> list[dict]:
    """One row per (line, env): final ``metric`` mean with its bootstrap CI (none under 5 seeds; the
    ``interval`` column names the method), the seeds' lowest and highest, and the IQM."""
    rows = []
    for (label, env), group in by_label_and_env(runs).items():
        finals = np.array([final_value(r.series[metric], final_fraction) for r in group if metric in r.series])
        if not len(finals):
            continue
        lo, hi = bootstrap_ci(finals, "mean", ci, n_boot, seed)
        steps = max(r.series[metric][:, 0].max() for r in group if metric in r.series)
        row = {
            "agent": label,
            "env": env,
            "seeds": len(finals),
            "steps": int(steps),
            "final_mean": float(finals.mean()),
            "interval": interval_method(len(finals), ci),
            "ci_low": lo,
            "ci_high": hi,
            "seed_min": float(finals.min()),
            "seed_max": float(finals.max()),
            "final_iqm": iqm(finals),
        }
        evals = [r.series["eval/return_mean"][-1, 2] for r in group if "eval/return_mean" in r.series]
        row["eval_mean"] = float(np.mean(evals)) if evals else float("nan")
        rows.append(row)
    return rows


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


# ----- figures -----------------------------------------------------------------------------------
# Panels keep a fixed size and the figure grows around them: the legend and titles take their own
# room instead of squeezing the plots (constrained layout, legend outside the axes).


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
    # and the published curves keep their colors from figure to figure.
    palette = [plt.cm.tab10(i) for i in range(10)] + [to_rgba(c) for c in ("#b8860b", "#000080", "#7f0000", "black")]
    colors = {lab: palette[i % len(palette)] for i, lab in enumerate(sorted(own))}
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
        ax.fill_between(grid, lo, hi, color=color, alpha=0.2, lw=0)
    elif len(values) > 1:  # too few seeds for an interval: their range, lighter (band_note says so)
        ax.fill_between(grid, values.min(axis=0), values.max(axis=0), color=color, alpha=0.12, lw=0)
    return True


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
    sep = "\n" if len(envs) < 3 else " "  # a narrow figure takes the title on two lines
    fig.suptitle(f"{metric} over {'environment steps' if x == 'step' else 'wall-clock time'}{sep}({band})", fontsize=11)
    return fig


def plot_curves(runs: list[RunData], out: Path, metric: str = RETURN, x: str = "step", *args, **kwargs) -> Path | None:
    """``curves_steps.png`` (``x="step"``) or ``curves_time.png`` (``x="time"``); see :func:`curves_figure`."""
    fig = curves_figure(runs, metric, x, *args, **kwargs)
    if fig is None:
        return None
    path = out / f"curves_{'steps' if x == 'step' else 'time'}.png"
    fig.savefig(path, dpi=120)
    _pyplot().close(fig)
    return path


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
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


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
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


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
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def file_part(env: str) -> str:
    """``env`` as part of a file name: ``text/ToolUse-v0`` -> ``text_ToolUse-v0``, ``tools:bank`` -> ``tools-bank``."""
    return re.sub(r"[^\w.+-]", "-", env.replace("/", "_"))


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
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def llm_summary_rows(runs: list[RunData]) -> list[dict]:
    """One row per (line, env) of language-model runs; every figure a mean over the line's seeds."""
    rows = []
    llm_runs = [r for r in runs if any(m in r.series for m in LLM_METRICS)]

    def mean_of(group: list[RunData], metric: str, reduce: Callable[[np.ndarray], float]) -> float:
        values = [reduce(r.series[metric]) for r in group if metric in r.series and len(r.series[metric])]
        return float(np.mean(values)) if values else float("nan")

    for (label, env), group in by_label_and_env(llm_runs).items():
        tested = [r.series["charts/test_success_rate"] for r in group if "charts/test_success_rate" in r.series]
        steps = sorted({int(step) for rows_ in tested for step in rows_[:, 0]})
        by_step = {
            step: np.mean([rows_[rows_[:, 0] == step, 2][-1] for rows_ in tested if step in rows_[:, 0]]) for step in steps
        }
        logged = [r.series[m] for r in group for m in LLM_METRICS if m in r.series and len(r.series[m])]
        rows.append(
            {
                "agent": label,
                "env": env,
                "seeds": len(group),
                "iterations": int(max((rows_[:, 0].max() for rows_ in logged), default=0)),
                "test success by iteration": ", ".join(f"{step}: {value:.3f}" for step, value in by_step.items()) or "-",
                "test success (last)": float(by_step[steps[-1]]) if steps else float("nan"),
                "train success (mean)": mean_of(group, "charts/success_rate", lambda a: a[:, 2].mean()),
                "zero-variance fraction (mean)": mean_of(group, "charts/zero_variance_fraction", lambda a: a[:, 2].mean()),
                "minutes": float(np.mean([rows_[:, 1].max() / 60 for rows_ in logged])) if logged else float("nan"),
            }
        )
    return rows


def plot_llm(runs: list[RunData], out: Path, ci: float = 0.95, n_boot: int = 1000, seed: int = 0) -> list[Path]:
    """Per env: success rate (train solid, test dashed), zero-variance group fraction and wall time per step."""
    plt = _pyplot()
    paths = []
    llm_runs = [r for r in runs if any(m in r.series for m in LLM_METRICS)]
    for env in sorted({r.env for r in llm_runs}):
        here = [r for r in llm_runs if r.env == env]
        colors = _colors(sorted({r.label for r in here}))
        fig, (ax_success, ax_zero, ax_time) = plt.subplots(
            1, 3, figsize=(15, 4), layout="constrained", gridspec_kw={"width_ratios": [1, 1, 0.8]}
        )
        for (label, _), group in by_label_and_env(here).items():
            # Held-out success is evaluated every few iterations: drawn at those iterations, with markers.
            evaluated = max((len(np.unique(r.series["charts/test_success_rate"][:, 0])) for r in group
                             if "charts/test_success_rate" in r.series), default=0)  # fmt: skip
            for metric, suffix, style, points, marker in (
                ("charts/success_rate", "train", "-", 100, None),
                ("charts/test_success_rate", "test", "--", max(evaluated, 1), "o"),
            ):
                _draw_band(
                    ax_success, group, metric, "step", colors[label], "mean", ci, n_boot, seed, 1,
                    points=points, label=f"{label} ({suffix})", linestyle=style, marker=marker,
                )  # fmt: skip
            _draw_band(
                ax_zero,
                group,
                "charts/zero_variance_fraction",
                "step",
                colors[label],
                "mean",
                ci,
                n_boot,
                seed,
                1,
                label=label,
            )
            for run in group:  # wall time is a cost of each run, not a statistic: one line per seed
                rows = next((run.series[m] for m in LLM_METRICS if m in run.series and len(run.series[m])), None)
                if rows is not None:
                    ax_time.plot(rows[:, 0], rows[:, 1] / 60, color=colors[label], lw=1.2, marker=".",
                                 label=label if run is group[0] else None)  # fmt: skip
        ax_success.set_title("success rate")
        ax_zero.set_title("fraction of groups with zero reward variance")
        ax_time.set_title("wall time (each seed)")
        ax_time.set_ylabel("minutes since start")
        for ax in (ax_success, ax_zero, ax_time):
            ax.set_xlabel("iteration")  # the language-model agents' step
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        for ax in (ax_success, ax_zero):
            ax.set_ylim(-0.02, 1.02)
        fig.suptitle(f"{env} (mean over seeds; {band_note(ci)})")
        path = out / f"llm_{file_part(env)}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


# ----- command line ------------------------------------------------------------------------------


def make_all(
    runs: list[RunData],
    out: Path,
    metric: str = RETURN,
    estimator: str = "mean",
    ci: float = 0.95,
    n_boot: int = 2000,
    smooth_window: int = 1,
    final_fraction: float = 0.1,
    seed: int = 0,
) -> list[Path]:
    """Every figure and table the runs support, into ``out``; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for x in ("step", "time"):
        written.append(plot_curves(runs, out, metric, x, estimator, ci, n_boot, smooth_window, seed))
    rows = summary_rows(runs, metric, final_fraction, ci, n_boot, seed)
    if rows:
        write_table(
            rows,
            out / "summary.csv",
            out / "summary.md",
            f"Final {metric} (mean over the last {final_fraction:.0%} of steps; mean, interval (method in its "
            f"column; none under {MIN_SEEDS_FOR_CI} seeds), range and IQM over seeds)",
        )
        written += [out / "summary.csv", out / "summary.md"]
    agg = aggregate_rows(runs, metric, final_fraction, ci, n_boot, seed)
    if agg:
        write_table(agg, out / "aggregate.csv")
        written += [out / "aggregate.csv", plot_aggregate(agg, out, ci)]
    # Performance profiles and the probability of improvement compare lines across several envs.
    n_envs = len({env for per_env in normalized_scores(runs, metric, final_fraction).values() for env in per_env})
    if n_envs >= 2:
        taus, profiles = performance_profiles(runs, metric, final_fraction, ci, n_boot, seed)
        write_table(
            [
                {"agent": label, "tau": float(t), "fraction": float(p), "low": float(lo), "high": float(hi)}
                for label, (profile, low, high) in profiles.items()
                for t, p, lo, hi in zip(taus, profile, low, high)
            ],
            out / "performance_profile.csv",
        )
        written += [out / "performance_profile.csv", plot_performance_profile(taus, profiles, out, n_envs, ci)]
        improvement = improvement_rows(runs, metric, final_fraction, ci, n_boot, seed)
        if improvement:
            write_table(improvement, out / "probability_of_improvement.csv")
            written += [out / "probability_of_improvement.csv", plot_improvement(improvement, out, ci)]
    llm_rows = llm_summary_rows(runs)
    if llm_rows:
        write_table(llm_rows, out / "llm_summary.csv", out / "llm_summary.md", "Language-model runs (means over seeds)")
        written += [out / "llm_summary.csv", out / "llm_summary.md"]
    written += plot_nap(runs, out, ci, seed=seed) + plot_llm(runs, out, ci, seed=seed)
    return [p for p in written if p is not None]


def with_reference(runs: list[RunData], env_keys: set[str] | None = None) -> list[RunData]:
    """Add the published curves of the runs' envs (or of ``env_keys``), cut at each env's longest run."""
    own = [r for r in runs if not r.reference]
    budget: dict[str, float] = {}
    for r in own:
        if RETURN in r.series:
            # The run's step budget where its args say it (its last episode ends a little before it).
            longest = max(float(r.series[RETURN][:, 0].max()), float(r.args.get("total_timesteps") or 0))
            budget[r.env_key] = max(budget.get(r.env_key, 0.0), longest)
    keys = env_keys or set(budget) or None
    reference = load_reference(keys)
    for r in reference:  # an env without runs: the budget every published algorithm reached (1M steps)
        if r.env_key not in {o.env_key for o in own}:
            longest = max(x.series[RETURN][:, 0].max() for x in reference if x.env_key == r.env_key and x.label == r.label)
            budget[r.env_key] = min(budget.get(r.env_key, math.inf), float(longest))
    reference = [cut_at(r, budget[r.env_key]) for r in reference]
    # A published curve logged too sparsely to reach near the budget (SimbaV2: every 50k steps) says nothing there.
    reference = [
        r
        for r in reference
        if RETURN in r.series and len(r.series[RETURN]) >= 2 and r.series[RETURN][-1, 0] >= 0.5 * budget[r.env_key]
    ]
    return own + reference


@dataclass
class PlotArgs:
    """Figures and tables from run folders (see the module docstring for each file written)."""

    paths: Annotated[list[str], tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR ...")] = field(default_factory=list)
    """run folders, or folders holding them (searched recursively)"""
    out: Annotated[str | None, tyro.conf.arg(metavar="DIR")] = None
    """where to write (default: <first path>/plots, or plots/)"""
    metric: str = RETURN
    """the logged metric to draw and summarize"""
    estimator: Literal["mean", "iqm"] = "mean"
    """across seeds, at each point of a curve"""
    ci: float = 0.95
    """confidence level of the bootstrap intervals"""
    n_boot: int = 2000
    """bootstrap resamples"""
    smooth: int = 1
    """moving average over this many logged points"""
    final_fraction: float = 0.1
    """final return: the mean over this last part of a run's steps"""
    group_by: list[str] | None = None
    """name lines by these args.json keys"""
    reference: bool = False
    """overlay the published Gymnasium-MuJoCo curves"""
    envs: list[str] | None = None
    """only these envs (short names, e.g. Hopper Ant)"""
    seed: int = 0
    """seed of the bootstrap"""


def main(argv: list[str] | None = None) -> int:
    args = tyro.cli(PlotArgs, args=argv, prog="python -m cleanrl_style.plot", description=__doc__)
    if not args.paths and not args.reference:
        raise SystemExit("python -m cleanrl_style.plot: give run folders, or --reference to draw the published curves alone")
    runs = load_runs(args.paths, args.group_by) if args.paths else []
    if args.paths and not runs:
        raise SystemExit(f"python -m cleanrl_style.plot: no runs (folders with {CSV_NAME} and args.json) under {args.paths}")
    env_keys = {e.split("-v")[0] for e in args.envs} if args.envs else None
    if env_keys:
        runs = [r for r in runs if r.env_key in env_keys]
    if args.reference:
        runs = with_reference(runs, env_keys)
    out = Path(args.out) if args.out else (Path(args.paths[0]) / "plots" if args.paths else Path("plots"))
    written = make_all(
        runs, out, args.metric, args.estimator, args.ci, args.n_boot, args.smooth, args.final_fraction, args.seed
    )
    print(
        f"{len([r for r in runs if not r.reference])} runs" + (" + published curves" if args.reference else "") + f" -> {out}"
    )
    for path in written:
        print(f"  {path}")
    for table in ("summary.md", "llm_summary.md"):
        if out / table in written:
            print((out / table).read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
