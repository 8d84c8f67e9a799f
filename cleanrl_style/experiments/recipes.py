"""Benchmark recipes: which arms (an agent and its flags, under a label) run on which envs and seeds.

A recipe is a TOML file, usually in ``benchmarks/recipes/``::

    description = "SAC variants on Hopper-v5, 100k steps"
    workers = 2                          # optional: runs at once (default: one per core)

    [defaults]                           # optional: what every arm starts from
    envs = ["Hopper"]                    # a list, also of one env
    seeds = [1, 2, 3]                    # integers from 0 to 2**32 - 1
    flags = ["--total-timesteps", "100000"]   # or one string, split like a shell line

    [[arm]]
    name = "sac_nap"                     # the label: run folders and plot legends (letters, digits, . + = - _)
    agent = "sac_nap"                    # a file in agents/ (or a path to one)
    flags = []                           # appended to the default flags

    [[arm]]
    name = "sac_plain"
    agent = "sac_nap"
    flags = ["--no-nap", "--no-layer-norm"]
    envs = ["Hopper", "Walker2d"]        # replaces the default envs (likewise seeds)

``python -m cleanrl_style.experiments.sweep --recipe FILE`` runs every (arm, env, seed) point into
``runs/recipes/<recipe>/<env>__<arm>__s<seed>/``, skipping finished points and resuming interrupted
ones; ``python -m cleanrl_style.experiments.results FILE`` copies the compact part of the finished runs to
``results/<recipe>/``; ``python -m cleanrl_style.experiments.plot results/<recipe>`` draws them.
"""

from __future__ import annotations

import json
import re
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


SEED_MAX = 2**32 - 1  # NumPy's seeds are 32-bit
ARM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+=-]*(?:_[A-Za-z0-9.+=-]+)*")  # a folder name's part: no "__", "/", space


def _flags(value, where: str) -> tuple[str, ...]:
    if isinstance(value, str):  # one string is split like a shell line
        import shlex

        try:
            return tuple(shlex.split(value))
        except ValueError as e:
            raise RecipeError(f"{where}: flags: {e} in {value!r}; close the quote, or give a list of strings") from None
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        raise RecipeError(f'{where}: flags must be a list of strings, e.g. ["--total-timesteps", "100000"]')
    return tuple(str(v) for v in value)


def _envs(value, where: str) -> tuple[str, ...]:
    if value is None or (isinstance(value, list) and not value):
        raise RecipeError(f"{where}: no envs; give 'envs' in the arm or in [defaults]")
    if not isinstance(value, list) or not all(isinstance(e, str) and e.strip() for e in value):
        example = f"envs = [{json.dumps(value)}]" if isinstance(value, str) else 'envs = ["Hopper", "Walker2d"]'
        raise RecipeError(f"{where}: 'envs' must be a list of env names, e.g. {example}")
    return tuple(value)


def _seeds(value, where: str) -> tuple[int, ...]:
    valid = isinstance(value, list) and value and all(type(s) is int and 0 <= s <= SEED_MAX for s in value)
    if not valid:
        raise RecipeError(f"{where}: seeds must be integers from 0 to {SEED_MAX}, in a non-empty list (got {value!r})")
    return tuple(value)


def _read(path: Path) -> dict:
    if path.is_dir():
        raise RecipeError(f"{path} is a folder, not a recipe file; pass a .toml file, e.g. benchmarks/recipes/<name>.toml")
    if not path.exists():
        raise RecipeError(f"recipe {path} does not exist; recipes live in benchmarks/recipes/")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecipeError(f"{path} is not UTF-8 text (byte {e.start}); save it as UTF-8, as TOML requires") from None
    except OSError as e:
        raise RecipeError(f"{path} cannot be read ({e.strerror})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise RecipeError(f"{path} is not valid TOML: {e}") from None


def load_recipe(path: str | Path) -> Recipe:
    """Parse and check a recipe file."""
    path = Path(path)
    data = _read(path)
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise RecipeError(f"{path}: unknown keys {sorted(unknown)}; a recipe has {sorted(TOP_KEYS)}")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise RecipeError(f"{path}: [defaults] must be a table (a [defaults] section with envs, seeds, flags)")
    unknown = set(defaults) - {"envs", "seeds", "flags"}
    if unknown:
        raise RecipeError(f"{path}: unknown keys in [defaults]: {sorted(unknown)}; allowed: envs, seeds, flags")
    raw_arms = data.get("arm", [])
    if not isinstance(raw_arms, list) or not all(isinstance(raw, dict) for raw in raw_arms):
        raise RecipeError(f"{path}: 'arm' must be [[arm]] tables, each with a name and an agent")
    arms = []
    for i, raw in enumerate(raw_arms):
        where = f"{path}: arm {i + 1}"
        unknown = set(raw) - ARM_KEYS
        if unknown:
            raise RecipeError(f"{where}: unknown keys {sorted(unknown)}; an arm has {sorted(ARM_KEYS)}")
        for key in ("name", "agent"):
            if not isinstance(raw.get(key), str) or not raw[key]:
                raise RecipeError(f"{where}: '{key}' is required (a non-empty string)")
        if "__" in raw["name"] or "/" in raw["name"]:
            raise RecipeError(f"{where}: arm name {raw['name']!r} may not contain '__' or '/' (it names run folders)")
        if not ARM_NAME.fullmatch(raw["name"]):
            raise RecipeError(
                f"{where}: arm name {raw['name']!r} may hold only letters, digits and . + = - _ (it names run folders)"
            )
        envs = _envs(raw.get("envs", defaults.get("envs")), where)
        seeds = _seeds(raw.get("seeds", defaults.get("seeds", [1, 2, 3])), where)
        flags = _flags(defaults.get("flags", []), f"{path}: [defaults]") + _flags(raw.get("flags", []), where)
        arms.append(Arm(raw["name"], raw["agent"], flags, envs, seeds))
    if not arms:
        raise RecipeError(f"{path}: no [[arm]] tables; a recipe needs at least one arm")
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise RecipeError(f"{path}: arm names repeat ({names}); each arm needs its own name")
    workers = data.get("workers", 0)
    if type(workers) is not int or workers < 0:
        raise RecipeError(f"{path}: workers must be a non-negative integer")
    return Recipe(path.stem, path.resolve(), str(data.get("description", "")).strip(), workers, tuple(arms))
