"""benchmarks/nap_plasticity.py at tiny sizes: its CSVs, its target draws, and NaP's fixed norms."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import nap_plasticity as bench  # noqa: E402


def tiny(out: Path, **overrides) -> bench.Args:
    fields = dict(
        seeds=(1, 2),
        rounds=3,
        steps_per_round=10,
        num_inputs=64,
        input_dim=8,
        hidden=(16, 16),
        batch_size=16,
        lr=1e-2,
        window=2,
        n_boot=50,
        out=out,
        plot=False,
    )
    fields.update(overrides)
    return bench.Args(**fields)


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    threads = torch.get_num_threads()
    args = tiny(tmp_path_factory.mktemp("nap_plasticity"))
    try:
        bench.main(args)
    finally:
        torch.set_num_threads(threads)
    return args


def test_writes_one_row_per_task_arm_seed_and_round_and_a_summary(ran):
    with (ran.out / "rounds.csv").open() as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames or ()) == bench.ROUND_FIELDS
        rows = list(reader)
    keys = {(r["task"], r["arm"], int(r["seed"]), int(r["round"])) for r in rows}
    assert len(rows) == len(keys) == len(ran.tasks) * len(ran.arms) * len(ran.seeds) * ran.rounds
    assert {r["task"] for r in rows} == {"labels", "teacher"} and {r["arm"] for r in rows} == set(bench.DEFAULT_ARMS)
    for r in rows:
        assert float(r["loss"]) >= 0 and 0 <= float(r["dead_fraction"]) <= 1
        assert (0 <= float(r["accuracy"]) <= 1) if r["task"] == "labels" else r["accuracy"] == "nan"
    with (ran.out / "summary.csv").open() as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames or ()) == bench.SUMMARY_FIELDS
        summary = list(reader)
    assert len(summary) == len(ran.tasks) * len(ran.arms)
    for s in summary:
        assert int(s["n_seeds"]) == 2 and s["interval"] == "none (n=2 < 5)" and s["first_low"] == "nan"
        assert float(s["change"]) == pytest.approx(float(s["last_loss"]) - float(s["first_loss"]), abs=1e-4)
    with (ran.out / "comparisons.csv").open() as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames or ()) == bench.COMPARISON_FIELDS
        pairs = {(c["task"], c["arm"], c["baseline"]) for c in reader}
    assert pairs == {(t, a, b) for t in ran.tasks for a, b in (("layernorm", "plain"), ("nap", "plain"), ("nap", "layernorm"))}
    assert json.loads((ran.out / "args.json").read_text())["rounds"] == 3
    provenance = json.loads((ran.out / "provenance.json").read_text())
    assert {"time", "commit", "cpu", "cores", "load_average", "packages"} <= set(provenance)


@pytest.mark.parametrize("task", bench.TASKS)
def test_every_round_draws_new_targets_and_every_arm_sees_the_same_ones(task, tmp_path):
    args = tiny(tmp_path, num_inputs=512)
    inputs = bench.make_inputs(args, seed=1)
    first = bench.make_targets(args, task, inputs, seed=1, round_=0)
    assert torch.equal(first, bench.make_targets(args, task, inputs, seed=1, round_=0))
    for other in (bench.make_targets(args, task, inputs, seed=1, round_=1), bench.make_targets(args, task, inputs, 2, 0)):
        if task == "labels":
            assert (first == other).float().mean() < 0.2  # chance agreement is 1 / classes
        else:
            assert first.std() == pytest.approx(1.0, rel=1e-3)
            assert abs(torch.corrcoef(torch.stack([first[:, 0], other[:, 0]]))[0, 1]) < 0.9


def test_nap_holds_the_hidden_weight_norms_that_move_without_it(ran):
    with (ran.out / "rounds.csv").open() as f:
        rows = list(csv.DictReader(f))
    for task in ran.tasks:
        for seed in ran.seeds:
            for arm in ("plain", "nap"):
                model, _ = bench.make_model(ran, task, arm, seed)
                hidden = [float(m.weight.detach().norm()) for m in list(model)[:-1] if isinstance(m, torch.nn.Linear)]
                init = sum(hidden) / len(hidden)
                norms = [float(r["weight_norm"]) for r in rows if (r["task"], r["arm"], int(r["seed"])) == (task, arm, seed)]
                if arm == "nap":
                    assert norms == pytest.approx([init] * len(norms), rel=1e-4)
                else:
                    assert max(abs(n / init - 1) for n in norms) > 2e-3


def test_the_nap_arms_project_what_the_agents_flags_project(tmp_path):
    args = tiny(tmp_path)
    output = str(len(bench.make_model(args, "labels", "nap", 1)[0]) - 1)  # the output layer's index in the Sequential
    groups = {arm: {g.name for g in bench.make_model(args, "labels", arm, 1)[1].groups} for arm in ("nap", "nap_output")}
    assert groups["nap_output"] - groups["nap"] == {output}
    assert bench.make_model(args, "labels", "layernorm", 1)[1] is None
