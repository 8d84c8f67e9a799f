"""Figures and tables from run folders: ``python -m cleanrl_style.experiments.plot`` (:mod:`cleanrl_style.experiments.plot.cli`
documents every file it writes).

One module per kind of figure: ``curves`` (learning curves), ``aggregates`` (across envs), ``nap``
(the NaP norms), ``llm`` (the language-model agents), ``visits`` (task cycles), ``scaling``
(return against parameter count), ``reference`` (published curves); beneath
them ``data`` (run folders as data), ``stats`` (rliable's estimates and intervals, and the summary
table) and ``style`` (what every figure shares). The names below are the package's public ones.
"""

from cleanrl_style.experiments.plot.aggregates import (
    aggregate_rows,
    improvement_rows,
    normalized_scores,
    performance_profiles,
    plot_aggregate,
    plot_improvement,
    plot_performance_profile,
)
from cleanrl_style.experiments.plot.cli import PlotArgs, main, make_all
from cleanrl_style.experiments.plot.curves import curves_figure, plot_curves
from cleanrl_style.experiments.plot.data import (
    LLM_METRICS,
    REFERENCE_CSV,
    RETURN,
    RunData,
    by_label_and_env,
    curves_on_grid,
    file_part,
    final_value,
    final_values,
    find_run_dirs,
    label_runs,
    load_run,
    load_runs,
    smooth,
)
from cleanrl_style.experiments.plot.llm import llm_summary_rows, plot_llm
from cleanrl_style.experiments.plot.nap import layers_by_position, plot_nap
from cleanrl_style.experiments.plot.reference import cut_at, load_reference, with_reference
from cleanrl_style.experiments.plot.scaling import growth_rows, plot_scaling, scaling_rows
from cleanrl_style.experiments.plot.stats import (
    AGGREGATES,
    ESTIMATORS,
    MIN_SEEDS_FOR_CI,
    aggregate_metrics,
    band_note,
    bootstrap_ci,
    difference_rows,
    interval_estimate,
    interval_method,
    iqm,
    iqm_per_point,
    mean_per_point,
    summary_rows,
    write_table,
)
from cleanrl_style.experiments.plot.style import _colors, panel_grid, plain_axis
from cleanrl_style.experiments.plot.visits import later_minus_first, plot_visits, visit_returns, visit_rows

__all__ = [
    "AGGREGATES",
    "PlotArgs",
    "REFERENCE_CSV",
    "main",
    "make_all",
    "panel_grid",
    "plain_axis",
    "ESTIMATORS",
    "LLM_METRICS",
    "MIN_SEEDS_FOR_CI",
    "RETURN",
    "RunData",
    "_colors",
    "aggregate_metrics",
    "aggregate_rows",
    "band_note",
    "bootstrap_ci",
    "difference_rows",
    "by_label_and_env",
    "curves_figure",
    "curves_on_grid",
    "cut_at",
    "file_part",
    "final_value",
    "final_values",
    "find_run_dirs",
    "growth_rows",
    "improvement_rows",
    "interval_estimate",
    "interval_method",
    "iqm",
    "iqm_per_point",
    "label_runs",
    "later_minus_first",
    "layers_by_position",
    "llm_summary_rows",
    "load_reference",
    "load_run",
    "load_runs",
    "mean_per_point",
    "normalized_scores",
    "performance_profiles",
    "plot_aggregate",
    "plot_curves",
    "plot_improvement",
    "plot_llm",
    "plot_nap",
    "plot_performance_profile",
    "plot_scaling",
    "plot_visits",
    "scaling_rows",
    "smooth",
    "summary_rows",
    "visit_returns",
    "visit_rows",
    "with_reference",
    "write_table",
]
