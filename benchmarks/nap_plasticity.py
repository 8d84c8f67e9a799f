"""Synthetic plasticity benchmark: does an MLP keep fitting targets that are re-drawn every K steps?

    python benchmarks/nap_plasticity.py                                  # -> results/nap_plasticity/
    python benchmarks/nap_plasticity.py --tasks labels --rounds 4 --steps-per-round 50 --seeds 1 2 --out /tmp/p

The non-stationary supervised problem of the NaP paper's synthetic benchmarks (Lyle et al., 2024,
arXiv:2407.01800, after Lyle et al., 2023), at CPU scale. One fixed set of ``num_inputs`` inputs,
drawn once per seed from a standard normal in ``input_dim`` dimensions, is fit for ``rounds``
rounds of ``steps_per_round`` Adam steps (minibatches of ``batch_size`` drawn uniformly from the
set). At the start of every round the targets are re-drawn and the network keeps training from
where it stopped:

- ``labels``: random labels, each input one of ``classes`` classes uniformly at random, fit with
  cross-entropy (loss of a constant guess: ``ln(classes)``);
- ``teacher``: the outputs of a fresh random teacher network (``input_dim -> teacher_width ->
  outputs``, tanh, Gaussian weights), standardized per output over the set, fit with squared error
  (loss of a constant guess: 1).

The loss over the whole set (and the accuracy, for labels) at the end of each round measures how
well the network still learns a new target in a fixed budget of steps. A network that loses
plasticity fits each new round's targets less well: its end-of-round loss rises over rounds.

Arms, all the same Adam at a constant learning rate, built by ``cleanrl_style.blocks.layers.mlp`` with
ReLU hidden layers (the same initial linear weights in every arm for a given seed):

- ``plain``: ``Linear -> ReLU`` hidden layers;
- ``layernorm``: ``Linear -> LayerNorm -> ReLU``;
- ``nap``: the LayerNorm network, with ``cleanrl_style.blocks.nap.NormProjector`` at the agents' defaults
  (each hidden weight matrix and each LayerNorm's (gamma, beta) rescaled to its initial norm after
  every optimizer step; biases and the output layer free), as ``agents/sac_nap.py`` uses it;
- ``nap_output`` (not run by default): NaP with the output layer projected too (the agents'
  ``--nap-project-output``).

For one seed every arm sees the same inputs, the same target sequence and the same minibatches.
Writes to ``--out``:

- ``rounds.csv``: one row per task, arm, seed and round: end-of-round loss and accuracy, the mean
  Frobenius norm of the hidden weight matrices, that of the output layer, and the fraction of dead
  hidden units (zero after the ReLU for every input);
- ``summary.csv``: per task and arm, the mean end-of-round loss over the first and over the last
  ``window`` rounds, and their difference (last - first), each per seed then averaged over seeds,
  with a 95% percentile-bootstrap interval over seeds (rliable, via ``cleanrl_style.experiments.plot``);
- ``comparisons.csv``: per task, each arm minus each arm before it in (plain, layernorm, nap):
  the per-seed difference of their mean loss over the last ``window`` rounds (paired: one seed is
  the same inputs, targets and minibatches in both), its mean and the same interval;
- ``args.json``, ``provenance.json`` (``cleanrl_style.runs.provenance.describe``: date, commit, CPU
  model, cores, load, package versions) and ``plots/plasticity.png``.

``--replot`` rewrites ``summary.csv`` and the figure from an existing ``rounds.csv``. No interval
is given under 5 seeds (``cleanrl_style.experiments.plot.MIN_SEEDS_FOR_CI``).
"""

from __future__ import annotations

import csv
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import tyro
from torch import nn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cleanrl_style.blocks.layers import mlp  # noqa: E402
from cleanrl_style.blocks.nap import NormProjector  # noqa: E402
from cleanrl_style.experiments.plot import MIN_SEEDS_FOR_CI, bootstrap_ci, interval_method  # noqa: E402
from cleanrl_style.runs.provenance import describe  # noqa: E402

