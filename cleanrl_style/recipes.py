"""Benchmark recipes: which arms (an agent and its flags, under a label) run on which envs and seeds.

A recipe is a TOML file, usually in ``benchmarks/recipes/``::

    description = "SAC variants on Hopper-v5, 100k steps"
    workers = 2                          # optional: runs at once (default: one per core)

    [defaults]                           # optional: what every arm starts from
    envs = ["Hopper"]
    seeds = [1, 2, 3]
    flags = ["--total-timesteps", "100000"]

    [[arm]]
    name = "sac_nap"                     # the label: run folders and plot legends
    agent = "sac_nap"                    # a file in agents/ (or a path to one)
    flags = []                           # appended to the default flags

    [[arm]]
    name = "sac_plain"
    agent = "sac_nap"
    flags = ["--no-nap", "--no-layer-norm"]
    envs = ["Hopper", "Walker2d"]        # replaces the default envs (likewise seeds)

``python -m cleanrl_style.sweep --recipe FILE`` runs every (arm, env, seed) point into
``runs/recipes/<recipe>/<env>__<arm>__s<seed>/``, skipping finished points and resuming interrupted
ones; ``python -m cleanrl_style.results FILE`` copies the compact part of the finished runs to
``results/<recipe>/``; ``python -m cleanrl_style.plot results/<recipe>`` draws them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib

ARM_KEYS = {"name", "agent", "flags", "envs", "seeds"}
TOP_KEYS = {"description", "workers", "defaults", "arm"}


@dataclass(frozen=True)
class Arm:
    name: str
    agent: str
    flags: tuple[str, ...]
    envs: tuple[str, ...]
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class Recipe:
    name: str  # the file's stem: runs/recipes/<name>, results/<name>
    path: Path
    description: str
    workers: int  # 0: one per core
    arms: tuple[Arm, ...]

    def arm(self, name: str) -> Arm:
        for arm in self.arms:
            if arm.name == name:
                return arm
        raise KeyError(f"recipe {self.name} has no arm {name!r}; its arms: {', '.join(a.name for a in self.arms)}")


class RecipeError(ValueError):
    """A recipe file that cannot be run; the message names the file, the problem and the fix."""


def _flags(value, where: str) -> tuple[str, ...]:
    if isinstance(value, str):  # one string is split like a shell line
        import shlex

        return tuple(shlex.split(value))
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise RecipeError(f'{where}: flags must be a list of strings, e.g. ["--total-timesteps", "100000"]')
    return tuple(str(v) for v in value)


def load_recipe(path: str | Path) -> Recipe:
    """Parse and check a recipe file."""
    path = Path(path)
    if not path.exists():
        raise RecipeError(f"recipe {path} does not exist; recipes live in benchmarks/recipes/")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise RecipeError(f"{path} is not valid TOML: {e}") from None
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise RecipeError(f"{path}: unknown keys {sorted(unknown)}; a recipe has {sorted(TOP_KEYS)}")
    defaults = data.get("defaults", {})
    unknown = set(defaults) - {"envs", "seeds", "flags"}
    if unknown:
        raise RecipeError(f"{path}: unknown keys in [defaults]: {sorted(unknown)}; allowed: envs, seeds, flags")
    arms = []
    for i, raw in enumerate(data.get("arm", [])):
        where = f"{path}: arm {i + 1}"
        unknown = set(raw) - ARM_KEYS
        if unknown:
            raise RecipeError(f"{where}: unknown keys {sorted(unknown)}; an arm has {sorted(ARM_KEYS)}")
        for key in ("name", "agent"):
            if not isinstance(raw.get(key), str) or not raw[key]:
                raise RecipeError(f"{where}: '{key}' is required (a non-empty string)")
        if "__" in raw["name"] or "/" in raw["name"]:
            raise RecipeError(f"{where}: arm name {raw['name']!r} may not contain '__' or '/' (it names run folders)")
        envs = raw.get("envs", defaults.get("envs"))
        seeds = raw.get("seeds", defaults.get("seeds", [1, 2, 3]))
        if not envs or not all(isinstance(e, str) for e in envs):
            raise RecipeError(f"{where}: no envs; give 'envs' in the arm or in [defaults]")
        if not seeds or not all(isinstance(s, int) for s in seeds):
            raise RecipeError(f"{where}: 'seeds' must be a non-empty list of integers")
        flags = _flags(defaults.get("flags", []), f"{path}: [defaults]") + _flags(raw.get("flags", []), where)
        arms.append(Arm(raw["name"], raw["agent"], flags, tuple(envs), tuple(seeds)))
    if not arms:
        raise RecipeError(f"{path}: no [[arm]] tables; a recipe needs at least one arm")
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise RecipeError(f"{path}: arm names repeat ({names}); each arm needs its own name")
    workers = data.get("workers", 0)
    if not isinstance(workers, int) or workers < 0:
        raise RecipeError(f"{path}: workers must be a non-negative integer")
    return Recipe(path.stem, path.resolve(), str(data.get("description", "")).strip(), workers, tuple(arms))
