"""Published learning curves (the SimbaV2 release's Gymnasium-MuJoCo v4 curves) beside a suite's runs,
cut at the runs' step budget."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from cleanrl_style.experiments.plot.data import REFERENCE_CSV, RETURN, RunData


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
