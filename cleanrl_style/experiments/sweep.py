"""Run a grid of agent x env x flag values x seed, resumably, locally or on a Ray cluster.

    python -m cleanrl_style.experiments.sweep --agents ppo_nap --envs Hopper Walker2d --seeds 1 2 3 \\
        --grid nap=true,false --flags "--total-timesteps 200000" --sweep-dir runs/sweeps/nap
    python -m cleanrl_style.experiments.sweep ... --launcher ray --ray-address auto      # on an existing Ray cluster
    python -m cleanrl_style.experiments.sweep --recipe benchmarks/recipes/cpu_hopper.toml # a benchmark recipe

A recipe (``cleanrl_style/experiments/recipes.py``) names arms (an agent and its flags, under a label) instead
of a grid; its points live in ``runs/recipes/<recipe>/<env>__<arm>__s<seed>``.

Every grid point has a deterministic run folder, ``<sweep-dir>/<env>__<agent>[__<values>]__s<seed>``,
so invoking the same command again picks up where the last one stopped:

- a point whose run finished (the sweep wrote ``sweep.json`` with exit code 0 after it) is skipped;
- a point whose run was interrupted after its first checkpoint continues with the agent's
  ``--resume <folder>`` and the point's flags (its CSV rows after that checkpoint are dropped and
  written again, so none is duplicated or lost): a flag a resume may change, such as a recipe's
  new ``--total-timesteps``, applies to the run, and one that contradicts the saved run is refused
  by name;
- a point whose run was interrupted before any checkpoint starts again from an emptied folder.

Locally, up to ``--workers`` runs (default: one per core) are child processes of the sweep; Ctrl-C
or SIGTERM stops them. With ``--launcher ray`` each point is a Ray task (``--cpus-per-run`` CPUs)
that does the same on whichever node runs it: the sweep folder must then be on a filesystem every
node sees, and the repository at the same path on every node.

``--import my_envs`` imports a module (from the current directory or installed) before each run, so
that an env it registers with Gymnasium can be named in ``--envs``.

``--grid KEY=V1,V2`` passes ``--KEY V`` to the agent (``true``/``false`` become ``--KEY`` /
``--no-KEY``); several ``--grid`` options multiply. ``--flags`` go unchanged to every run.
A failed run is reported with the end of its log (``<run folder>/sweep.log``); the others go on,
and the sweep exits 1. Running the same sweep folder from two sweeps at once is not supported.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Literal, NoReturn

import tyro

from cleanrl_style.experiments.recipes import Recipe, RecipeError, load_recipe
from cleanrl_style.runs.checkpoint import CHECKPOINT_NAME

REPO_ROOT = Path(__file__).resolve().parents[2]
RECIPE_RUNS = Path("runs/recipes")  # a recipe's runs: runs/recipes/<recipe name>/<env>__<arm>__s<seed>
DONE_NAME = "sweep.json"  # written by the sweep when a run exits 0: the point is finished
LOG_NAME = "sweep.log"  # the run's stdout and stderr, appended across restarts


@dataclass(frozen=True)
class GridPoint:
    """One run of the grid: an agent file, an env, a seed and the flag values that vary."""

    agent: str  # the agent's name (file stem) as given on the command line
    agent_file: str  # absolute path of the agent script
    env: str
    seed: int
    values: tuple[tuple[str, str], ...] = ()  # (flag, value) pairs from --grid, in grid order
    flags: tuple[str, ...] = ()  # --flags, passed unchanged
    imports: tuple[str, ...] = ()  # modules imported before the agent runs (they register envs)
    arm: str = ""  # a recipe's arm name: the label and folder name instead of agent + grid values

    @property
    def label(self) -> str:
        """The arm, or the agent and its grid values, e.g. ``ppo_nap nap=false``: one line in the plots."""
        return self.arm or " ".join([self.agent, *(f"{k}={v}" for k, v in self.values)])

    def folder_name(self) -> str:
        if self.arm:
            parts = [self.env.replace(":", "-"), self.arm, f"s{self.seed}"]
        else:
            parts = [self.env, self.agent, *(f"{k}-{v}" for k, v in self.values), f"s{self.seed}"]
        return "__".join(p.replace("/", "_").replace(" ", "_") for p in parts)

    def value_flags(self) -> list[str]:
        out = []
        for key, value in self.values:
            if value.lower() in ("true", "false"):
                out.append(f"--{key}" if value.lower() == "true" else f"--no-{key}")
            else:
                out += [f"--{key}", value]
        return out


class SweepError(ValueError):
    """A sweep that cannot run as asked (unknown agent, points that collide); the message names the fix."""


def resolve_agent(agent: str) -> Path:
    """``ppo_nap`` -> ``<repo>/agents/ppo_nap.py``; a path to a ``.py`` file is used as is."""
    path = Path(agent)
    if path.suffix == ".py" and path.exists():
        return path.resolve()
    for folder in (REPO_ROOT / "agents", Path.cwd() / "agents"):
        candidate = folder / f"{agent}.py"
        if candidate.exists():
            return candidate.resolve()
    known = sorted(p.stem for p in (REPO_ROOT / "agents").glob("*.py"))
    raise SweepError(f"unknown agent {agent!r}: pass a name from agents/ ({', '.join(known)}) or a path to a .py file")


def parse_grid(specs: list[str]) -> list[tuple[str, list[str]]]:
    """``["nap=true,false", "learning-rate=3e-4,1e-3"]`` -> ``[("nap", ["true", "false"]), ...]``."""
    grid = []
    for spec in specs:
        key, sep, values = spec.partition("=")
        key = key.strip().lstrip("-").replace("_", "-")
        if not sep or not key or not values:
            raise SweepError(f"--grid {spec!r}: expected KEY=V1,V2,... (e.g. nap=true,false)")
        grid.append((key, [v.strip() for v in values.split(",") if v.strip()]))
    return grid


def expand_grid(
    agents: list[str],
    envs: list[str],
    seeds: list[int],
    grid: list[tuple[str, list[str]]],
    flags: list[str],
    imports: Sequence[str] = (),
) -> list[GridPoint]:
    """Every combination, in the order agent, env, grid values, seed."""
    keys = [k for k, _ in grid]
    points = []
    for agent in agents:
        agent_file = str(resolve_agent(agent))
        name = Path(agent).stem
        for env in envs:
            for combo in itertools.product(*[values for _, values in grid]):
                for seed in seeds:
                    points.append(
                        GridPoint(name, agent_file, env, seed, tuple(zip(keys, combo)), tuple(flags), tuple(imports))
                    )
    names = [p.folder_name() for p in points]
    if len(set(names)) != len(names):
        raise SweepError("two grid points map to the same run folder: repeated agents, envs, seeds or grid values?")
    return points


def recipe_points(
    recipe: Recipe, arms: list[str] | None = None, seeds: list[int] | None = None, envs: list[str] | None = None
) -> list[GridPoint]:
    """Every (arm, env, seed) of a recipe, in arm, env, seed order; ``arms``, ``seeds`` and ``envs``
    restrict to those (so that a first seed of every arm on one env can finish before the rest)."""
    chosen = [recipe.arm(name) for name in arms] if arms else list(recipe.arms)
    points = [
        GridPoint(Path(arm.agent).stem, str(resolve_agent(arm.agent)), env, seed, flags=arm.flags, arm=arm.name)
        for arm in chosen
        for env in arm.envs
        for seed in arm.seeds
        if (not seeds or seed in seeds) and (not envs or env in envs)
    ]
    if not points:
        raise RecipeError(f"{recipe.path}: no point of the recipe has the seeds {seeds or 'any'} and the envs {envs or 'any'}")
    names = [p.folder_name() for p in points]
    if len(set(names)) != len(names):
        raise SweepError(f"{recipe.path}: two points map to the same run folder (an env or seed listed twice?)")
    return points


def point_status(run_dir: Path) -> str:
    """``done``, ``resume`` (has a checkpoint) or ``fresh`` (nothing to keep)."""
    if (run_dir / DONE_NAME).exists():
        return "done"
    if (run_dir / CHECKPOINT_NAME).exists() and (run_dir / "args.json").exists():
        return "resume"
    return "fresh"


# Runs an agent script after importing modules that register environments: argv is MODULES AGENT FLAGS...
IMPORT_SHIM = (
    "import importlib, runpy, sys; [importlib.import_module(m) for m in sys.argv[1].split(',') if m]; "
    "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def command_for(point: GridPoint, run_dir: Path, status: str, python: str = sys.executable) -> list[str]:
    start = [python, point.agent_file]
    if point.imports:
        start = [python, "-c", IMPORT_SHIM, ",".join(point.imports), point.agent_file]
    if status == "resume":
        return [*start, "--resume", str(run_dir), "--no-progress-bar", *point.value_flags(), *point.flags]
    return [
        *start,
        "--env",
        point.env,
        "--seed",
        str(point.seed),
        "--run-dir",
        str(run_dir),
        "--no-progress-bar",
        *point.value_flags(),
        *point.flags,
    ]


def _prepare(point: GridPoint, run_dir: Path) -> tuple[str, list[str]]:
    status = point_status(run_dir)
    if status == "fresh" and run_dir.exists():
        # Killed before its first checkpoint: its partial CSV would be appended to, so start clean.
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    return status, command_for(point, run_dir, status)


def _finish(point: GridPoint, run_dir: Path, status: str, cmd: list[str], returncode: int, seconds: float) -> dict:
    record = {
        "point": asdict(point),
        "label": point.label,
        "run_dir": str(run_dir),
        "started_as": status,
        "command": shlex.join(cmd),
        "returncode": returncode,
        "seconds": round(seconds, 1),
    }
    if returncode == 0:
        tmp = run_dir / (DONE_NAME + ".tmp")
        tmp.write_text(json.dumps(record, indent=2))
        os.replace(tmp, run_dir / DONE_NAME)
    return record


def _child_env(workdir: str | None = None) -> dict[str, str]:
    # One thread per run: the pool runs one process per core. The sweep's working directory stays
    # importable (runs start in the repository), for --import modules that live there.
    path = os.pathsep.join(p for p in (workdir or os.getcwd(), os.environ.get("PYTHONPATH", "")) if p)
    return {
        **os.environ,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "PYTHONWARNINGS": "ignore",
        "PYTHONPATH": path,
    }


def run_point(point: GridPoint, run_dir: str | Path, workdir: str | None = None) -> dict:
    """Run (or resume) one grid point to the end on this process's node; the body of a Ray task.

    ``workdir``: the sweep's working directory, put on the run's import path (--import modules).
    """
    run_dir = Path(run_dir)
    status, cmd = _prepare(point, run_dir)
    start = time.time()
    with open(run_dir / LOG_NAME, "a") as log:
        log.write(f"$ {shlex.join(cmd)}\n")
        log.flush()
        returncode = subprocess.run(
            cmd, cwd=REPO_ROOT, env=_child_env(workdir), stdout=log, stderr=subprocess.STDOUT
        ).returncode
    return _finish(point, run_dir, status, cmd, returncode, time.time() - start)


def run_local(points: list[tuple[GridPoint, Path]], workers: int, echo=print) -> list[dict]:
    """Run the points as child processes, at most ``workers`` at once."""
    pending = list(points)
    running: dict[subprocess.Popen, tuple] = {}
    records = []

    def stop(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        while pending or running:
            while pending and len(running) < workers:
                point, run_dir = pending.pop(0)
                status, cmd = _prepare(point, run_dir)
                log = open(run_dir / LOG_NAME, "a")  # noqa: SIM115 - closed when the child exits
                log.write(f"$ {shlex.join(cmd)}\n")
                log.flush()
                proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=_child_env(), stdout=log, stderr=subprocess.STDOUT)
                running[proc] = (point, run_dir, status, cmd, log, time.time())
                echo(f"[{'resume' if status == 'resume' else 'start'}] {run_dir.name}")
            for proc in [p for p in running if p.poll() is not None]:
                point, run_dir, status, cmd, log, start = running.pop(proc)
                log.close()
                records.append(_finish(point, run_dir, status, cmd, proc.returncode, time.time() - start))
                echo(
                    f"[{'done' if proc.returncode == 0 else f'FAILED ({proc.returncode})'}] {run_dir.name} "
                    f"({time.time() - start:.0f}s)"
                )
            time.sleep(0.1)
    except KeyboardInterrupt:
        echo(f"stopping {len(running)} run(s); invoke the same command again to continue")
        for proc in running:
            proc.terminate()
        for proc in running:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    return records


def run_ray(points: list[tuple[GridPoint, Path]], address: str | None, cpus_per_run: float, echo=print) -> list[dict]:
    """Run the points as Ray tasks on the cluster at ``address`` (or the Ray instance already initialized)."""
    import ray

    connected_here = not ray.is_initialized()
    if connected_here:
        ray.init(address=address, log_to_driver=False)
    try:
        return _run_ray_tasks(ray, points, cpus_per_run, echo)
    finally:
        if connected_here:
            ray.shutdown()  # disconnects this driver; a cluster started elsewhere keeps running


def _run_ray_tasks(ray, points: list[tuple[GridPoint, Path]], cpus_per_run: float, echo) -> list[dict]:
    task = ray.remote(num_cpus=cpus_per_run, max_retries=0)(run_point)
    futures = {task.remote(point, str(run_dir), os.getcwd()): run_dir for point, run_dir in points}
    for run_dir in futures.values():
        echo(f"[submitted] {run_dir.name}")
    records = []
    remaining = list(futures)
    while remaining:
        ready, remaining = ray.wait(remaining, num_returns=1)
        record = ray.get(ready[0])
        records.append(record)
        echo(f"[{'done' if record['returncode'] == 0 else 'FAILED'}] {Path(record['run_dir']).name}")
    return records


def _log_tail(run_dir: Path, lines: int = 15) -> str:
    try:
        return "\n".join((run_dir / LOG_NAME).read_text().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@dataclass
class SweepArgs:
    """Run a grid of agent x env x flag values x seed, or a recipe, resumably (see the module docstring)."""

    recipe: str = ""
    """run a recipe file (benchmarks/recipes/*.toml) instead of --agents/--envs/--grid; its runs go to
    runs/recipes/<recipe> unless --sweep-dir is given"""
    arms: list[str] = field(default_factory=list)
    """with --recipe: run only these arms"""
    agents: Annotated[list[str], tyro.conf.arg(metavar="AGENT ...")] = field(default_factory=list)
    """agent names in agents/ (ppo_nap ...) or .py paths"""
    envs: Annotated[list[str], tyro.conf.arg(metavar="ENV ...")] = field(default_factory=list)
    """env short names or registered ids; with --recipe: run only these of its envs"""
    seeds: list[int] = field(default_factory=list)
    """seeds of every grid point (default: 1 2 3); with --recipe: run only these of its seeds"""
    grid: Annotated[list[str], tyro.conf.UseAppendAction, tyro.conf.arg(metavar="KEY=V1,V2")] = field(default_factory=list)
    """agent flag values to sweep; true/false become --KEY/--no-KEY"""
    flags: str = ""
    """flags passed to every run, one string: "--total-timesteps 100000" (a single flag: --flags="--no-nap")"""
    imports: Annotated[list[str], tyro.conf.arg(name="import", metavar="MODULE"), tyro.conf.UseAppendAction] = field(
        default_factory=list
    )
    """import this module before each agent runs (it registers your env)"""
    sweep_dir: str = ""
    """one run folder per grid point goes here (default: runs/sweep)"""
    launcher: Literal["local", "ray"] = "local"
    """local: child processes of this sweep; ray: tasks on a Ray cluster"""
    workers: int = 0
    """local: runs at once (default: the recipe's, else one per core)"""
    ray_address: str | None = None
    """ray: the cluster's address (auto, ray://host:10001, ...)"""
    cpus_per_run: float = 1.0
    """ray: CPUs each run reserves"""
    dry_run: bool = False
    """print each point's status and command, run nothing"""


def parse_args(argv: list[str] | None = None) -> SweepArgs:
    argv = list(sys.argv[1:] if argv is None else argv)
    # ``--flags "--total-timesteps 100000"``: the value starts with "--", which tyro would read as the
    # next option; attached as ``--flags=...`` it is read as the value it is.
    i = 0
    while i < len(argv) - 1:  # every occurrence: the last one wins, as for any option
        if argv[i] == "--flags":
            argv[i : i + 2] = [f"--flags={argv[i + 1]}"]
        i += 1
    return tyro.cli(SweepArgs, args=argv, prog="python -m cleanrl_style.experiments.sweep", description=__doc__)


def usage_error(message: str) -> NoReturn:
    """Stop with a command-line error (exit status 2, as for a flag tyro refuses)."""
    print(f"python -m cleanrl_style.experiments.sweep: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workers = args.workers
    if args.recipe:
        if args.agents or args.grid or args.flags:
            usage_error("--recipe takes its agents and flags from the file; drop --agents/--grid/--flags")
        try:
            recipe = load_recipe(args.recipe)
            points = recipe_points(recipe, args.arms, args.seeds, args.envs)
        except (RecipeError, SweepError, KeyError) as e:
            usage_error(str(e).strip("'\""))
        sweep_dir = Path(args.sweep_dir or RECIPE_RUNS / recipe.name).resolve()
        workers = workers or recipe.workers
    else:
        if not args.agents or not args.envs:
            usage_error("give --agents and --envs (or --recipe FILE)")
        if args.arms:
            usage_error("--arms selects arms of a --recipe")
        try:
            grid = parse_grid(args.grid)
            flags = shlex.split(args.flags)
            points = expand_grid(args.agents, args.envs, args.seeds or [1, 2, 3], grid, flags, args.imports)
        except (SweepError, ValueError) as e:  # ValueError: shlex's unclosed quote in --flags
            usage_error(f"--flags: {e}" if not isinstance(e, SweepError) else str(e))
        sweep_dir = Path(args.sweep_dir or "runs/sweep").resolve()
    placed = [(p, sweep_dir / p.folder_name()) for p in points]
    todo = [(p, d) for p, d in placed if point_status(d) != "done"]
    print(f"{len(points)} grid points in {sweep_dir}: {len(points) - len(todo)} finished, {len(todo)} to run")
    if args.dry_run:
        for p, d in placed:
            status = point_status(d)
            print(f"{status:7s} {shlex.join(command_for(p, d, status)) if status != 'done' else d.name}")
        return 0
    if not todo:
        return 0
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / "sweep_args.json").write_text(json.dumps(asdict(args), indent=2))
    start = time.time()
    if args.launcher == "ray":
        records = run_ray(todo, args.ray_address, args.cpus_per_run)
    else:
        try:
            records = run_local(todo, workers or default_workers())
        except KeyboardInterrupt:
            return 130
    failed = [r for r in records if r["returncode"] != 0]
    print(f"{len(records) - len(failed)} run(s) finished, {len(failed)} failed, in {time.time() - start:.0f}s")
    for r in failed:
        print(f"\nFAILED {r['run_dir']} (exit {r['returncode']}): {r['command']}\n{_log_tail(Path(r['run_dir']))}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