ARMS = ("plain", "layernorm", "nap", "nap_output")
DEFAULT_ARMS = ARMS[:3]
TASKS = ("labels", "teacher")
ROUND_FIELDS = (
    "task",
    "arm",
    "seed",
    "round",
    "loss",
    "accuracy",
    "weight_norm",
    "output_norm",
    "dead_fraction",
    "seconds",
)
SUMMARY_FIELDS = (
    "task",
    "arm",
    "n_seeds",
    "window",
    "first_loss",
    "first_low",
    "first_high",
    "last_loss",
    "last_low",
    "last_high",
    "change",
    "change_low",
    "change_high",
    "interval",
)
COMPARISON_FIELDS = ("task", "arm", "baseline", "n_seeds", "window", "difference", "low", "high", "interval")


@dataclass
class Args:
    tasks: tuple[Literal["labels", "teacher"], ...] = ("labels", "teacher")
    """which target families to run (each a separate experiment)"""
    arms: tuple[Literal["plain", "layernorm", "nap", "nap_output"], ...] = DEFAULT_ARMS
    seeds: tuple[int, ...] = (1, 2, 3, 4, 5)
    rounds: int = 30
    """how many times the targets are drawn"""
    steps_per_round: int = 300
    """K: optimizer steps between two draws of the targets"""
    num_inputs: int = 2048
    """size of the fixed input set"""
    input_dim: int = 32
    hidden: tuple[int, ...] = (128, 128, 128)
    """hidden widths of the fitted MLP"""
    classes: int = 10
    """labels: number of classes"""
    outputs: int = 1
    """teacher: number of regression outputs"""
    teacher_width: int = 64
    """teacher: hidden width of the random teacher network"""
    batch_size: int = 128
    lr: float = 1e-3
    """Adam's learning rate, constant"""
    window: int = 5
    """rounds averaged at the start and at the end for summary.csv"""
    n_boot: int = 10_000
    """bootstrap resamples for the intervals"""
    threads: int = 1
    """torch threads"""
    out: Path = field(default=REPO / "results" / "nap_plasticity")
    plot: bool = True
    replot: bool = False
    """train nothing: rewrite summary.csv and the figure from ``--out``'s rounds.csv and args.json"""


