"""`python -m cleanrl_style.experiments.plot`: figures from synthetic logs and the published curves; numbers by hand
and by rliable."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cleanrl_style.experiments.plot import (
    REFERENCE_CSV,
    RunData,
    aggregate_metrics,
    aggregate_rows,
    bootstrap_ci,
    curves_figure,
    curves_on_grid,
    difference_rows,
    improvement_rows,
    interval_estimate,
    interval_method,
    iqm,
    iqm_per_point,
    load_runs,
    make_all,
    panel_grid,
    performance_profiles,
    plain_axis,
    summary_rows,
    with_reference,
)

REPO = Path(__file__).resolve().parents[1]
STEPS = range(100, 1001, 100)
# Final return of each (env, nap, seed): the curve is c * step / 1000, so the final value (mean over the
# last 10% of steps, i.e. steps 900 and 1000) is 0.95 c.
SCALES = {
    ("Hopper", True): [100.0, 200.0, 300.0, 1000.0],
    ("Hopper", False): [50.0, 60.0, 70.0, 80.0],
    ("Walker2d", True): [10.0, 20.0, 30.0, 40.0],
    ("Walker2d", False): [0.0, 10.0, 20.0, 30.0],
}


def write_run(run_dir: Path, args: dict, rows: list[tuple[int, float, str, float]]) -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "args.json").write_text(json.dumps(args))
    with open(run_dir / "progress.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(("step", "time", "metric", "value"))
        writer.writerows(rows)
    return run_dir


@pytest.fixture
def synthetic_runs(tmp_path) -> Path:
    """Two envs x (NaP on / off) x 4 seeds, with returns, NaP statistics and an evaluation."""
    root = tmp_path / "runs"
    for (env, nap), scales in SCALES.items():
        for seed, c in enumerate(scales, start=1):
            rows = []
            for step in STEPS:
                t = step / 10.0 * (1 if nap else 2)  # the no-NaP runs are slower in wall time
                rows.append((step, t, "charts/episodic_return", c * step / 1000))
                for layer in ("critic.0", "critic.3"):
                    norm = 8.0 if nap else 8.0 + step / 100
                    rows += [(step, t, f"nap/norm/{layer}", norm), (step, t, f"nap/eff_lr/{layer}", 3e-4 / norm)]
            rows.append((1000, 100.0, "eval/return_mean", c))
            args = {"env": env, "seed": seed, "exp_name": "ppo_nap", "nap": nap, "learning_rate": 3e-4, "run_dir": ""}
            write_run(root / f"{env}__ppo_nap__{nap}__{seed}", args, rows)
    return root


def test_iqm_drops_the_lowest_and_highest_quarter():
    assert iqm(np.array([1, 2, 3, 4, 100])) == 3.0  # n = 5: one dropped at each end
    assert iqm(np.array([5, 1, 3, 2, 8, 13, 4, 7])) == (3 + 4 + 5 + 7) / 4
    assert iqm(np.array([1.0, 5.0])) == 3.0  # fewer than 4 values: the mean


def test_bootstrap_ci_of_the_mean_of_two_seeds_matches_the_exact_distribution():
    # Resampling [0, 1] twice gives a mean of 0, 0.5 or 1 with probabilities 1/4, 1/2, 1/4.
    # (min_runs=1: the primitive itself; the tables and figures ask for 5 seeds.)
    low, high = bootstrap_ci(np.array([0.0, 1.0]), ci=0.95, n_boot=4000, min_runs=1)
    assert (low, high) == (0.0, 1.0)
    low, high = bootstrap_ci(np.array([0.0, 1.0]), ci=0.4, n_boot=4000, min_runs=1)  # the 30th and 70th percentiles
    assert (low, high) == (0.5, 0.5)
    assert bootstrap_ci(np.array([2.0, 2.0, 2.0]), n_boot=100, min_runs=1) == (2.0, 2.0)


def test_under_five_seeds_there_is_no_interval_and_the_table_says_so():
    # With 3 seeds the percentile bootstrap's ends are the extreme seeds: the range, not a 95% CI.
    three = np.array([1.0, 5.0, 9.0])
    assert bootstrap_ci(three, min_runs=1) == (1.0, 9.0)
    assert all(np.isnan(bootstrap_ci(three)))
    assert all(np.isnan(bootstrap_ci(np.arange(4.0))))
    low, high = bootstrap_ci(np.array([1.0, 2.0, 3.0, 4.0, 9.0]))
    assert 1.0 < low < 3.8 < high < 9.0  # 5 seeds: an interval strictly inside the range
    assert interval_method(4) == "none (n < 5)"
    assert interval_method(5) == "95% percentile bootstrap (rliable)"


def test_aggregates_are_rliables_metrics_on_the_runs_by_envs_matrix():
    from rliable import metrics

    scores = np.random.default_rng(0).uniform(size=(5, 3))  # 5 runs x 3 envs
    expected = [metrics.aggregate_iqm(scores), metrics.aggregate_median(scores), metrics.aggregate_mean(scores)]
    assert aggregate_metrics(*np.split(scores, 3, axis=1)) == pytest.approx(expected)
    curves = np.random.default_rng(1).uniform(size=(7, 1, 20))  # 7 seeds, one env, 20 points of a curve
    assert iqm_per_point(curves) == pytest.approx([metrics.aggregate_iqm(curves[..., i]) for i in range(20)])


def test_intervals_are_reproducible_and_leave_numpys_global_generator_alone():
    scores = np.random.default_rng(0).normal(size=(6, 2))
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    first = interval_estimate(scores, aggregate_metrics_of_matrix, n_boot=300, seed=4)
    assert np.array_equal(np.random.get_state()[1], before)
    second = interval_estimate(scores, aggregate_metrics_of_matrix, n_boot=300, seed=4)
    assert all(np.array_equal(a, b) for a, b in zip(first, second))
    other = interval_estimate(scores, aggregate_metrics_of_matrix, n_boot=300, seed=5)
    assert not np.array_equal(first[1], other[1])


def aggregate_metrics_of_matrix(scores: np.ndarray) -> np.ndarray:
    return aggregate_metrics(*np.split(scores, scores.shape[1], axis=1))


def test_curves_are_interpolated_on_the_range_every_seed_covers():
    a = RunData("E", 1, "x", {"m": np.array([[0, 0, 0.0], [10, 1, 10.0]])})
    b = RunData("E", 2, "x", {"m": np.array([[2, 0, 4.0], [8, 1, 10.0]])})
    grid, values = curves_on_grid([a, b], "m", points=4)
    assert grid.tolist() == [2.0, 4.0, 6.0, 8.0]
    assert values[0].tolist() == [2.0, 4.0, 6.0, 8.0]
    assert values[1].tolist() == [4.0, 6.0, 8.0, 10.0]


def test_a_sparse_curve_is_put_on_its_logged_steps():
    a = RunData("E", 1, "x", {"m": np.array([[0, 0, 0.0], [50, 1, 5.0], [100, 2, 20.0]])})
    b = RunData("E", 2, "x", {"m": np.array([[0, 0, 2.0], [50, 1, 7.0], [100, 2, 10.0], [150, 3, 0.0]])})
    grid, values = curves_on_grid([a, b], "m", points=None)
    assert grid.tolist() == [0.0, 50.0, 100.0]  # 150: beyond what seed 1 covers
    assert values.tolist() == [[0.0, 5.0, 20.0], [2.0, 7.0, 10.0]]


def test_lines_are_named_by_the_arguments_that_differ(synthetic_runs):
    labels = {r.label for r in load_runs([synthetic_runs])}
    assert labels == {"ppo_nap nap=True", "ppo_nap nap=False"}
    assert {r.label for r in load_runs([synthetic_runs], group_by=["learning_rate"])} == {"ppo_nap learning_rate=0.0003"}


def test_summary_table_matches_a_hand_computation(synthetic_runs):
    rows = {(r["agent"], r["env"]): r for r in summary_rows(load_runs([synthetic_runs]))}
    assert len(rows) == 4
    hopper_nap = rows[("ppo_nap nap=True", "Hopper-v5")]
    finals = 0.95 * np.array([100.0, 200.0, 300.0, 1000.0])
    assert hopper_nap["seeds"] == 4 and hopper_nap["steps"] == 1000
    assert hopper_nap["final_mean"] == pytest.approx(finals.mean())
    assert hopper_nap["final_iqm"] == pytest.approx(0.95 * (200 + 300) / 2)
    assert np.isnan(hopper_nap["ci_low"]) and np.isnan(hopper_nap["ci_high"])  # 4 seeds: no interval
    assert hopper_nap["interval"] == "none (n < 5)"
    assert (hopper_nap["seed_min"], hopper_nap["seed_max"]) == pytest.approx((finals.min(), finals.max()))
    assert hopper_nap["eval_mean"] == pytest.approx(400.0)


def test_aggregate_iqm_and_mean_of_normalized_scores_match_a_hand_computation(synthetic_runs):
    rows = {r["agent"]: r for r in aggregate_rows(load_runs([synthetic_runs]))}
    # Hopper finals span 0.95 * [50, 1000]; Walker2d 0.95 * [0, 40]: normalized scores per run.
    hopper = {nap: [(c - 50) / 950 for c in SCALES[("Hopper", nap)]] for nap in (True, False)}
    walker = {nap: [c / 40 for c in SCALES[("Walker2d", nap)]] for nap in (True, False)}
    for nap in (True, False):
        pooled = sorted(hopper[nap] + walker[nap])  # 8 scores: the IQM averages the middle 4
        row = rows[f"ppo_nap nap={nap}"]
        assert (row["envs"], row["runs"]) == (2, 8)
        assert row["iqm"] == pytest.approx(np.mean(pooled[2:6]))
        assert row["mean"] == pytest.approx(np.mean(pooled))
        # The median over two envs' mean scores is their average.
        assert row["median"] == pytest.approx((np.mean(hopper[nap]) + np.mean(walker[nap])) / 2)
        assert row["interval"] == "none (n < 5)"  # 4 runs on each env
        for key in ("iqm", "median", "mean"):
            assert np.isnan(row[f"{key}_low"]) and np.isnan(row[f"{key}_high"])


def test_performance_profile_matches_a_hand_computation(synthetic_runs):
    taus, profiles = performance_profiles(load_runs([synthetic_runs]), taus=[0.0, 0.2, 0.5, 0.99], n_boot=300)
    # Normalized scores, NaP on: Hopper (c - 50) / 950 = 0.053, 0.158, 0.263, 1; Walker2d c / 40 = 0.25, 0.5, 0.75, 1.
    # Above 0: all 8; above 0.2: 6; above 0.5: 3 (Hopper 1, Walker2d 0.75 and 1); above 0.99: 2.
    profile, low, high = profiles["ppo_nap nap=True"]
    assert profile.tolist() == [8 / 8, 6 / 8, 3 / 8, 2 / 8]
    assert np.isnan(low).all() and np.isnan(high).all()  # 4 runs on each env: no interval
    # NaP off: Hopper 0, 0.0105, 0.021, 0.032; Walker2d 0, 0.25, 0.5, 0.75: above 0: 6, 0.2: 3, 0.5: 1, 0.99: 0.
    assert profiles["ppo_nap nap=False"][0].tolist() == [6 / 8, 3 / 8, 1 / 8, 0.0]


def test_probability_of_improvement_matches_a_hand_computation(synthetic_runs):
    (row,) = improvement_rows(load_runs([synthetic_runs]), n_boot=300)
    assert (row["x"], row["y"], row["envs"]) == ("ppo_nap nap=True", "ppo_nap nap=False", 2)
    # Hopper: every NaP run beats every run without: P = 1. Walker2d (10, 20, 30, 40) against (0, 10, 20, 30):
    # 10 beats 1 and ties 1, 20 beats 2 and ties 1, 30 beats 3 and ties 1, 40 beats 4; ties count half:
    # (1.5 + 2.5 + 3.5 + 4) / 16 = 0.71875. Averaged over the two envs: 0.859375.
    assert row["probability"] == pytest.approx((1 + 11.5 / 16) / 2)
    assert np.isnan(row["low"]) and np.isnan(row["high"])  # 4 runs on each env: no interval


@pytest.mark.parametrize("n_envs", [1, 2, 3, 5, 8, 12])
def test_panels_keep_most_of_the_figure_with_a_long_legend(n_envs):
    rows, cols = panel_grid(n_envs)
    assert rows * cols >= n_envs and cols <= 4 and rows * cols - n_envs < cols
    runs = []
    for env in range(n_envs):
        for line in range(6):  # six lines with long names: the legend of a wide sweep
            for seed in (1, 2):
                curve = np.array([[s, s / 10, line * s / 100 + seed] for s in range(100, 1001, 100)], dtype=float)
                runs.append(RunData(f"Env{env}-v0", seed, f"sac_simba learning_rate=0.0003 utd={line}", {"m": curve}))
    fig = curves_figure(runs, "m", n_boot=50)
    fig.canvas.draw()
    panels = sum(ax.get_position().width * ax.get_position().height for ax in fig.axes if ax.get_visible())
    assert panels > 0.45, f"the {n_envs} panels take only {panels:.0%} of the figure"


def test_a_flat_line_keeps_plain_tick_labels_and_is_drawn_flat():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    norm = 11.313708498984761
    ax.plot(range(50), norm + 1e-7 * np.sin(np.arange(50)))  # a projected weight norm: float noise only
    plain_axis(ax)
    fig.canvas.draw()
    assert ax.yaxis.get_major_formatter().get_offset() == ""
    low, high = ax.get_ylim()
    assert high - low == pytest.approx(0.02 * norm, rel=1e-3)
    plt.close(fig)


def test_an_env_every_run_scored_the_same_on_is_left_out_of_the_aggregate(synthetic_runs):
    for seed in (1, 2):  # both lines solve InvertedPendulum equally: it cannot tell them apart
        for nap in (True, False):
            rows = [(step, step / 10, "charts/episodic_return", 1000.0) for step in STEPS]
            write_run(
                synthetic_runs / f"IP__{nap}__{seed}",
                {
                    "env": "InvertedPendulum",
                    "seed": seed,
                    "exp_name": "ppo_nap",
                    "nap": nap,
                    "learning_rate": 3e-4,
                    "run_dir": "",
                },
                rows,
            )
    rows = {r["agent"]: r for r in aggregate_rows(load_runs([synthetic_runs]))}
    assert rows["ppo_nap nap=True"]["env_names"] == "Hopper Walker2d"
    assert rows["ppo_nap nap=True"]["runs"] == 8


def is_png(path: Path) -> bool:
    return path.exists() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


@pytest.mark.slow
def test_the_command_writes_every_figure_and_table_from_synthetic_logs(synthetic_runs, tmp_path):
    out = tmp_path / "plots"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cleanrl_style.experiments.plot",
            str(synthetic_runs),
            "--out",
            str(out),
            "--n-boot",
            "200",
            "--estimator",
            "iqm",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    for name in (
        "curves_steps.png",
        "curves_time.png",
        "aggregate.png",
        "performance_profile.png",
        "probability_of_improvement.png",
        "nap_Hopper-v5.png",
        "nap_Walker2d-v5.png",
    ):
        assert is_png(out / name), name
    with open(out / "performance_profile.csv") as f:
        profile = {(r["agent"], float(r["tau"])): float(r["fraction"]) for r in csv.DictReader(f)}
    assert profile[("ppo_nap nap=True", 0.5)] == 3 / 8
    summary = (out / "summary.md").read_text()
    assert "| ppo_nap nap=True | Hopper-v5 | 4 | 1000 | 380 |" in summary  # 0.95 * mean(100, 200, 300, 1000)
    with open(out / "summary.csv") as f:
        assert len(list(csv.DictReader(f))) == 4


def test_llm_figure_reads_success_rate_and_zero_variance_fraction(tmp_path):
    root = tmp_path / "runs"
    for seed in (1, 2):
        rows = []
        for step in range(1, 21):
            rows += [
                (step, step * 3.0, "charts/success_rate", min(1.0, step / 20 + 0.05 * seed)),
                (step, step * 3.0, "charts/zero_variance_fraction", 1.0 - step / 25),
            ]
            if step % 5 == 0:
                rows.append((step, step * 3.0, "charts/test_success_rate", step / 25))
        write_run(root / f"tools__grpo__{seed}", {"env": "ToolUse-calculator", "seed": seed, "exp_name": "grpo"}, rows)
    written = make_all(load_runs([root]), tmp_path / "plots", n_boot=100)
    assert is_png(tmp_path / "plots" / "llm_ToolUse-calculator.png")
    assert tmp_path / "plots" / "llm_ToolUse-calculator.png" in written
    with open(tmp_path / "plots" / "llm_summary.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    # Test success step / 25 at steps 5..20 for both seeds; zero variance 1 - step / 25 averaged over
    # steps 1..20 = 1 - 10.5 / 25; train success averaged per seed, then over seeds; 20 steps of 3 s.
    assert row["seeds"] == "2" and row["iterations"] == "20"
    assert row["test success by iteration"] == "5: 0.200, 10: 0.400, 15: 0.600, 20: 0.800"
    assert float(row["test success (last)"]) == pytest.approx(0.8)
    assert float(row["zero-variance fraction (mean)"]) == pytest.approx(1 - 10.5 / 25)
    train = [sum(min(1.0, step / 20 + 0.05 * seed) for step in range(1, 21)) / 20 for seed in (1, 2)]
    assert float(row["train success (mean)"]) == pytest.approx(sum(train) / 2)
    assert float(row["minutes"]) == pytest.approx(1.0)


def test_a_metric_logged_once_draws_its_interval_as_an_error_bar():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.container import ErrorbarContainer

    from cleanrl_style.experiments.plot.stats import ESTIMATORS
    from cleanrl_style.experiments.plot.style import _draw_band

    finals = [0.5, 0.6, 0.7, 0.8, 0.9]
    runs = [
        RunData(
            label="grpo", env="python-math", seed=seed, series={"charts/test_success_rate": np.array([[2.0, 60.0, value]])}
        )
        for seed, value in enumerate(finals, start=1)
    ]
    fig, ax = plt.subplots()
    assert _draw_band(ax, runs, "charts/test_success_rate", "step", "C0", "mean", 0.95, 200, 0, 1, points=1)
    (bar,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    (segment,) = bar.lines[2][0].get_segments()
    _, lo, hi = interval_estimate(np.array(finals)[:, None, None], ESTIMATORS["mean"], 0.95, 200, 0)
    assert segment[:, 0] == pytest.approx([2.0, 2.0])
    assert sorted(segment[:, 1]) == pytest.approx([lo[0], hi[0]])
    assert lo[0] < np.mean(finals) < hi[0]
    plt.close(fig)


def reference_final_by_hand(algorithm: str, env_id: str, budget: float) -> list[float]:
    """Per seed: the mean of the published returns in the last 10% of the steps up to ``budget``."""
    per_seed: dict[int, list[tuple[float, float]]] = {}
    with open(REFERENCE_CSV, newline="") as f:
        for row in csv.DictReader(f):
            if row["algorithm"] == algorithm and row["env_id"] == env_id and float(row["env_step"]) <= budget:
                per_seed.setdefault(int(row["seed"]), []).append((float(row["env_step"]), float(row["episodic_return"])))
    finals = []
    for points in per_seed.values():
        last = max(s for s, _ in points)
        finals.append(np.mean([v for s, v in points if s >= 0.9 * last]))
    return finals


@pytest.mark.slow
def test_published_curves_alone_are_drawn_at_the_budget_every_algorithm_reached(tmp_path):
    out = tmp_path / "plots"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cleanrl_style.experiments.plot",
            "--reference",
            "--envs",
            "Hopper",
            "--out",
            str(out),
            "--n-boot",
            "200",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert is_png(out / "curves_steps.png") and is_png(out / "aggregate.png")
    with open(out / "summary.csv") as f:
        rows = {r["agent"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"SAC (published)", "MR.Q (published)", "SimbaV2 (UTD 2) (published)", "SimbaV2 (UTD 8) (published)"}
    sac = reference_final_by_hand("SAC", "Hopper-v4", 1_000_000)  # SAC's curves go to 5M: cut at 1M
    assert int(rows["SAC (published)"]["seeds"]) == len(sac) == 10
    assert float(rows["SAC (published)"]["final_mean"]) == pytest.approx(np.mean(sac))
    simba = reference_final_by_hand("SimbaV2 (UTD 2)", "Hopper-v4", 1_000_000)
    assert float(rows["SimbaV2 (UTD 2) (published)"]["final_mean"]) == pytest.approx(np.mean(simba))


def test_published_curves_are_cut_at_the_budget_of_the_runs(tmp_path):
    for seed in (1, 2):
        rows = [(step, step / 100, "charts/episodic_return", step / 100) for step in range(1000, 40001, 1000)]
        write_run(tmp_path / f"hopper_{seed}", {"env": "Hopper", "seed": seed, "exp_name": "ppo_nap"}, rows)
    runs = with_reference(load_runs([tmp_path]))
    published = {r.label for r in runs if r.reference}
    # SimbaV2's curves are logged every 50k steps: nothing near a 40k budget, so they are left out.
    assert published == {"SAC (published)", "MR.Q (published)"}
    assert {r.env for r in runs if r.reference} == {"Hopper-v4"}
    assert max(r.series["charts/episodic_return"][:, 0].max() for r in runs if r.reference) <= 40000
    rows = {(r["agent"], r["env"]): r for r in summary_rows(runs)}
    sac = reference_final_by_hand("SAC", "Hopper-v4", 40000)
    assert rows[("SAC (published)", "Hopper-v4")]["final_mean"] == pytest.approx(np.mean(sac))


def test_published_curves_reach_the_step_budget_in_the_runs_args(tmp_path):
    # The last episode of a 100k-step run ends before step 100,000; the published value at 100k still counts.
    rows = [(step, step / 100, "charts/episodic_return", step / 100) for step in range(1000, 99001, 1000)]
    args = {"env": "Hopper", "seed": 1, "exp_name": "sac_nap", "total_timesteps": 100000}
    write_run(tmp_path / "hopper_1", args, rows)
    runs = with_reference(load_runs([tmp_path]))
    rows = {(r["agent"], r["env"]): r for r in summary_rows(runs)}
    sac = reference_final_by_hand("SAC", "Hopper-v4", 100000)
    assert rows[("SAC (published)", "Hopper-v4")]["final_mean"] == pytest.approx(np.mean(sac))
    simba = reference_final_by_hand("SimbaV2 (UTD 2)", "Hopper-v4", 100000)
    assert rows[("SimbaV2 (UTD 2) (published)", "Hopper-v4")]["steps"] == 100000
    assert rows[("SimbaV2 (UTD 2) (published)", "Hopper-v4")]["final_mean"] == pytest.approx(np.mean(simba))


def test_figure_names_keep_only_safe_characters_of_the_env():
    from cleanrl_style.experiments.plot import file_part

    assert [file_part(e) for e in ("tools:bank", "text/ToolUse-v0", "tools:bank+travel", "Hopper-v5")] == [
        "tools-bank",
        "text_ToolUse-v0",
        "tools-bank+travel",
        "Hopper-v5",
    ]


def test_lines_get_distinct_colors_and_published_ones_keep_theirs():
    from cleanrl_style.experiments.plot import _colors

    published = [f"paper{i} (published)" for i in range(4)]
    many = _colors([f"arm{i}" for i in range(10)] + published)
    assert len(set(many.values())) == 14
    few = _colors(["arm0"] + published)
    assert all(few[p] == many[p] for p in published)


def test_nap_layers_are_matched_by_position_across_runs_with_and_without_layernorm():
    from cleanrl_style.experiments.plot import layers_by_position

    row = np.array([[0, 0, 1.0]])
    with_ln = RunData("E", 1, "nap", {f"nap/norm/actor.net.{i}": row for i in (0, 3, 6)} | {"nap/eff_lr/actor.net.3": row})
    plain = RunData("E", 1, "plain", {f"nap/norm/actor.net.{i}": row for i in (0, 2, 4)} | {"charts/SPS": row})
    assert sorted(layers_by_position(with_ln).series) == [
        "nap/eff_lr/actor.net layer 2",
        "nap/norm/actor.net layer 1",
        "nap/norm/actor.net layer 2",
        "nap/norm/actor.net layer 3",
    ]
    assert sorted(layers_by_position(plain).series) == [
        "charts/SPS",
        "nap/norm/actor.net layer 1",
        "nap/norm/actor.net layer 2",
        "nap/norm/actor.net layer 3",
    ]


def test_llm_figure_is_left_out_where_no_run_sampled_groups(tmp_path):
    """An RCTP-only recipe logs held-out success once, at its end: the summary holds it, and no figure
    with empty train and zero-variance panels is written."""
    root = tmp_path / "runs"
    rows = [(16, 60.0, "losses/sft_loss", 0.5), (16, 90.0, "charts/test_success_rate", 0.25)]
    rows.append((16, 90.0, "rctp/low_token_success_rate", 0.125))
    write_run(root / "tools-bank__rctp__s1", {"env": "tools:bank", "seed": 1, "exp_name": "rc_grpo"}, rows)
    written = make_all(load_runs([root]), tmp_path / "plots", n_boot=100)
    assert not list((tmp_path / "plots").glob("llm_*.png")) and not [p for p in written if p.name.startswith("llm_")
                                                                     and p.suffix == ".png"]  # fmt: skip
    with open(tmp_path / "plots" / "llm_summary.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert float(row["test success (last)"]) == 0.25 and float(row["test success, low token (last)"]) == 0.125


def test_wilson_interval_against_a_hand_computation():
    from cleanrl_style.experiments.plot.llm import wilson_interval

    # 15 of 32: centre (p + z^2/2n) / (1 + z^2/n) = 0.47209, half-width 0.16341 (z = 1.96)
    low, high = wilson_interval(15, 32)
    assert low == pytest.approx(0.30868, abs=1e-4) and high == pytest.approx(0.63550, abs=1e-4)
    assert wilson_interval(0, 80)[0] == 0.0 and wilson_interval(80, 80)[1] == pytest.approx(1.0)
    assert wilson_interval(80, 80)[0] == pytest.approx(80 / (80 + 1.959964**2))  # k = n: n / (n + z^2)


def test_zero_variance_groups_and_paired_held_out_success(tmp_path):
    root = tmp_path / "runs"
    # per task 10..13, both seeds alike; "other" ran on other task variants, so its task 10 is another task
    outcomes = {"grpo": [1, 0, 0, 1], "rc": [1, 1, 0, 1], "other": [0, 0, 0, 0]}
    for label, per_task in outcomes.items():
        for seed in (1, 2):
            rows = [(1, 1.0, "charts/zero_variance_fraction", 0.5 if label == "grpo" else 0.25)]
            rows += [(2, 2.0, "charts/zero_variance_fraction", 0.75 if label == "grpo" else 0.0)]
            rows += [(2, 3.0, "charts/test_success_rate", sum(per_task) / 4)]
            args = {"env": "tools:bank", "seed": seed, "groups_per_step": 4, "variants": ["base", "missing_parameter"]}
            if label == "other":
                args["variants"] = ["base"]
            run = write_run(root / f"{label}_{seed}", args, rows)
            (run / "sweep.json").write_text(json.dumps({"label": label}))
            lines = ["step,suffix,task_id,reward,turns,cut", *(f"2,,{10 + t},{float(r)},3,0" for t, r in enumerate(per_task))]
            (run / "held_out.csv").write_text("\n".join(lines) + "\n")
    make_all(load_runs([root]), tmp_path / "plots", n_boot=100)
    with open(tmp_path / "plots" / "llm_summary.csv", newline="") as f:
        rows = {row["agent"]: row for row in csv.DictReader(f)}
    assert rows["grpo"]["zero-variance groups"] == "10/16" and rows["rc"]["zero-variance groups"] == "2/16"
    assert rows["grpo"]["zero-variance by seed"] == "s1: 5/8, s2: 5/8"
    with open(tmp_path / "plots" / "llm_paired.csv", newline="") as f:
        (pair,) = list(csv.DictReader(f))
    assert (pair["a"], pair["b"], pair["tasks"]) == ("grpo", "rc", "4")  # "other" is paired with neither
    assert float(pair["a - b"]) == pytest.approx(-0.25) and (pair["tasks a > b"], pair["tasks a < b"]) == ("0", "1")


def test_held_out_success_by_seed_paired_seed_by_seed_with_an_interval_from_five_seeds(tmp_path):
    """The summary gives each seed's last held-out success; the paired table each seed's difference
    (a one-run line, a fixed model's greedy evaluation, pairs with every seed), with rliable's
    bootstrap over seeds from 5 seeds on and the seeds' range below."""
    root = tmp_path / "runs"
    # 4 tasks; seed s of "grpo" solves the first s tasks of 4 (capped), "ts" the first s - 1, "warm" task 0
    lines = {"grpo": {s: min(s, 4) for s in range(1, 6)}, "ts": {s: min(s - 1, 4) for s in range(1, 6)}, "warm": {1: 1}}
    lines["short"] = {1: 2, 2: 2, 3: 2}  # three seeds: a range, no interval
    for label, solved_by_seed in lines.items():
        for seed, solved in solved_by_seed.items():
            rows = [(1, 1.0, "charts/zero_variance_fraction", 0.5), (1, 2.0, "charts/test_success_rate", solved / 4)]
            run = write_run(root / f"{label}_{seed}", {"env": "tools:bank", "seed": seed, "groups_per_step": 4}, rows)
            (run / "sweep.json").write_text(json.dumps({"label": label}))
            outcome = [f"1,,{t},{float(t < solved)},3,0" for t in range(4)]
            (run / "held_out.csv").write_text("\n".join(["step,suffix,task_id,reward,turns,cut", *outcome]) + "\n")
    make_all(load_runs([root]), tmp_path / "plots", n_boot=100)
    with open(tmp_path / "plots" / "llm_summary.csv", newline="") as f:
        summary = {row["agent"]: row for row in csv.DictReader(f)}
    assert summary["ts"]["test success (last) by seed"] == "s1: 0.000, s2: 0.250, s3: 0.500, s4: 0.750, s5: 1.000"
    low, high = (float(x) for x in summary["ts"]["test success (last) interval over seeds"].split("]")[0][1:].split(","))
    assert 0.0 < low < 0.5 < high < 1.0  # a bootstrap of the mean 0.5, inside the seeds' range [0, 1]
    assert "percentile bootstrap, n = 5" in summary["ts"]["test success (last) interval over seeds"]
    assert summary["short"]["test success (last) interval over seeds"] == "range [0.500, 0.500] (n = 3 < 5: no interval)"
    with open(tmp_path / "plots" / "llm_paired.csv", newline="") as f:
        pairs = {(row["a"], row["b"]): row for row in csv.DictReader(f)}
    grpo_ts = pairs[("grpo", "ts")]
    assert grpo_ts["a - b by seed"] == "s1: +0.250, s2: +0.250, s3: +0.250, s4: +0.250, s5: +0.000"
    low, high = (float(x) for x in grpo_ts["a - b interval over seeds"].split("]")[0][1:].split(","))
    assert 0.0 <= low <= 0.2 <= high <= 0.25
    # the warm start's one run against each seed: grpo seed s solves min(s, 4) of 4 tasks, warm 1 of 4
    assert pairs[("grpo", "warm")]["a - b by seed"] == "s1: +0.000, s2: +0.250, s3: +0.500, s4: +0.750, s5: +0.750"
    # shared seeds only: short's seeds 1-3 against grpo's
    assert pairs[("grpo", "short")]["a - b by seed"] == "s1: -0.250, s2: +0.000, s3: +0.250"
    assert pairs[("grpo", "short")]["a - b interval over seeds"] == "range [-0.250, 0.250] (n = 3 < 5: no interval)"


def test_runs_pair_on_held_out_tasks_only_under_the_same_kind_filter():
    from cleanrl_style.experiments.plot.llm import task_args

    def run(**args):
        return RunData("python-math", 1, "grpo", {}, {"num_tasks": 1000, "task_seed": 0, "variants": ["base"], **args})

    before_the_flags = run()  # a run recorded before --test-kinds and --kinds existed: every kind
    assert task_args(before_the_flags) == task_args(run(test_kinds=[], kinds=[]))
    assert task_args(run(kinds=[4, 6])) != task_args(run(kinds=[]))
    assert task_args(run(test_kinds=[6])) != task_args(run(kinds=[6]))


def test_held_out_success_by_problem_kind_against_a_hand_count(tmp_path):
    root = tmp_path / "runs"
    # task ids 0, 7 and 14 are kind 0 (prime sum), 3 is kind 3 (digit sum of a power); step 1 is an
    # earlier evaluation the table must skip
    per_seed = {1: {0: 1, 7: 0, 14: 0, 3: 1}, 2: {0: 1, 7: 1, 14: 0, 3: 0}}
    for seed, outcomes in per_seed.items():
        run = write_run(
            root / f"grpo_{seed}", {"env": "python-math", "seed": seed}, [(2, 3.0, "charts/test_success_rate", 0.5)]
        )
        (run / "sweep.json").write_text(json.dumps({"label": "grpo"}))
        lines = ["step,suffix,task_id,reward,turns,cut", "1,,0,0.0,2,0"]
        lines += [f"2,,{t},{float(r)},2,0" for t, r in outcomes.items()]
        (run / "held_out.csv").write_text("\n".join(lines) + "\n")
    rctp = write_run(root / "rctp_1", {"env": "python-math", "seed": 1}, [(2, 3.0, "charts/test_success_rate", 0.5)])
    (rctp / "sweep.json").write_text(json.dumps({"label": "rctp"}))
    (rctp / "held_out.csv").write_text("step,suffix,task_id,reward,turns,cut\n2,high,0,1.0,2,0\n2,low,0,0.0,2,0\n")
    bank = write_run(root / "bank_1", {"env": "tools:bank", "seed": 1}, [(2, 3.0, "charts/test_success_rate", 0.5)])
    (bank / "held_out.csv").write_text("step,suffix,task_id,reward,turns,cut\n2,,0,1.0,2,0\n")  # no kinds: left out
    make_all(load_runs([root]), tmp_path / "plots", n_boot=100)
    with open(tmp_path / "plots" / "llm_by_kind.csv", newline="") as f:
        table = list(csv.DictReader(f))
    tokens = {row["line"]: row["success (mean over seeds)"] for row in table if row["line"].startswith("rctp")}
    assert tokens == {"rctp (high)": "1.0", "rctp (low)": "0.0"}  # each reward token a line of its own
    rows = {row["kind"]: row for row in table if row["line"] == "grpo"}
    assert sorted(rows) == ["0 prime sum", "3 digit sum of a power"]
    prime = rows["0 prime sum"]  # seed 1: 1 of 3, seed 2: 2 of 3
    assert (prime["line"], prime["tasks"], prime["seeds"], prime["by seed"]) == ("grpo", "3", "2", "0.33, 0.67")
    assert float(prime["success (mean over seeds)"]) == pytest.approx(0.5)
    assert float(rows["3 digit sum of a power"]["success (mean over seeds)"]) == pytest.approx(0.5)


def cycle_run(tmp_path: Path, seed: int, visit_returns: list[float], label: str = "plain") -> Path:
    """A run on a 3-task cycle, 1,000 steps per visit per sub-environment and 2 sub-environments (2,000
    agent steps per visit), logging every 250 steps: -999 in each visit's first three quarters, then
    the visit's return."""
    rows = []
    for v, value in enumerate(visit_returns):
        for step in range(v * 2000 + 250, (v + 1) * 2000 + 1, 250):
            rows.append((step, float(step), "charts/episodic_return", value if step > v * 2000 + 1500 else -999.0))
    args = {"env": "dmc:walker-stand.walk.run-every1000", "num_envs": 2, "seed": seed, "exp_name": label}
    return write_run(tmp_path / f"{label}_s{seed}", args, rows)


def test_task_cycle_visits_and_later_minus_first_match_a_hand_computation(tmp_path):
    from cleanrl_style.experiments.plot import later_minus_first, visit_returns, visit_rows

    # stand, walk, run, stand, walk, run: later minus first is -20, -10 and +6, mean -8
    returns = [100.0, 50.0, 10.0, 80.0, 40.0, 16.0]
    run = load_runs([cycle_run(tmp_path, 1, returns)])[0]
    np.testing.assert_array_equal(visit_returns(run), returns)
    # a run that stops short of a visit's end counts it when it covered half its last quarter or more
    for last_step, visits in ((12_000, 6), (11_750, 6), (11_500, 5)):
        short = RunData(run.env, 1, "short", {k: v[v[:, 0] <= last_step] for k, v in run.series.items()}, run.args)
        assert len(visit_returns(short)) == visits
    assert later_minus_first(np.array(returns), 3) == pytest.approx(-8.0)
    assert np.isnan(later_minus_first(np.array(returns[:3]), 3))  # no task visited twice
    for seed in range(2, 6):  # 5 seeds, later visits 3 (seed - 1) higher: gaps -8, -5, -2, 1, 4, mean -2
        cycle_run(tmp_path, seed, [r + (seed - 1) * (i >= 3) * 3 for i, r in enumerate(returns)])
    per_visit, gaps = visit_rows(load_runs([tmp_path]), n_boot=200)
    assert [(r["visit"], r["task"], r["task_visit"]) for r in per_visit][:4] == [
        (1, "stand", 1),
        (2, "walk", 1),
        (3, "run", 1),
        (4, "stand", 2),
    ]
    assert per_visit[0]["return_mean"] == 100.0 and per_visit[3]["return_mean"] == pytest.approx(80.0 + 6.0)
    (gap,) = gaps
    assert gap["seeds"] == 5 and gap["later_minus_first"] == pytest.approx(-2.0)
    assert gap["interval"] == interval_method(5) and -8.0 <= gap["ci_low"] < -2.0 < gap["ci_high"] <= 4.0
    assert (gap["seed_min"], gap["seed_max"], gap["seeds_below_zero"]) == (-8.0, 4.0, 3)


def test_runs_off_a_task_cycle_have_no_visits(tmp_path):
    from cleanrl_style.experiments.plot import visit_returns, visit_rows

    run_dir = write_run(tmp_path / "hopper", {"env": "Hopper", "seed": 1}, [(100, 1.0, "charts/episodic_return", 5.0)])
    assert len(visit_returns(load_runs([run_dir])[0])) == 0
    assert visit_rows(load_runs([run_dir])) == ([], [])


def test_the_visits_figure_and_tables_are_written_for_task_cycle_runs(tmp_path):
    for seed in (1, 2):
        cycle_run(tmp_path / "runs", seed, [100.0, 50.0, 10.0, 80.0, 40.0, 16.0])
    written = make_all(load_runs([tmp_path / "runs"]), tmp_path / "plots", n_boot=100)
    names = {p.name for p in written}
    assert {"visits.csv", "visits.md", "visits_gap.md", "visits_dmc_walker-stand.walk.run-every1000-v0.png"} <= names
    assert "none (n < 5)" in (tmp_path / "plots" / "visits_gap.md").read_text()


def test_scaling_growth_interval_resamples_each_points_seeds(tmp_path):
    from cleanrl_style.experiments.plot import growth_rows

    # five seeds a point: finals 0.95 * c; small width c in {100, ..., 140}, large in {300, ..., 700}
    for width, params, scales in (
        (32, 9000, [100.0, 110.0, 120.0, 130.0, 140.0]),
        (64, 30000, [300.0, 400.0, 500.0, 600.0, 700.0]),
    ):
        for seed, c in enumerate(scales, start=1):
            rows = [(s, float(s), "charts/episodic_return", c * s / 1000) for s in STEPS]
            rows.append((0, 0.0, "model/critic_parameters", float(params)))
            args = {"env": "Hopper", "seed": seed, "exp_name": "sac_simba", "encoder": "simba", "critic_width": width}
            write_run(tmp_path / f"simba{width}_s{seed}", args, rows)
    (g,) = growth_rows(load_runs([tmp_path]), n_boot=500)
    assert g["gain"] == pytest.approx(0.95 * (500.0 - 120.0))
    assert g["interval"] == "95% percentile bootstrap (rliable)"
    # resampling both points' seeds: the interval holds the gain, is wider than the small point's spread
    # alone (the large point's seeds vary by 400, the small one's by 40) and stays within the extreme pairs
    assert 0.95 * (300 - 140) <= g["ci_low"] < g["gain"] < g["ci_high"] <= 0.95 * (700 - 100)
    assert g["ci_high"] - g["ci_low"] > 0.95 * 40


def test_scaling_rows_put_each_lines_final_return_at_its_parameter_count(tmp_path):
    from cleanrl_style.experiments.plot import scaling_rows

    # final return: the mean over the last 10% of steps (900 and 1000), here c * 0.95 for a curve c * step / 1000
    for encoder, width, params, scales in (("simba", 32, 9000, [100.0, 200.0]), ("simba", 64, 30000, [300.0, 500.0]),
                                           ("mlp", 32, 8800, [50.0, 70.0]), ("mlp", 64, 29700, [60.0, 40.0])):  # fmt: skip
        for seed, c in enumerate(scales, start=1):
            rows = [(s, float(s), "charts/episodic_return", c * s / 1000) for s in STEPS]
            rows.append((0, 0.0, "model/critic_parameters", float(params)))
            args = {"env": "Hopper", "seed": seed, "exp_name": "sac_simba", "encoder": encoder, "critic_width": width}
            write_run(tmp_path / f"{encoder}{width}_s{seed}", args, rows)
    rows = scaling_rows(load_runs([tmp_path]), n_boot=100)
    got = [(r["architecture"], r["critic_parameters"], r["seeds"], round(r["final_mean"], 6)) for r in rows]
    assert got == [("mlp", 8800, 2, 57.0), ("mlp", 29700, 2, 47.5), ("simba", 9000, 2, 142.5), ("simba", 30000, 2, 380.0)]
    assert all(r["interval"] == "none (n < 5)" for r in rows)
    written = make_all(load_runs([tmp_path]), tmp_path / "plots", n_boot=100)
    assert {"scaling.md", "scaling_Hopper-v5.png"} <= {p.name for p in written}
    # what each step up in size gains, within an architecture only (no pair from mlp's largest to simba's smallest)
    from cleanrl_style.experiments.plot import growth_rows

    growth = growth_rows(load_runs([tmp_path]), n_boot=100)
    got = [(g["architecture"], g["from_parameters"], g["to_parameters"], g["seeds_from"], g["seeds_to"]) for g in growth]
    assert got == [("mlp", 8800, 29700, 2, 2), ("simba", 9000, 30000, 2, 2)]
    assert [round(g["gain"], 6) for g in growth] == [-9.5, 237.5]  # 47.5 - 57.0 and 380.0 - 142.5
    assert all(g["interval"] == "none (n < 5)" and np.isnan(g["ci_low"]) for g in growth)
    assert {"scaling_growth.md", "scaling_growth.csv"} <= {p.name for p in written}
    # each point's bar is its own: the interval where n >= 5, the seeds' range where fewer
    from cleanrl_style.experiments.plot.scaling import error_bar_ends

    five = {"ci_low": 10.0, "ci_high": 20.0, "seed_min": 5.0, "seed_max": 25.0}
    one = {"ci_low": float("nan"), "ci_high": float("nan"), "seed_min": 30.0, "seed_max": 30.0}
    low, high = error_bar_ends([five, one])
    assert low.tolist() == [10.0, 30.0] and high.tolist() == [20.0, 30.0]
    # a run that logged no parameter count is no point of a scaling study
    plain = write_run(
        tmp_path / "other" / "sac_s1", {"env": "Hopper", "seed": 1}, [(1000, 1.0, "charts/episodic_return", 5.0)]
    )
    assert scaling_rows(load_runs([plain])) == []


def test_differences_between_lines_resample_each_lines_seeds(tmp_path):
    # finals 0.95 * c: line "hi" c in {300, ..., 700} (5 seeds), "lo" c in {100, ..., 140} (5), "few" 2 seeds
    for name, scales in (("hi", [300.0, 400.0, 500.0, 600.0, 700.0]), ("lo", [100.0, 110.0, 120.0, 130.0, 140.0]),
                         ("few", [200.0, 220.0])):  # fmt: skip
        for seed, c in enumerate(scales, start=1):
            rows = [(s, float(s), "charts/episodic_return", c * s / 1000) for s in STEPS]
            write_run(tmp_path / f"{name}_s{seed}", {"env": "Hopper", "seed": seed, "exp_name": name}, rows)
    rows = difference_rows(load_runs([tmp_path]), n_boot=500)
    got = {(r["higher"], r["lower"]): r for r in rows}
    assert list(got) == [("hi", "few"), ("hi", "lo"), ("few", "lo")]  # each pair once, higher mean first
    d = got[("hi", "lo")]
    assert d["difference"] == pytest.approx(0.95 * (500.0 - 120.0))
    assert (d["seeds_higher"], d["seeds_lower"], d["interval"]) == (5, 5, "95% percentile bootstrap (rliable)")
    # both lines' seeds resampled: wider than "lo"'s spread alone, within the extreme pairs
    assert 0.95 * (300 - 140) <= d["ci_low"] < d["difference"] < d["ci_high"] <= 0.95 * (700 - 100)
    assert d["ci_high"] - d["ci_low"] > 0.95 * 40 * 2
    few = got[("few", "lo")]
    assert few["difference"] == pytest.approx(0.95 * (210.0 - 120.0))
    assert few["interval"] == "none (n < 5)" and np.isnan(few["ci_low"]) and np.isnan(few["ci_high"])
    written = {p.name for p in make_all(load_runs([tmp_path]), tmp_path / "plots", n_boot=100)}
    assert {"differences.csv", "differences.md"} <= written


def test_mean_difference_resamples_both_sets_of_seeds():
    """Two sets of seeds with the same spread: resampling both widens the interval by about sqrt(2)
    over one set's own interval; resampling either set alone would not."""
    from cleanrl_style.experiments.plot.stats import mean_difference

    higher, lower = np.array([300.0, 400.0, 500.0, 600.0, 700.0]), np.array([0.0, 100.0, 200.0, 300.0, 400.0])
    d = mean_difference(higher, lower, n_boot=2000)
    assert d["difference"] == pytest.approx(300.0)
    low, high = bootstrap_ci(higher, n_boot=2000)
    assert d["ci_high"] - d["ci_low"] > 1.25 * (high - low)
    assert d["ci_low"] < 300.0 < d["ci_high"]


def test_lines_keeps_the_named_lines_and_refuses_a_name_that_is_not_one(synthetic_runs, tmp_path, capsys):
    """``--lines`` draws one comparison out of a sweep's lines; a misspelt name is an error that lists
    the lines there are, and nothing is written."""
    from cleanrl_style.experiments.plot.cli import main

    labels = sorted({r.label for r in load_runs([synthetic_runs])})
    assert len(labels) == 2
    out = tmp_path / "one"
    assert main([str(synthetic_runs), "--lines", labels[0], "--out", str(out)]) == 0
    with open(out / "summary.csv", newline="") as f:
        assert {row["agent"] for row in csv.DictReader(f)} == {labels[0]}
    with pytest.raises(SystemExit, match=f"names no line nope; the runs given hold: {labels[0]} {labels[1]}"):
        main([str(synthetic_runs), "--lines", labels[1], "nope", "--out", str(tmp_path / "two")])
    assert not (tmp_path / "two").exists()
