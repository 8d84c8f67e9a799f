"""The language-model agents' table and figure: success, zero-variance groups and wall time."""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from cleanrl_style.experiments.plot.data import LLM_METRICS, RunData, by_label_and_env, file_part
from cleanrl_style.experiments.plot.stats import MIN_SEEDS_FOR_CI, band_note, seed_statistics
from cleanrl_style.experiments.plot.style import _colors, _draw_band, _pyplot, save_figure


def wilson_interval(successes: int, trials: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson's score interval of a binomial proportion (95% for the default z); NaNs without trials."""
    if trials == 0:
        return float("nan"), float("nan")
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def zero_variance_groups(group: list[RunData]) -> dict[str, str]:
    """The groups whose rewards were all equal, counted over every iteration of every seed (the
    logged fraction times ``groups_per_step``), with Wilson's 95% interval over those groups, and
    each seed's fraction."""
    counts = []
    for r in group:
        series, per_step = r.series.get("charts/zero_variance_fraction"), r.args.get("groups_per_step")
        if series is None or not len(series) or not per_step:
            continue
        counts.append((int(round(float(series[:, 2].sum()) * per_step)), len(series) * int(per_step), r.seed))
    if not counts:
        return {"zero-variance groups": "-", "zero-variance 95% Wilson": "-", "zero-variance by seed": "-"}
    k, n = sum(c[0] for c in counts), sum(c[1] for c in counts)
    low, high = wilson_interval(k, n)
    return {
        "zero-variance groups": f"{k}/{n}",
        "zero-variance 95% Wilson": f"[{low:.3f}, {high:.3f}]",
        "zero-variance by seed": ", ".join(f"s{seed}: {kk}/{nn}" for kk, nn, seed in sorted(counts, key=lambda c: c[2])),
    }


def over_seeds(by_seed: dict[int, float], signed: bool = False) -> dict[str, str]:
    """Each seed's value, and the interval over seeds a table reports: rliable's 95% percentile
    bootstrap of the mean from ``MIN_SEEDS_FOR_CI`` seeds on, the seeds' range below that."""
    if not by_seed:
        return {"by seed": "-", "interval over seeds": "-"}
    stats = seed_statistics(np.array([by_seed[s] for s in sorted(by_seed)]), "mean")
    number = "{:+.3f}" if signed else "{:.3f}"
    n = stats["seeds"]
    if n >= MIN_SEEDS_FOR_CI:
        interval = f"[{stats['ci_low']:.3f}, {stats['ci_high']:.3f}] (95% percentile bootstrap, n = {n})"
    else:
        interval = f"range [{stats['seed_min']:.3f}, {stats['seed_max']:.3f}] (n = {n} < {MIN_SEEDS_FOR_CI}: no interval)"
    return {
        "by seed": ", ".join(f"s{s}: {number.format(by_seed[s])}" for s in sorted(by_seed)),
        "interval over seeds": interval,
    }


TEST = "charts/test_success_rate"


def llm_summary_rows(runs: list[RunData]) -> list[dict]:
    """One row per (line, env) of language-model runs; every figure a mean over the line's seeds,
    and the last held-out success also by seed, with its interval over seeds (``over_seeds``)."""
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
        last_by_seed = {r.seed: float(r.series[TEST][-1, 2]) for r in group if len(r.series.get(TEST, ()))}
        rows.append(
            {
                "agent": label,
                "env": env,
                "seeds": len(group),
                "iterations": int(max((rows_[:, 0].max() for rows_ in logged), default=0)),
                "test success by iteration": ", ".join(f"{step}: {value:.3f}" for step, value in by_step.items()) or "-",
                "test success (last)": float(by_step[steps[-1]]) if steps else float("nan"),
                **{f"test success (last) {key}": value for key, value in over_seeds(last_by_seed).items()},
                "train success (mean)": mean_of(group, "charts/success_rate", lambda a: a[:, 2].mean()),
                "zero-variance fraction (mean)": mean_of(group, "charts/zero_variance_fraction", lambda a: a[:, 2].mean()),
                **zero_variance_groups(group),
                "test success, low token (last)": mean_of(group, "rctp/low_token_success_rate", lambda a: a[-1, 2]),
                "minutes": float(np.mean([rows_[:, 1].max() / 60 for rows_ in logged])) if logged else float("nan"),
            }
        )
    return rows


def plot_llm(runs: list[RunData], out: Path, ci: float = 0.95, n_boot: int = 1000, seed: int = 0) -> list[Path]:
    """Per env: success rate (train solid, test dashed), zero-variance group fraction and wall time per
    step. Only where a run sampled groups: supervised stages (RCTP, warm starts) log held-out success
    at their end alone, which the summary tables hold."""
    plt = _pyplot()
    paths = []
    llm_runs = [r for r in runs if any(m in r.series for m in LLM_METRICS)]
    sampled = ("charts/success_rate", "charts/zero_variance_fraction")
    for env in sorted({r.env for r in llm_runs if any(len(r.series.get(m, ())) for m in sampled)}):
        here = [r for r in llm_runs if r.env == env]
        colors = _colors(sorted({r.label for r in here}))
        # One legend below the three panels (a line keeps its color in each), in three columns, so the
        # figure grows with the lines instead of the legends covering the curves or each other.
        fig, (ax_success, ax_zero, ax_time) = plt.subplots(
            1, 3, figsize=(15, 4 + 0.09 * len(colors)), layout="constrained", gridspec_kw={"width_ratios": [1, 1, 0.8]}
        )
        for (label, _), group in by_label_and_env(here).items():
            # Held-out success is evaluated every few iterations: drawn at those iterations, with markers.
            evaluated = max((len(np.unique(r.series["charts/test_success_rate"][:, 0])) for r in group
                             if "charts/test_success_rate" in r.series), default=0)  # fmt: skip
            for metric, style, points, marker in (
                ("charts/success_rate", "-", 100, None),
                ("charts/test_success_rate", "--", max(evaluated, 1), "o"),
            ):
                _draw_band(
                    ax_success, group, metric, "step", colors[label], "mean", ci, n_boot, seed, 1,
                    points=points, linestyle=style, marker=marker,
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
            )
            for run in group:  # wall time is a cost of each run, not a statistic: one line per seed
                rows = next((run.series[m] for m in LLM_METRICS if m in run.series and len(run.series[m])), None)
                if rows is not None:
                    ax_time.plot(rows[:, 0], rows[:, 1] / 60, color=colors[label], lw=1.2, marker=".")
        ax_success.set_title("success rate (training: solid; held out: dashed, markers)")
        ax_zero.set_title("fraction of groups with zero reward variance")
        ax_time.set_title("wall time (each seed)")
        ax_time.set_ylabel("minutes since start")
        for ax in (ax_success, ax_zero, ax_time):
            ax.set_xlabel("iteration")  # the language-model agents' step
            ax.grid(alpha=0.3)
        from matplotlib.lines import Line2D

        handles = [Line2D([], [], color=color, lw=2) for color in colors.values()]
        fig.legend(handles, list(colors), loc="outside lower center", ncol=3, fontsize=8)
        for ax in (ax_success, ax_zero):
            ax.set_ylim(-0.02, 1.02)
        fig.suptitle(f"{env} (mean over seeds; {band_note(ci)})")
        path = out / f"llm_{file_part(env)}.png"
        paths.append(save_figure(fig, path, dpi=110))
    return paths


def last_evaluation(run: RunData) -> list[dict[str, str]]:
    """The rows of the run's ``held_out.csv`` from its last evaluation (none without the file)."""
    path = run.path / "held_out.csv" if run.path is not None else None
    if path is None or not path.exists():
        return []
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    last = max((int(row["step"]) for row in rows), default=0)
    return [row for row in rows if int(row["step"]) == last]


def held_out_by_seed(group: list[RunData]) -> dict[str, dict[int, dict[int, float]]]:
    """Per reward-token suffix ('' for none), per seed: each held-out task's success at the seed's
    last evaluation."""
    per_suffix: dict[str, dict[int, dict[int, float]]] = {}
    for r in group:
        for row in last_evaluation(r):
            per_suffix.setdefault(row["suffix"], {}).setdefault(r.seed, {})[int(row["task_id"])] = float(row["reward"])
    return per_suffix


def paired_by_seed(a: dict[int, dict[int, float]], b: dict[int, dict[int, float]]) -> dict[int, float]:
    """Each seed's held-out success of line a minus line b (means over the tasks both evaluated).
    Seeds pair with the same seed of the other line; a line with one run, such as the greedy
    evaluation of a fixed warm start, which no seed changes, pairs with every seed of the other."""
    if len(b) == 1:
        b = {seed: next(iter(b.values())) for seed in a}
    elif len(a) == 1:
        a = {seed: next(iter(a.values())) for seed in b}
    diffs = {}
    for seed in sorted(set(a) & set(b)):
        tasks = sorted(set(a[seed]) & set(b[seed]))
        if tasks:
            diffs[seed] = float(np.mean([a[seed][t] - b[seed][t] for t in tasks]))
    return diffs


def held_out_outcomes(group: list[RunData]) -> dict[str, dict[int, float]]:
    """Per reward-token suffix ('' for none): each held-out task's success at the run's last
    evaluation, averaged over the group's seeds (``held_out_by_seed``)."""
    outcomes = {}
    for suffix, by_seed in held_out_by_seed(group).items():
        tasks: dict[int, list[float]] = {}
        for per_task in by_seed.values():
            for task, reward in per_task.items():
                tasks.setdefault(task, []).append(reward)
        outcomes[suffix] = {t: float(np.mean(v)) for t, v in tasks.items()}
    return outcomes


def held_out_by_kind_rows(runs: list[RunData]) -> list[dict]:
    """For python-math lines: held-out success at the last evaluation per problem kind, as the mean
    over the kind's tasks of each seed, then over seeds (with each seed's value); an RCTP run's
    reward tokens are lines of their own, as in ``paired_held_out_rows``. A line's held-out success
    moves only through the kinds where it is neither 0 nor 1, which this table shows."""
    from envs.text.families import PYTHON_MATH, PYTHON_MATH_SIBLINGS
    from envs.text.tir_env import ALL_KINDS, problem_kind

    rows = []
    for (label, env), group in sorted(by_label_and_env(runs).items()):
        if env not in (PYTHON_MATH, PYTHON_MATH_SIBLINGS):
            continue
        siblings = env == PYTHON_MATH_SIBLINGS
        per_suffix: dict[str, list[dict[int, list[float]]]] = {}
        for r in sorted(group, key=lambda r: r.seed):
            by_suffix: dict[str, dict[int, list[float]]] = {}
            for row in last_evaluation(r):
                kinds = by_suffix.setdefault(row["suffix"], {})
                kinds.setdefault(problem_kind(int(row["task_id"]), siblings), []).append(float(row["reward"]))
            for suffix, kinds in by_suffix.items():
                per_suffix.setdefault(suffix, []).append(kinds)
        for suffix, per_seed in sorted(per_suffix.items()):
            for kind in sorted({k for kinds in per_seed for k in kinds}):
                values = [float(np.mean(kinds[kind])) for kinds in per_seed if kind in kinds]
                rows.append(
                    {
                        "env": env,
                        "line": f"{label} ({suffix})" if suffix else label,
                        "kind": f"{kind} {ALL_KINDS[kind]}",
                        "tasks": len(next(kinds[kind] for kinds in per_seed if kind in kinds)),
                        "seeds": len(values),
                        "success (mean over seeds)": float(np.mean(values)),
                        "by seed": ", ".join(f"{v:.2f}" for v in values),
                    }
                )
    return rows


TASK_ARGS = ("num_tasks", "task_seed", "variants", "test_kinds", "kinds")
"""The flags that decide which task a held-out task id is (``cleanrl_style.llm.args``)."""


def task_args(run: RunData) -> tuple:
    """The run's ``TASK_ARGS`` values (lists as tuples; an absent kind filter as every kind, the
    meaning it had before the flag existed; any other absent flag as None)."""
    every_kind: dict[str, list[int]] = {"test_kinds": [], "kinds": []}
    return tuple(tuple(v) if isinstance(v, list) else v for v in (run.args.get(k, every_kind.get(k)) for k in TASK_ARGS))


def paired_held_out_rows(runs: list[RunData], n_boot: int = 2000, seed: int = 0) -> list[dict]:
    """Each pair of lines of one env evaluated on the same held-out tasks: the difference of their
    success, task by task (each task's success averaged over seeds), with a 95% percentile
    bootstrap over tasks, and the tasks each line alone solved more often; then the difference seed
    by seed (``paired_by_seed``) with its interval over seeds (``over_seeds``): the bootstrap over
    tasks holds the seeds fixed, the one over seeds covers their variance. The same tasks: the same
    task ids under the same task flags (``TASK_ARGS``); a task id names another task under other
    variants or held-out kinds, so such lines are not paired."""
    rows = []
    for env in sorted({r.env for r in runs}):
        lines = {}
        for (label, line_env), group in by_label_and_env(runs).items():
            if line_env == env:
                by_seed = held_out_by_seed(group)
                for suffix, tasks in held_out_outcomes(group).items():
                    lines[f"{label} ({suffix})" if suffix else label] = (
                        tasks,
                        len(group),
                        task_args(group[0]),
                        by_seed[suffix],
                    )
        names = sorted(lines)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                (ta, na, args_a, seeds_a), (tb, nb, args_b, seeds_b) = lines[a], lines[b]
                if set(ta) != set(tb) or args_a != args_b:
                    continue
                task_ids = sorted(ta)
                diff = np.array([ta[t] - tb[t] for t in task_ids])
                rng = np.random.default_rng(seed)
                boots = diff[rng.integers(0, len(diff), size=(n_boot, len(diff)))].mean(axis=1)
                rows.append(
                    {
                        "env": env,
                        "a": a,
                        "b": b,
                        "tasks": len(task_ids),
                        "seeds a, b": f"{na}, {nb}",
                        "success a": float(np.mean([ta[t] for t in task_ids])),
                        "success b": float(np.mean([tb[t] for t in task_ids])),
                        "a - b": float(diff.mean()),
                        "95% bootstrap over tasks": f"[{np.percentile(boots, 2.5):.3f}, {np.percentile(boots, 97.5):.3f}]",
                        "tasks a > b": int((diff > 0).sum()),
                        "tasks a < b": int((diff < 0).sum()),
                        **{
                            f"a - b {key}": value
                            for key, value in over_seeds(paired_by_seed(seeds_a, seeds_b), signed=True).items()
                        },
                    }
                )
    return rows
