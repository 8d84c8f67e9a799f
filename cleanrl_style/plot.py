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
    then the IQM and the mean of all runs of a line, with stratified bootstrap CIs (seeds resampled
    within each env).
``nap_<env>.png``
    the NaP figure: per-layer weight norm and effective learning rate (``nap/norm/*``,
    ``nap/eff_lr/*``) over training, one line per agent or flag value (with and without projection).
``llm_<env>.png``
    for language-model agents: ``charts/success_rate`` (and ``charts/test_success_rate``) and
    ``charts/zero_variance_fraction`` per step.

Lines are named by the sweep's label (``sweep.json``), else by the agent (``exp_name``) and the
arguments that differ between its runs; ``--group-by nap learning_rate`` names them by those
arguments instead. ``--reference`` overlays the published Gymnasium-MuJoCo curves shipped in
``cleanrl_style/reference_curves/`` (evaluation returns on the v4 tasks; Apache-2.0, see its README)
on the matching envs, cut at the runs' budget (alone: at the budget all published algorithms
reached), and adds them to the summary and the aggregate.

IQM: the mean of the values left after dropping the lowest and the highest ``floor(n / 4)``.
Bootstrap CI: the ``(1 - ci) / 2`` and ``(1 + ci) / 2`` percentiles of the estimate over
``--n-boot`` resamples of the seeds, with replacement.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cleanrl_style.logger import CSV_NAME, read_progress

RETURN = "charts/episodic_return"
LLM_METRICS = ("charts/success_rate", "charts/test_success_rate", "charts/zero_variance_fraction")
REFERENCE_CSV = Path(__file__).resolve().parent / "reference_curves" / "gym_mujoco_v4.csv"
# Arguments that do not make two runs different experiments (they never name a line).
NOT_HYPERPARAMETERS = {
    "env",
    "seed",
    "exp_name",
    "run_dir",
    "resume",
    "progress_bar",
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


# ----- statistics --------------------------------------------------------------------------------


def iqm(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """Interquartile mean along ``axis``: drop the ``floor(n/4)`` lowest and highest, average the rest."""
    values = np.sort(np.asarray(values, dtype=float), axis=axis)
    n = values.shape[axis]
    cut = n // 4
    return np.take(values, np.arange(cut, n - cut), axis=axis).mean(axis=axis)


def mean(values: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.asarray(values, dtype=float).mean(axis=axis)


ESTIMATORS: dict[str, Callable[..., np.ndarray]] = {"mean": mean, "iqm": iqm}


def bootstrap_ci(
    values: np.ndarray,
    estimator: Callable = mean,
    ci: float = 0.95,
    n_boot: int = 2000,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap over the first axis (the seeds) of ``values`` ``(n_seeds, ...)``; returns (low, high)."""
    rng = rng if rng is not None else np.random.default_rng(0)
    values = np.asarray(values, dtype=float)
    idx = rng.integers(0, len(values), size=(n_boot, len(values)))
    estimates = estimator(values[idx], axis=1)  # (n_boot, ...)
    return np.percentile(estimates, 100 * (1 - ci) / 2, axis=0), np.percentile(estimates, 100 * (1 + ci) / 2, axis=0)


def stratified_bootstrap_ci(
    groups: list[np.ndarray],
    estimator: Callable = iqm,
    ci: float = 0.95,
    n_boot: int = 2000,
    rng: np.random.Generator | None = None,
) -> tuple[float, float, float]:
    """Estimate over the pooled ``groups`` (one array of scores per env) and its CI, resampling within each group."""
    rng = rng if rng is not None else np.random.default_rng(0)
    pooled = np.concatenate(groups)
    samples = np.concatenate([g[rng.integers(0, len(g), size=(n_boot, len(g)))] for g in groups], axis=1)
    estimates = estimator(samples, axis=1)
    return (
        float(estimator(pooled)),
        float(np.percentile(estimates, 100 * (1 - ci) / 2)),
        float(np.percentile(estimates, 100 * (1 + ci) / 2)),
    )


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
    runs: list[RunData], metric: str, x: str = "step", points: int = 100, smooth_window: int = 1
) -> tuple[np.ndarray, np.ndarray] | None:
    """Each run's metric interpolated on a shared grid ``(points,)``; returns (grid, values ``(runs, points)``).

    The grid spans the range every run covers, so each point averages the same seeds.
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
    grid = np.linspace(lo, hi, points) if hi > lo else np.array([hi])
    return grid, np.stack([np.interp(grid, xs, ys) for xs, ys in data])


# ----- loading -----------------------------------------------------------------------------------


def _resolved_env(env: str) -> str:
    try:
        from envs.registry import resolve_env_id

        return resolve_env_id(env)
    except Exception:  # an env registered only in the process that trained it
        return env


def find_run_dirs(paths: list[str | Path]) -> list[Path]:
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


def load_runs(paths: list[str | Path], group_by: list[str] | None = None) -> list[RunData]:
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
    """One row per (line, env): final ``metric`` mean, bootstrap CI and IQM over seeds."""
    rng = np.random.default_rng(seed)
    rows = []
    for (label, env), group in by_label_and_env(runs).items():
        finals = np.array([final_value(r.series[metric], final_fraction) for r in group if metric in r.series])
        if not len(finals):
            continue
        lo, hi = bootstrap_ci(finals, mean, ci, n_boot, rng)
        steps = max(r.series[metric][:, 0].max() for r in group if metric in r.series)
        row = {
            "agent": label,
            "env": env,
            "seeds": len(finals),
            "steps": int(steps),
            "final_mean": float(finals.mean()),
            "ci_low": float(lo),
            "ci_high": float(hi),
            "final_iqm": float(iqm(finals)),
        }
        evals = [r.series["eval/return_mean"][-1, 2] for r in group if "eval/return_mean" in r.series]
        row["eval_mean"] = float(np.mean(evals)) if evals else float("nan")
        rows.append(row)
    return rows


def aggregate_rows(
    runs: list[RunData], metric: str = RETURN, final_fraction: float = 0.1, ci: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> list[dict]:
    """Per line, across envs: IQM and mean of min-max normalized final scores with stratified bootstrap CIs.

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
    rng = np.random.default_rng(seed)
    per_label: dict[str, dict[str, list[float]]] = {}
    for r in runs:
        if id(r) in finals and bounds[r.env_key][1] > bounds[r.env_key][0]:
            lo, hi = bounds[r.env_key]
            score = (finals[id(r)] - lo) / (hi - lo)
            per_label.setdefault(r.label, {}).setdefault(r.env_key, []).append(score)
    rows = []
    for label, per_env in per_label.items():
        groups = [np.array(v) for _, v in sorted(per_env.items())]
        iqm_point, iqm_lo, iqm_hi = stratified_bootstrap_ci(groups, iqm, ci, n_boot, rng)
        mean_point, mean_lo, mean_hi = stratified_bootstrap_ci(groups, mean, ci, n_boot, rng)
        rows.append(
            {
                "agent": label,
                "envs": len(groups),
                "env_names": " ".join(sorted(per_env)),
                "runs": sum(len(g) for g in groups),
                "iqm": iqm_point,
                "iqm_low": iqm_lo,
                "iqm_high": iqm_hi,
                "mean": mean_point,
                "mean_low": mean_lo,
                "mean_high": mean_hi,
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
            return f"{v:.4g}" if isinstance(v, float) else str(v)

        lines = [f"# {title}\n"] if title else []
        lines += ["| " + " | ".join(fields) + " |", "|" + "---|" * len(fields)]
        lines += ["| " + " | ".join(fmt(r[k]) for k in fields) + " |" for r in rows]
        md_path.write_text("\n".join(lines) + "\n")


# ----- figures -----------------------------------------------------------------------------------


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _colors(labels: list[str]) -> dict[str, tuple]:
    plt = _pyplot()
    own = [lab for lab in labels if not lab.endswith("(published)")]
    published = [lab for lab in labels if lab.endswith("(published)")]
    colors = {lab: plt.cm.tab10(i % 10) for i, lab in enumerate(sorted(own))}
    colors.update({lab: plt.cm.Dark2(i % 8) for i, lab in enumerate(sorted(published))})
    return colors


def _panels(n: int, width: float = 4.2, height: float = 3.2, ncols: int = 3):
    plt = _pyplot()
    ncols = min(ncols, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _draw_band(
    ax,
    runs: list[RunData],
    metric: str,
    x: str,
    color,
    estimator: str,
    ci: float,
    n_boot: int,
    rng,
    smooth_window: int,
    points: int = 100,
    label: str | None = None,
    linestyle: str = "-",
) -> bool:
    curve = curves_on_grid(runs, metric, x, points, smooth_window)
    if curve is None:
        return False
    grid, values = curve
    center = ESTIMATORS[estimator](values, axis=0)
    # A metric logged once (a final test success rate) is a point, drawn as a marker.
    ax.plot(grid, center, color=color, label=label, linestyle=linestyle, lw=1.6, marker="o" if len(grid) == 1 else None)
    if len(values) > 1:
        lo, hi = bootstrap_ci(values, ESTIMATORS[estimator], ci, n_boot, rng)
        ax.fill_between(grid, lo, hi, color=color, alpha=0.2, lw=0)
    return True


def plot_curves(
    runs: list[RunData],
    out: Path,
    metric: str = RETURN,
    x: str = "step",
    estimator: str = "mean",
    ci: float = 0.95,
    n_boot: int = 2000,
    smooth_window: int = 1,
    seed: int = 0,
) -> Path | None:
    """One panel per env, one line (estimator across seeds, CI band) per label."""
    runs = [r for r in runs if metric in r.series and (x == "step" or not r.reference)]
    envs = sorted({r.env_key for r in runs})
    if not envs:
        return None
    rng = np.random.default_rng(seed)
    colors = _colors(sorted({r.label for r in runs}))
    fig, axes = _panels(len(envs))
    for ax, env_key in zip(axes, envs):
        here = [r for r in runs if r.env_key == env_key]
        for (label, _), group in by_label_and_env(here).items():
            _draw_band(
                ax,
                group,
                metric,
                x,
                colors[label],
                estimator,
                ci,
                n_boot,
                rng,
                smooth_window,
                label=label,
                linestyle="--" if group[0].reference else "-",
            )
        ax.set_title(" / ".join(sorted({r.env for r in here})))
        ax.set_xlabel("environment steps" if x == "step" else "wall-clock time (s)")
        ax.set_ylabel(metric.split("/")[-1].replace("_", " "))
        ax.grid(alpha=0.3)
    handles = {}
    for ax in axes:
        for handle, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, handle)
    handles = dict(sorted(handles.items(), key=lambda kv: (kv[0].endswith("(published)"), kv[0])))
    band = f"{'IQM' if estimator == 'iqm' else 'mean'} across seeds, {ci:.0%} bootstrap CI"
    ncol = max(1, min(len(handles), int(fig.get_figwidth() // 3.2)))
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="lower center",
        ncol=ncol,
        frameon=False,
        bbox_to_anchor=(0.5, 0.0),
        fontsize=9,
    )
    fig.suptitle(f"{metric} over {'environment steps' if x == 'step' else 'wall-clock time'}\n({band})", fontsize=11)
    legend_rows = math.ceil(len(handles) / ncol)
    fig.tight_layout(rect=(0, min(0.5, 0.3 * legend_rows / fig.get_figheight()), 1, 1))
    path = out / f"curves_{'steps' if x == 'step' else 'time'}.png"
    fig.savefig(path, dpi=120)
    _pyplot().close(fig)
    return path


def plot_aggregate(rows: list[dict], out: Path, ci: float = 0.95) -> Path | None:
    if not rows:
        return None
    plt = _pyplot()
    rows = sorted(rows, key=lambda r: r["iqm"])
    colors = _colors([r["agent"] for r in rows])
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.6 * len(rows) + 1.6), sharey=True, squeeze=False)
    for ax, key, title in zip(axes[0], ("iqm", "mean"), ("IQM", "Mean")):
        for i, r in enumerate(rows):
            ax.barh(
                i, r[f"{key}_high"] - r[f"{key}_low"], left=r[f"{key}_low"], height=0.6, color=colors[r["agent"]], alpha=0.6
            )
            ax.plot([r[key], r[key]], [i - 0.3, i + 0.3], color="black", lw=1.5)
        ax.set_yticks(range(len(rows)), [f"{r['agent']} ({r['envs']} envs, {r['runs']} runs)" for r in rows])
        ax.set_title(f"{title}, {ci:.0%} stratified bootstrap CI", fontsize=10)
        ax.set_xlabel("final return, min-max normalized per env")
        ax.set_xlim(min(0.0, min(r[f"{key}_low"] for r in rows)) - 0.02, max(1.0, max(r[f"{key}_high"] for r in rows)) + 0.02)
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    path = out / "aggregate.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_nap(runs: list[RunData], out: Path, ci: float = 0.95, n_boot: int = 1000, seed: int = 0) -> list[Path]:
    """Per env: per-layer weight norm (top) and effective learning rate (bottom), one line per label."""
    plt = _pyplot()
    paths = []
    nap_runs = [r for r in runs if any(m.startswith("nap/norm/") for m in r.series)]
    rng = np.random.default_rng(seed)
    for env in sorted({r.env for r in nap_runs}):
        here = [r for r in nap_runs if r.env == env]
        layers = sorted({m.split("/", 2)[2] for r in here for m in r.series if m.startswith("nap/norm/")})
        colors = _colors(sorted({r.label for r in here}))
        fig, axes = plt.subplots(2, len(layers), figsize=(3.2 * len(layers), 5.6), squeeze=False, sharex=True)
        for col, layer in enumerate(layers):
            for row, (prefix, name) in enumerate((("nap/norm/", "weight norm"), ("nap/eff_lr/", "effective lr"))):
                ax = axes[row, col]
                for (label, _), group in by_label_and_env(here).items():
                    _draw_band(
                        ax,
                        group,
                        prefix + layer,
                        "step",
                        colors[label],
                        "mean",
                        ci,
                        n_boot,
                        rng,
                        1,
                        label=label if (row, col) == (0, 0) else None,
                    )
                if row == 1:
                    ax.set_yscale("log")
                    ax.set_xlabel("environment steps")
                ax.set_title(f"{layer}: {name}", fontsize=9)
                ax.grid(alpha=0.3)
        fig.legend(loc="lower center", ncol=4, frameon=False)
        fig.suptitle(f"NaP on {env}: per-layer ||W|| and lr/||W|| (mean over seeds)")
        fig.tight_layout(rect=(0, 0.07, 1, 1))
        path = out / f"nap_{env.replace('/', '_')}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def plot_llm(runs: list[RunData], out: Path, ci: float = 0.95, n_boot: int = 1000, seed: int = 0) -> list[Path]:
    """Per env: success rate (train solid, test dashed) and zero-variance group fraction per step."""
    plt = _pyplot()
    paths = []
    llm_runs = [r for r in runs if any(m in r.series for m in LLM_METRICS)]
    rng = np.random.default_rng(seed)
    for env in sorted({r.env for r in llm_runs}):
        here = [r for r in llm_runs if r.env == env]
        colors = _colors(sorted({r.label for r in here}))
        fig, (ax_success, ax_zero) = plt.subplots(1, 2, figsize=(11, 4))
        for (label, _), group in by_label_and_env(here).items():
            _draw_band(
                ax_success,
                group,
                "charts/success_rate",
                "step",
                colors[label],
                "mean",
                ci,
                n_boot,
                rng,
                1,
                label=f"{label} (train)",
            )
            _draw_band(
                ax_success,
                group,
                "charts/test_success_rate",
                "step",
                colors[label],
                "mean",
                ci,
                n_boot,
                rng,
                1,
                label=f"{label} (test)",
                linestyle="--",
            )
            _draw_band(
                ax_zero, group, "charts/zero_variance_fraction", "step", colors[label], "mean", ci, n_boot, rng, 1, label=label
            )
        ax_success.set_title("success rate")
        ax_zero.set_title("fraction of groups with zero reward variance")
        for ax in (ax_success, ax_zero):
            ax.set_xlabel("step")
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(f"{env} (mean over seeds, {ci:.0%} bootstrap CI)")
        fig.tight_layout()
        path = out / f"llm_{env.replace('/', '_')}.png"
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
            f"Final {metric} (mean over the last {final_fraction:.0%} of steps; mean, {ci:.0%} CI and IQM over seeds)",
        )
        written += [out / "summary.csv", out / "summary.md"]
    agg = aggregate_rows(runs, metric, final_fraction, ci, n_boot, seed)
    if agg:
        write_table(agg, out / "aggregate.csv")
        written += [out / "aggregate.csv", plot_aggregate(agg, out, ci)]
    written += plot_nap(runs, out, ci, seed=seed) + plot_llm(runs, out, ci, seed=seed)
    return [p for p in written if p is not None]


def with_reference(runs: list[RunData], env_keys: set[str] | None = None) -> list[RunData]:
    """Add the published curves of the runs' envs (or of ``env_keys``), cut at each env's longest run."""
    own = [r for r in runs if not r.reference]
    budget = {}
    for r in own:
        if RETURN in r.series:
            budget[r.env_key] = max(budget.get(r.env_key, 0.0), float(r.series[RETURN][:, 0].max()))
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cleanrl_style.plot",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 2)[2],
    )
    parser.add_argument("paths", nargs="*", help="run folders, or folders holding them (searched recursively)")
    parser.add_argument("--out", default=None, help="where to write (default: <first path>/plots, or plots/)")
    parser.add_argument("--metric", default=RETURN)
    parser.add_argument("--estimator", choices=sorted(ESTIMATORS), default="mean", help="across seeds, per curve point")
    parser.add_argument("--ci", type=float, default=0.95, help="confidence level of the bootstrap intervals")
    parser.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples")
    parser.add_argument("--smooth", type=int, default=1, help="moving average over this many logged points")
    parser.add_argument("--final-fraction", type=float, default=0.1, help="final return: mean over this last part of steps")
    parser.add_argument("--group-by", nargs="+", default=None, help="name lines by these args.json keys")
    parser.add_argument("--reference", action="store_true", help="overlay the published Gymnasium-MuJoCo curves")
    parser.add_argument("--envs", nargs="+", default=None, help="only these envs (short names, e.g. Hopper Ant)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    args = parser.parse_args(argv)
    if not args.paths and not args.reference:
        parser.error("give run folders, or --reference to draw the published curves alone")
    runs = load_runs(args.paths, args.group_by) if args.paths else []
    if args.paths and not runs:
        parser.error(f"no runs (folders with {CSV_NAME} and args.json) under {args.paths}")
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
    if (out / "summary.md").exists():
        print((out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
