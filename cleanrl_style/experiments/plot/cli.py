"""Figures and tables from run folders: learning curves, aggregates across envs, NaP, LLM metrics.

    python -m cleanrl_style.experiments.plot runs/sweep [more run folders or parents] --out plots/ [--reference]
    python -m cleanrl_style.experiments.plot runs/sweep --lines grpo turnsight --out plots/grpo_turnsight   # one comparison

Reads every run under the given folders (a folder with ``progress.csv`` and ``args.json``) and writes:

``curves_steps.png`` / ``curves_time.png``
    one panel per env, the metric (``--metric``, default ``charts/episodic_return``) over environment
    steps / wall-clock seconds, one line per agent or flag value: the mean across seeds with a
    bootstrap confidence band (``--estimator iqm`` for the interquartile mean instead).
``summary.md`` / ``summary.csv``
    the final return of each line on each env (mean over the last ``--final-fraction`` of a run's
    steps), mean, bootstrap CI and IQM over seeds; ``eval/return_mean`` too where runs logged it.
``differences.md`` / ``.csv`` (two lines or more on an env)
    every pair of lines on each env: the higher mean final return minus the lower, with a bootstrap
    interval that resamples each line's seeds on its own (none under 5 seeds in either line).
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
``scaling.md`` / ``scaling.csv`` and ``scaling_<env>.png``
    for runs that log their critic's parameter count (``sac_simba``): each line's final return
    against it, one curve per architecture (``--encoder``), for a scaling study.
``scaling_growth.md`` / ``.csv``
    for the same runs: what each step up in size gains, the larger minus the smaller mean final
    return of each architecture's consecutive sizes, with its interval (none under 5 seeds a point).
``visits.md`` / ``visits.csv``, ``visits_gap.md`` / ``.csv`` and ``visits_<env>.png``
    for runs on a task cycle (``dmc:<domain>-<task>.<task>...-every<N>``): each visit's return
    (the mean over its last quarter), and each run's later visits of a task against its first
    (:mod:`cleanrl_style.experiments.plot.visits`).
``llm_<env>.png``
    for language-model agents that sampled groups: ``charts/success_rate`` (and
    ``charts/test_success_rate``), ``charts/zero_variance_fraction`` and each seed's wall time per
    iteration (supervised stages alone, such as RCTP, have only the tables).
``llm_summary.md`` / ``llm_summary.csv``
    for language-model agents, one row per (line, env): held-out success at each evaluated
    iteration and at the last (also by seed, with rliable's 95% percentile bootstrap over seeds
    from 5 seeds on and the seeds' range below), the mean training success and zero-variance
    fraction over the iterations, the zero-variance groups counted over every iteration and seed
    with Wilson's 95% interval, an RCTP run's held-out success under the low-reward token, and the
    wall time (means over seeds).
``llm_paired.md`` / ``llm_paired.csv``
    for language-model runs with ``held_out.csv``: each pair of lines evaluated on the same
    held-out tasks, their success difference task by task with a 95% bootstrap over tasks (the
    seeds held fixed), and seed by seed with the interval over seeds (a one-run line, such as a
    warm start's greedy evaluation, pairs with every seed of the other).
``llm_by_kind.md`` / ``llm_by_kind.csv``
    for ``python-math`` runs: held-out success per problem kind, each seed's and their mean.

Lines are named by the sweep's label (``sweep.json``), else by the agent (``exp_name``) and the
arguments that differ between its runs; ``--group-by nap learning_rate`` names them by those
arguments instead. ``--reference`` overlays the published Gymnasium-MuJoCo curves shipped in
``cleanrl_style/experiments/reference_curves/`` (evaluation returns on the v4 tasks; Apache-2.0, see its README)
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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import tyro

from cleanrl_style.experiments.plot.aggregates import (
    aggregate_rows,
    improvement_rows,
    normalized_scores,
    performance_profiles,
    plot_aggregate,
    plot_improvement,
    plot_performance_profile,
)
from cleanrl_style.experiments.plot.curves import plot_curves
from cleanrl_style.experiments.plot.data import RETURN, RunData, load_runs
from cleanrl_style.experiments.plot.llm import held_out_by_kind_rows, llm_summary_rows, paired_held_out_rows, plot_llm
from cleanrl_style.experiments.plot.nap import plot_nap
from cleanrl_style.experiments.plot.reference import with_reference
from cleanrl_style.experiments.plot.scaling import growth_rows, plot_scaling, scaling_rows
from cleanrl_style.experiments.plot.stats import MIN_SEEDS_FOR_CI, difference_rows, summary_rows, write_table
from cleanrl_style.experiments.plot.visits import plot_visits, visit_rows
from cleanrl_style.runs.logger import CSV_NAME

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
    differences = difference_rows(runs, metric, final_fraction, ci, n_boot, seed)
    if differences:
        title = f"Differences between lines on each env: higher minus lower mean final {metric}"
        write_table(differences, out / "differences.csv", out / "differences.md", title)
        written += [out / "differences.csv", out / "differences.md"]
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
    paired = paired_held_out_rows(runs, seed=seed)
    if paired:
        write_table(paired, out / "llm_paired.csv", out / "llm_paired.md", "Held-out success, paired task by task")
        written += [out / "llm_paired.csv", out / "llm_paired.md"]
    by_kind = held_out_by_kind_rows(runs)
    if by_kind:
        write_table(by_kind, out / "llm_by_kind.csv", out / "llm_by_kind.md", "Held-out success by python-math problem kind")
        written += [out / "llm_by_kind.csv", out / "llm_by_kind.md"]
    scaling = scaling_rows(runs, metric, final_fraction, ci, n_boot, seed)
    if scaling:
        title = f"Final {metric} against the critic's parameter count (one row per line and env)"
        write_table(scaling, out / "scaling.csv", out / "scaling.md", title)
        written += [out / "scaling.csv", out / "scaling.md", *plot_scaling(scaling, out, ci, metric)]
        growth = growth_rows(runs, metric, final_fraction, ci, n_boot, seed)
        if growth:
            title = f"What each step up in critic size gains: larger minus smaller mean final {metric}"
            write_table(growth, out / "scaling_growth.csv", out / "scaling_growth.md", title)
            written += [out / "scaling_growth.csv", out / "scaling_growth.md"]
    per_visit, gaps = visit_rows(runs, ci, n_boot, seed)
    if per_visit:
        title = "Task cycles: each visit's return (last quarter of the visit)"
        write_table(per_visit, out / "visits.csv", out / "visits.md", title)
        written += [out / "visits.csv", out / "visits.md", *plot_visits(per_visit, out, ci)]
    if gaps:
        write_table(
            gaps,
            out / "visits_gap.csv",
            out / "visits_gap.md",
            "Task cycles: later visits' return minus the first visit's, per task, averaged over tasks (per run)",
        )
        written += [out / "visits_gap.csv", out / "visits_gap.md"]
    written += plot_nap(runs, out, ci, seed=seed) + plot_llm(runs, out, ci, seed=seed)
    return [p for p in written if p is not None]


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
    lines: list[str] | None = None
    """only these lines (their names in the legend and tables), e.g. the arms of one comparison"""
    seed: int = 0
    """seed of the bootstrap"""


def main(argv: list[str] | None = None) -> int:
    args = tyro.cli(PlotArgs, args=argv, prog="python -m cleanrl_style.experiments.plot", description=__doc__)
    if not args.paths and not args.reference:
        raise SystemExit(
            "python -m cleanrl_style.experiments.plot: give run folders, or --reference to draw the published curves alone"
        )
    runs = load_runs(args.paths, args.group_by) if args.paths else []
    if args.paths and not runs:
        raise SystemExit(
            f"python -m cleanrl_style.experiments.plot: no runs (folders with {CSV_NAME} and args.json) under {args.paths}"
        )
    env_keys = {e.split("-v")[0] for e in args.envs} if args.envs else None
    if env_keys:
        runs = [r for r in runs if r.env_key in env_keys]
    if args.lines:
        labels = sorted({r.label for r in runs})
        unknown = [name for name in args.lines if name not in labels]
        if unknown:
            raise SystemExit(
                f"python -m cleanrl_style.experiments.plot: --lines names no line {' '.join(unknown)}; "
                f"the runs given hold: {' '.join(labels)}"
            )
        runs = [r for r in runs if r.label in args.lines]
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
