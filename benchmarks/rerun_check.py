"""Rerun the first steps of a committed run with today's code, and compare the two logs.

    python benchmarks/rerun_check.py results/cpu_hopper_100k/Hopper__sac_nap__s4 --steps 20000 --compile off
    python benchmarks/rerun_check.py results/cpu_hopper_100k/Hopper__sac_nap__s4 --steps 20000 --compile on

The rerun takes the committed run's agent, environment, seed and flags from its ``sweep.json``
(the whole ``--total-timesteps``, so learning-rate schedules match), adds ``--compile``, and is
stopped once its ``progress.csv`` passes ``--steps``. Every episode that ended by then is compared
with the committed log: how many returns are equal to the bit, the first step where they differ,
and the largest difference. Runs reproduce bit for bit only on one CPU model (the committed run's
``provenance.json`` names it); elsewhere, and between compiled and eager code, float rounding
differs and the runs drift apart, so the useful figures are where and how fast they separate.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tyro

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cleanrl_style.runs.logger import read_progress  # noqa: E402


@dataclass
class Args:
    run: tyro.conf.Positional[str]
    """a committed run folder (results/<recipe>/<env>__<arm>__s<seed>) with sweep.json and progress.csv"""
    steps: int = 20_000
    """environment steps to rerun and compare"""
    compile: str = "off"
    """the rerun's --compile (off, on, auto)"""
    metric: str = "charts/episodic_return"
    """the logged metric to compare, one row per episode"""


def rerun(run: Path, args: Args, out: Path) -> None:
    point = json.loads((run / "sweep.json").read_text())["point"]
    command = [sys.executable, str(REPO / "agents" / f"{point['agent']}.py"), "--env", point["env"]]
    command += ["--seed", str(point["seed"]), "--run-dir", str(out), "--no-progress-bar", *point["flags"]]
    command += [*point["values"], "--compile", args.compile]
    print(" ".join(command))
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    progress = out / "progress.csv"
    while process.poll() is None:
        time.sleep(2)
        if progress.exists():
            lines = progress.read_text().splitlines()
            last = lines[-1].split(",")[0] if len(lines) > 1 else "0"
            if last.isdigit() and int(last) > args.steps:
                process.terminate()
                break
    process.wait()
    if not progress.exists():
        raise SystemExit(
            f"the rerun wrote no progress.csv; its error output:\n{process.stderr.read() if process.stderr else ''}"
        )


def compare(committed: Path, rerun_dir: Path, args: Args) -> None:
    ours = [(s, v) for s, _, v in read_progress(rerun_dir).get(args.metric, []) if s <= args.steps]
    theirs = [(s, v) for s, _, v in read_progress(committed).get(args.metric, []) if s <= args.steps]
    n = min(len(ours), len(theirs))
    if n == 0:
        raise SystemExit(f"no {args.metric} rows up to step {args.steps} in one of the logs")
    equal = 0
    while equal < n and ours[equal] == theirs[equal]:
        equal += 1
    print(f"{args.metric}, episodes ending by step {args.steps}: committed {len(theirs)}, rerun {len(ours)}")
    print(f"  identical (same step, same value to the bit): the first {equal} of {n}")
    if equal < n:
        step_c, step_r = theirs[equal][0], ours[equal][0]
        print(f"  first difference: episode {equal + 1}, ending at step {step_c} (committed) / {step_r} (rerun)")
    diffs = [abs(a[1] - b[1]) for a, b in zip(ours, theirs)]
    print(f"  largest difference over the paired episodes: {max(diffs):.6g}")
    tail = max(1, n // 5)
    print(
        f"  mean of the last {tail} paired episodes: committed {statistics.fmean(v for _, v in theirs[n - tail : n]):.1f}, "
        f"rerun {statistics.fmean(v for _, v in ours[n - tail : n]):.1f}"
    )


def main(args: Args) -> None:
    run = Path(args.run)
    for name in ("sweep.json", "progress.csv"):
        if not (run / name).exists():
            raise SystemExit(f"{run / name} is missing: --run takes a committed run folder of a recipe")
    provenance = json.loads((run / "provenance.json").read_text()) if (run / "provenance.json").exists() else [{}]
    first = provenance[0] if isinstance(provenance, list) else provenance
    print(f"committed run: commit {first.get('commit', '?')}, CPU {first.get('cpu', '?')} {first.get('cpu_identity', '')}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rerun"
        rerun(run, args, out)
        compare(run, out, args)


if __name__ == "__main__":
    main(tyro.cli(Args))
