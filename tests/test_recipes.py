"""Benchmark recipes: parsing and its errors, a tiny recipe run end to end, skipped when rerun, exported, plotted."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cleanrl_style.experiments.recipes import RecipeError, load_recipe
from cleanrl_style.experiments.results import export
from cleanrl_style.experiments.sweep import recipe_points

REPO = Path(__file__).resolve().parents[1]

TINY = """
description = "two PPO arms on Pendulum, one short iteration each"
workers = 2

[defaults]
envs = ["Pendulum"]
seeds = [1]
flags = ["--num-envs", "2", "--num-steps", "64", "--num-minibatches", "2", "--update-epochs", "1",
         "--total-timesteps", "512", "--eval-episodes", "1"]

[[arm]]
name = "nap"
agent = "ppo_nap"

[[arm]]
name = "plain"
agent = "ppo_nap"
flags = ["--no-nap", "--no-layer-norm"]
"""


def write(tmp_path: Path, text: str, name: str = "tiny.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_arms_inherit_defaults_and_name_their_folders(tmp_path):
    recipe = load_recipe(write(tmp_path, TINY))
    assert recipe.name == "tiny" and recipe.workers == 2 and [a.name for a in recipe.arms] == ["nap", "plain"]
    plain = recipe.arm("plain")
    assert plain.flags[-2:] == ("--no-nap", "--no-layer-norm") and plain.flags[:2] == ("--num-envs", "2")
    points = recipe_points(recipe)
    assert [p.folder_name() for p in points] == ["Pendulum__nap__s1", "Pendulum__plain__s1"]
    assert [p.label for p in points] == ["nap", "plain"]
    assert [p.folder_name() for p in recipe_points(recipe, ["plain"])] == ["Pendulum__plain__s1"]


def test_seeds_and_envs_select_points_of_a_recipe(tmp_path):
    text = TINY.replace('envs = ["Pendulum"]\nseeds = [1]', 'envs = ["Pendulum", "Hopper"]\nseeds = [1, 2]')
    recipe = load_recipe(write(tmp_path, text))
    assert len(recipe_points(recipe)) == 2 * 2 * 2
    chosen = recipe_points(recipe, seeds=[2], envs=["Hopper"])
    assert [p.folder_name() for p in chosen] == ["Hopper__nap__s2", "Hopper__plain__s2"]
    with pytest.raises(RecipeError, match="no point of the recipe has the seeds \\[3\\]"):
        recipe_points(recipe, seeds=[3])


@pytest.mark.parametrize(
    "text, message",
    [
        ("[[arm]]\nname = 'a'\nagent = 'ppo_nap'\n", "no envs"),
        ("[[arm]]\nname = 'a'\nenvs = ['Hopper']\n", "'agent' is required"),
        ("[[arm]]\nname = 'a__b'\nagent = 'ppo_nap'\nenvs = ['Hopper']\n", "may not contain '__'"),
        ("[[arm]]\nname = 'a'\nagent = 'ppo_nap'\nenvs = ['Hopper']\nseed = [1]\n", "unknown keys ['seed']"),
        ("colour = 1\n[[arm]]\nname = 'a'\nagent = 'ppo_nap'\nenvs = ['Hopper']\n", "unknown keys ['colour']"),
        ("description = 'nothing'\n", "no [[arm]] tables"),
        ("[[arm]\n", "not valid TOML"),
        (
            "[defaults]\nenvs = ['Hopper']\n[[arm]]\nname = 'a'\nagent = 'ppo_nap'\n[[arm]]\nname = 'a'\nagent = 'sac_nap'\n",
            "arm names repeat",
        ),
    ],
)
def test_bad_recipes_are_refused_with_the_problem_named(tmp_path, text, message):
    with pytest.raises(RecipeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_recipe(write(tmp_path, text))


def test_a_missing_recipe_file_is_named(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "cleanrl_style.experiments.sweep", "--recipe", str(tmp_path / "nope.toml")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 2 and "nope.toml does not exist" in proc.stderr


@pytest.mark.slow
def test_a_tiny_recipe_runs_is_skipped_when_rerun_exports_and_plots(tmp_path):
    recipe = write(tmp_path, TINY)
    runs = tmp_path / "runs"
    command = [sys.executable, "-m", "cleanrl_style.experiments.sweep", "--recipe", str(recipe), "--sweep-dir", str(runs)]
    first = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "2 grid points" in first.stdout and "2 run(s) finished, 0 failed" in first.stdout
    for arm in ("nap", "plain"):
        record = json.loads((runs / f"Pendulum__{arm}__s1" / "sweep.json").read_text())
        assert record["label"] == arm and record["returncode"] == 0
    assert "--no-nap" in json.loads((runs / "Pendulum__plain__s1" / "sweep.json").read_text())["command"]
    provenance = json.loads((runs / "Pendulum__nap__s1" / "provenance.json").read_text())
    assert len(provenance) == 1 and provenance[0]["commit"] and provenance[0]["packages"]["torch"]

    again = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert again.returncode == 0 and "2 finished, 0 to run" in again.stdout

    out = tmp_path / "results"
    written = export(str(recipe), str(runs), str(out))
    assert sorted(p.name for p in written) == ["Pendulum__nap__s1", "Pendulum__plain__s1"]
    assert (out / "recipe.toml").read_text() == TINY
    with open(out / "Pendulum__nap__s1" / "progress.csv") as f:
        metrics = {row["metric"] for row in csv.DictReader(f)}
    assert "eval/return_mean" in metrics and "charts/SPS" in metrics
    assert not any(m.startswith("losses/") for m in metrics)  # cut down to what a reader plots
    assert not (out / "Pendulum__nap__s1" / "checkpoint.pt").exists()

    plots = tmp_path / "plots"
    plotted = subprocess.run(
        [sys.executable, "-m", "cleanrl_style.experiments.plot", str(out), "--out", str(plots)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert plotted.returncode == 0, plotted.stdout + plotted.stderr
    summary = (plots / "summary.md").read_text()
    assert "nap" in summary and "plain" in summary
    assert (plots / "curves_steps.png").stat().st_size > 10_000


def test_export_keeps_earlier_results_and_names_what_has_none(tmp_path, capsys):
    recipe = write(tmp_path, TINY.replace("seeds = [1]", "seeds = [1, 2]"))
    runs, out = tmp_path / "runs", tmp_path / "results"
    finished = runs / "Pendulum__nap__s1"
    finished.mkdir(parents=True)
    (finished / "progress.csv").write_text(
        "step,time,metric,value\n0,0.0,eval/return_mean,-1.0\n0,0.0,losses/q,2.0\n0,0.0,model/critic_parameters,9.0\n"
    )
    (finished / "sweep.json").write_text("{}")
    earlier = out / "Pendulum__plain__s1"  # exported before, from runs that are not here
    earlier.mkdir(parents=True)
    (earlier / "sweep.json").write_text('{"from": "elsewhere"}')

    written = export(str(recipe), str(runs), str(out))
    printed = capsys.readouterr().out
    assert [p.name for p in written] == ["Pendulum__nap__s1"]
    kept = (out / "Pendulum__nap__s1" / "progress.csv").read_text()
    assert kept.count("\n") == 3 and "losses/" not in kept  # the losses row dropped
    assert "model/critic_parameters" in kept  # the parameter count a scaling study plots against
    assert (earlier / "sweep.json").read_text() == '{"from": "elsewhere"}'
    assert "kept from an earlier export (no finished run here): Pendulum__plain__s1" in printed
    assert "(no result): Pendulum__nap__s2, Pendulum__plain__s2" in printed


ARM = "[[arm]]\nname = 'a'\nagent = 'ppo_nap'\nenvs = ['Hopper']\n"
MALFORMED = [
    ("defaults = 5\n" + ARM, "[defaults] must be a table"),
    ("arm = [1, 2]\n", "'arm' must be [[arm]] tables"),
    ('[defaults]\nflags = "--x \'unterminated"\n' + ARM, "flags: No closing quotation"),
    (ARM.replace("['Hopper']", "'Ant'"), "'envs' must be a list of env names, e.g. envs = [\"Ant\"]"),
    (ARM + "seeds = [-3]\n", "seeds must be integers from 0 to 4294967295"),
    (ARM + "seeds = [true]\n", "seeds must be integers from 0 to 4294967295"),
    (ARM + f"seeds = [{10**18}]\n", "seeds must be integers from 0 to 4294967295"),
    (ARM.replace("name = 'a'", 'name = "a\\nb"'), "arm name 'a\\nb' may hold only letters"),  # a newline
    (ARM.replace("name = 'a'", "name = 'a b'"), "arm name 'a b' may hold only letters"),
    ("workers = true\n" + ARM, "workers must be a non-negative integer"),
    (ARM + "flags = [true]\n", "flags must be a list of strings"),
]


@pytest.mark.parametrize("text, message", MALFORMED, ids=[m for _, m in MALFORMED])
def test_malformed_recipes_are_refused_with_the_problem_named(tmp_path, text, message):
    with pytest.raises(RecipeError) as refused:
        load_recipe(write(tmp_path, text))
    assert message in str(refused.value), str(refused.value)


def sweep(*args, cwd=REPO):
    return subprocess.run(
        [sys.executable, "-m", "cleanrl_style.experiments.sweep", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def assert_one_line_exit_2(proc, phrase):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and phrase in lines[0], (proc.returncode, proc.stderr)


def test_sweep_answers_unreadable_recipes_unknown_agents_and_duplicate_points_in_one_line(tmp_path):
    (tmp_path / "latin1.toml").write_bytes("description = 'caf\xe9'\n".encode("latin-1") + ARM.encode())
    assert_one_line_exit_2(sweep("--recipe", str(tmp_path / "latin1.toml")), "is not UTF-8 text")
    assert_one_line_exit_2(sweep("--recipe", str(tmp_path)), "is a folder, not a recipe file")
    for text, phrase in MALFORMED[:3]:
        assert_one_line_exit_2(sweep("--recipe", str(write(tmp_path, text))), phrase)
    unknown = write(tmp_path, ARM.replace("'ppo_nap'", "'ppo_nope'"))
    assert_one_line_exit_2(sweep("--recipe", str(unknown), "--dry-run"), "unknown agent 'ppo_nope'")
    twice = write(tmp_path, ARM.replace("['Hopper']", "['Hopper', 'Hopper']"))
    assert_one_line_exit_2(sweep("--recipe", str(twice), "--dry-run"), "two points map to the same run folder")
    grid = sweep("--agents", "ppo_nap", "ppo_nap", "--envs", "Hopper", "--dry-run", "--sweep-dir", str(tmp_path / "s"))
    assert_one_line_exit_2(grid, "two grid points map to the same run folder")
    assert_one_line_exit_2(sweep("--agents", "nope", "--envs", "Hopper", "--dry-run"), "unknown agent 'nope'")
