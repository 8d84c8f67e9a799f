"""Copy the compact part of a recipe's finished runs into the repository, for results that ship.

    python -m cleanrl_style.experiments.results benchmarks/recipes/cpu_hopper_100k.toml
    python -m cleanrl_style.experiments.results benchmarks/recipes/cpu_hopper_100k.toml \
        --runs-dir /elsewhere/runs/recipes/cpu_hopper_100k

For every finished point of the recipe (its run folder has the sweep's ``sweep.json``), writes
``results/<recipe>/<run folder>/`` with ``progress.csv`` cut down to the metrics a reader plots
(``charts/*``: returns, lengths, steps per second, the LLM agents' success and zero-variance
fractions; ``eval/*``; ``nap/*``: NaP norms and effective learning rates; the LLM agents' ``rctp/*``,
``rc_grpo/*``, ``turnsight/*`` and ``memory/peak_rss_gib``; ``model/*``: the parameter counts a
scaling study plots against), plus ``args.json``, ``sweep.json``, ``provenance.json`` (commit,
versions, CPU, load) and an LLM run's per-task ``held_out.csv``, and a copy of the recipe. No checkpoints, no
TensorBoard events. ``python -m cleanrl_style.experiments.plot results/<recipe>`` then draws the figures.
"""

from __future__ import annotations

import csv
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import tyro

from cleanrl_style.experiments.recipes import RecipeError, load_recipe
from cleanrl_style.experiments.sweep import DONE_NAME, RECIPE_RUNS, recipe_points

KEPT_PREFIXES = ("charts/", "eval/", "nap/", "rctp/", "rc_grpo/", "turnsight/", "memory/", "model/")
COPIED_FILES = ("args.json", DONE_NAME, "provenance.json", "held_out.csv")


def compact_progress(source: Path, target: Path, prefixes: tuple[str, ...] = KEPT_PREFIXES) -> int:
    """Copy the rows of ``source`` (a progress.csv) whose metric starts with one of ``prefixes``; returns the count."""
    kept = 0
    with open(source, newline="") as src, open(target, "w", newline="") as dst:
        reader, writer = csv.reader(src), csv.writer(dst)
        writer.writerow(next(reader))
        for row in reader:
            if len(row) == 4 and row[2].startswith(prefixes):
                writer.writerow(row)
                kept += 1
    return kept


def export(recipe_path: str, runs_dir: str = "", out_dir: str = "") -> list[Path]:
    """Export the finished runs of a recipe; returns the result folders written."""
    recipe = load_recipe(recipe_path)
    runs = Path(runs_dir) if runs_dir else RECIPE_RUNS / recipe.name
    out = Path(out_dir) if out_dir else Path("results") / recipe.name
    written: list[Path] = []
    kept: list[str] = []
    missing: list[str] = []
    for point in recipe_points(recipe):
        run = runs / point.folder_name()
        if not (run / DONE_NAME).exists():
            # A result exported earlier (perhaps from another machine's runs) stays as it is.
            (kept if (out / point.folder_name() / DONE_NAME).exists() else missing).append(point.folder_name())
            continue
        target = out / point.folder_name()
        target.mkdir(parents=True, exist_ok=True)
        compact_progress(run / "progress.csv", target / "progress.csv")
        for name in COPIED_FILES:
            if (run / name).exists():
                shutil.copy2(run / name, target / name)
        written.append(target)
    if written:
        shutil.copy2(recipe.path, out / "recipe.toml")
    print(f"{recipe.name}: {len(written)} finished run(s) exported to {out}")
    if kept:
        print(f"kept from an earlier export (no finished run here): {', '.join(kept)}")
    if missing:
        print(f"not finished and not in {out} (no result): {', '.join(missing)}")
    return written


@dataclass
class ResultsArgs:
    recipe: tyro.conf.Positional[str]
    """the recipe file, benchmarks/recipes/<name>.toml"""
    runs_dir: str = ""
    """where the recipe's runs are (default: runs/recipes/<name>)"""
    out: str = ""
    """where to write (default: results/<name>)"""


def main(argv: list[str] | None = None) -> int:
    args = tyro.cli(ResultsArgs, args=argv, prog="python -m cleanrl_style.experiments.results")
    try:
        export(args.recipe, args.runs_dir, args.out)
    except RecipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