def make_inputs(args: Args, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(args.num_inputs, args.input_dim, generator=gen)


def make_targets(args: Args, task: str, inputs: torch.Tensor, seed: int, round_: int) -> torch.Tensor:
    """The targets of one round: a function of (seed, round) only, so every arm sees the same sequence."""
    gen = torch.Generator().manual_seed(1_000_003 * seed + round_)
    if task == "labels":
        return torch.randint(args.classes, (args.num_inputs,), generator=gen)
    w1 = torch.randn(args.input_dim, args.teacher_width, generator=gen) / math.sqrt(args.input_dim)
    b1 = torch.randn(args.teacher_width, generator=gen)
    w2 = torch.randn(args.teacher_width, args.outputs, generator=gen) / math.sqrt(args.teacher_width)
    y = torch.tanh(inputs @ w1 + b1) @ w2
    return (y - y.mean(0)) / y.std(0).clamp_min(1e-8)


def make_model(args: Args, task: str, arm: str, seed: int) -> tuple[nn.Sequential, NormProjector | None]:
    torch.manual_seed(seed)  # LayerNorm adds no random parameters: every arm starts from the same linear weights
    out_dim = args.classes if task == "labels" else args.outputs
    model = mlp(args.input_dim, args.hidden, out_dim, activation=nn.ReLU, layer_norm=arm != "plain")
    projector = None
    if arm in ("nap", "nap_output"):
        projector = NormProjector(model, [model[-1]], project_output=arm == "nap_output")
    return model, projector


def loss_fn(task: str, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    if task == "labels":
        return nn.functional.cross_entropy(pred, target)
    return nn.functional.mse_loss(pred, target)


@torch.no_grad()
def measure(task: str, model: nn.Sequential, inputs: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    """Loss and accuracy over the whole set, weight norms (hidden mean, output layer), fraction of dead hidden units."""
    h = inputs
    dead, units, norms = 0, 0, []
    for layer in model:
        h = layer(h)
        if isinstance(layer, nn.ReLU):
            alive = (h > 0).any(0)
            dead += int((~alive).sum())
            units += alive.numel()
    for layer in list(model)[:-1]:
        if isinstance(layer, nn.Linear):
            norms.append(float(layer.weight.norm()))
    loss = float(loss_fn(task, h, targets))
    accuracy = float((h.argmax(1) == targets).float().mean()) if task == "labels" else float("nan")
    return {
        "loss": loss,
        "accuracy": accuracy,
        "weight_norm": float(np.mean(norms)),
        "output_norm": float(model[-1].weight.norm()),
        "dead_fraction": dead / units,
    }


def run_one(args: Args, task: str, arm: str, seed: int) -> list[dict]:
    inputs = make_inputs(args, seed)
    model, projector = make_model(args, task, arm, seed)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    batches = torch.Generator().manual_seed(seed)
    rows = []
    for round_ in range(args.rounds):
        targets = make_targets(args, task, inputs, seed, round_)
        start = time.perf_counter()
        for _ in range(args.steps_per_round):
            idx = torch.randint(args.num_inputs, (args.batch_size,), generator=batches)
            loss = loss_fn(task, model(inputs[idx]), targets[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if projector is not None:
                projector.project()
        row = {"task": task, "arm": arm, "seed": seed, "round": round_ + 1}
        row.update(measure(task, model, inputs, targets))
        row["seconds"] = time.perf_counter() - start
        rows.append(row)
    return rows


def interval_text(n: int, n_boot: int, over: str) -> str:
    if n < MIN_SEEDS_FOR_CI:
        return f"none (n={n} < {MIN_SEEDS_FOR_CI})"
    return f"{interval_method(n)} over {over}, {n_boot} resamples, n={n}"


def summarize(rows: list[dict], window: int, n_boot: int) -> list[dict]:
    out = []
    for task in dict.fromkeys(r["task"] for r in rows):
        for arm in dict.fromkeys(r["arm"] for r in rows if r["task"] == task):
            mine = [r for r in rows if r["task"] == task and r["arm"] == arm]
            seeds = sorted({r["seed"] for r in mine})
            rounds = max(r["round"] for r in mine)
            w = min(window, rounds)
            first, last = [], []
            for seed in seeds:
                loss = {r["round"]: r["loss"] for r in mine if r["seed"] == seed}
                first.append(np.mean([loss[i] for i in range(1, w + 1)]))
                last.append(np.mean([loss[i] for i in range(rounds - w + 1, rounds + 1)]))
            first_a, last_a = np.array(first), np.array(last)
            row: dict = {"task": task, "arm": arm, "n_seeds": len(seeds), "window": w}
            for name, values in (("first", first_a), ("last", last_a), ("change", last_a - first_a)):
                low, high = (math.nan, math.nan)
                if len(values) >= MIN_SEEDS_FOR_CI:
                    low, high = bootstrap_ci(values, "mean", 0.95, n_boot)
                key = "change" if name == "change" else f"{name}_loss"
                row[key], row[f"{name}_low"], row[f"{name}_high"] = float(values.mean()), low, high
            row["interval"] = interval_text(len(seeds), n_boot, "seeds")
            out.append(row)
    return out


def last_window_loss(rows: list[dict], window: int) -> dict[tuple[str, str], dict[int, float]]:
    """{(task, arm): {seed: mean end-of-round loss over the last ``window`` rounds}}."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    for key in dict.fromkeys((r["task"], r["arm"]) for r in rows):
        mine = [r for r in rows if (r["task"], r["arm"]) == key]
        rounds = max(r["round"] for r in mine)
        w = min(window, rounds)
        out[key] = {
            seed: float(np.mean([r["loss"] for r in mine if r["seed"] == seed and r["round"] > rounds - w]))
            for seed in sorted({r["seed"] for r in mine})
        }
    return out


def compare(rows: list[dict], window: int, n_boot: int) -> list[dict]:
    """Each arm against each other arm on the last ``window`` rounds: the per-seed difference of their
    losses (same seed, same inputs and targets), averaged over the seeds both ran, with its interval."""
    last = last_window_loss(rows, window)
    out = []
    for (task, arm), mine in last.items():
        for (task_b, baseline), theirs in last.items():
            if task_b != task or baseline == arm or ARMS.index(baseline) > ARMS.index(arm):
                continue
            seeds = sorted(set(mine) & set(theirs))
            diff = np.array([mine[s] - theirs[s] for s in seeds])
            low, high = (math.nan, math.nan)
            if len(diff) >= MIN_SEEDS_FOR_CI:
                low, high = bootstrap_ci(diff, "mean", 0.95, n_boot)
            out.append(
                {
                    "task": task,
                    "arm": arm,
                    "baseline": baseline,
                    "n_seeds": len(seeds),
                    "window": window,
                    "difference": float(diff.mean()),
                    "low": low,
                    "high": high,
                    "interval": interval_text(len(seeds), n_boot, "paired seeds"),
                }
            )
    return out


def write_csv(path: Path, rows: list[dict], fields: tuple[str, ...]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})


def read_rounds(path: Path) -> list[dict]:
    with path.open() as f:
        return [
            {k: (v if k in ("task", "arm") else int(v) if k in ("seed", "round") else float(v)) for k, v in row.items()}
            for row in csv.DictReader(f)
        ]


COLORS = {"plain": "tab:red", "layernorm": "tab:blue", "nap": "tab:green", "nap_output": "tab:purple"}
LABELS = {
    "plain": "plain MLP",
    "layernorm": "MLP + LayerNorm",
    "nap": "NaP (LayerNorm + projection)",
    "nap_output": "NaP, output layer projected too",
}


PANELS = (
    ("loss", "end-of-round loss on the whole set"),
    ("weight_norm", "mean hidden weight norm ||W||_F"),
    ("dead_fraction", "fraction of dead hidden units"),
)


def plot(rows: list[dict], args_dict: dict, path: Path, n_boot: int = 2000) -> None:
    """One column per task; rows: end-of-round loss (the measure), hidden weight norm, dead units."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(r["task"] for r in rows))
    width = max(6.2 * len(tasks), 9.0)  # one task: wide enough for the title
    fig, axes = plt.subplots(
        len(PANELS), len(tasks), figsize=(width, 10.5), squeeze=False, sharex=True, height_ratios=(2, 1, 1)
    )
    n_all = set()
    for col, task in enumerate(tasks):
        for arm in dict.fromkeys(r["arm"] for r in rows if r["task"] == task):
            mine = [r for r in rows if r["task"] == task and r["arm"] == arm]
            seeds = sorted({r["seed"] for r in mine})
            rounds = sorted({r["round"] for r in mine})
            n_all.add(len(seeds))
            for row, (key, _) in enumerate(PANELS):
                by_key = {(r["seed"], r["round"]): r[key] for r in mine}
                values = np.array([[by_key[s, i] for i in rounds] for s in seeds])
                ax = axes[row, col]
                label = f"{LABELS[arm]} (n={len(seeds)} seeds)"
                ax.plot(rounds, values.mean(0), color=COLORS[arm], label=label, linewidth=1.6 if row == 0 else 1.2)
                if len(seeds) >= MIN_SEEDS_FOR_CI:
                    band = np.array([bootstrap_ci(values[:, j], "mean", 0.95, n_boot) for j in range(len(rounds))])
                    ax.fill_between(rounds, band[:, 0], band[:, 1], color=COLORS[arm], alpha=0.2, linewidth=0)
        if task == "labels":
            chance = math.log(args_dict["classes"])
            title = f"random labels ({args_dict['classes']} classes, re-drawn each round), cross-entropy"
        else:
            chance = 1.0
            title = "random-teacher targets (new teacher each round), squared error"
        top = axes[0, col]
        highest = max(r["loss"] for r in rows if r["task"] == task)
        if chance < 1.5 * highest:  # the constant guess's loss, where it is near the curves
            top.axhline(chance, color="gray", linestyle=":", linewidth=1)
            top.text(1, chance, " loss of a constant guess", color="gray", va="bottom", fontsize=8)
        else:
            title += f"\n(a constant guess scores {chance:g}, above the panel)"
        top.set_title(title, fontsize=10)
        top.legend(fontsize=8, loc="best")
        for row, (_, ylabel) in enumerate(PANELS):
            ax = axes[row, col]
            ax.set_ylabel(ylabel, fontsize=9)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
        axes[-1, col].set_xlabel(f"round (targets re-drawn every {args_dict['steps_per_round']} Adam steps)")
    hidden = "x".join(str(h) for h in args_dict["hidden"])
    n_text = "/".join(str(n) for n in sorted(n_all))
    band = (
        f"band: 95% percentile bootstrap CI of the mean over n={n_text} seeds (rliable, {n_boot} resamples)"
        if min(n_all) >= MIN_SEEDS_FOR_CI
        else f"no band (n={n_text} < {MIN_SEEDS_FOR_CI} seeds)"
    )
    fig.suptitle(
        f"ReLU MLP {args_dict['input_dim']}-{hidden}, {args_dict['num_inputs']} fixed Gaussian inputs, "
        f"Adam lr {args_dict['lr']:g} constant, batch {args_dict['batch_size']}.\nLines: mean over seeds; {band}",
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(rows: list[dict], args_dict: dict, out: Path, window: int, n_boot: int, draw: bool) -> None:
    """summary.csv (printed too) and, with ``draw``, plots/plasticity.png from the rows of rounds.csv."""
    summary = summarize(rows, window, n_boot)
    write_csv(out / "summary.csv", summary, SUMMARY_FIELDS)
    comparisons = compare(rows, window, n_boot)
    write_csv(out / "comparisons.csv", comparisons, COMPARISON_FIELDS)
    for row in summary:
        print(
            f"{row['task']:8s} {row['arm']:10s}"
            f"  first {row['first_loss']:.3f} [{row['first_low']:.3f}, {row['first_high']:.3f}]"
            f"  last {row['last_loss']:.3f} [{row['last_low']:.3f}, {row['last_high']:.3f}]"
            f"  change {row['change']:+.3f} [{row['change_low']:+.3f}, {row['change_high']:+.3f}]"
        )
    for row in comparisons:
        print(
            f"{row['task']:8s} {row['arm']:10s} - {row['baseline']:10s} last {row['window']} rounds:"
            f" {row['difference']:+.3f} [{row['low']:+.3f}, {row['high']:+.3f}]"
        )
    if draw:
        plot(rows, args_dict, out / "plots" / "plasticity.png")


def main(args: Args) -> None:
    if args.replot:
        args_dict = json.loads((args.out / "args.json").read_text())
        report(read_rounds(args.out / "rounds.csv"), args_dict, args.out, args_dict["window"], args.n_boot, True)
        return
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    args_dict = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(args).items()}
    (args.out / "args.json").write_text(json.dumps(args_dict, indent=2) + "\n")
    provenance = describe(REPO)
    provenance["torch_threads"] = torch.get_num_threads()
    (args.out / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n")
    rows: list[dict] = []
    for task in args.tasks:
        for seed in args.seeds:
            for arm in args.arms:
                start = time.perf_counter()
                rows += run_one(args, task, arm, seed)
                last = rows[-1]
                print(
                    f"{task} {arm} seed {seed}: round {last['round']} loss {last['loss']:.4f} "
                    f"({time.perf_counter() - start:.1f} s)",
                    flush=True,
                )
                write_csv(args.out / "rounds.csv", rows, ROUND_FIELDS)
    report(read_rounds(args.out / "rounds.csv"), args_dict, args.out, args.window, args.n_boot, args.plot)


if __name__ == "__main__":
    main(tyro.cli(Args))
