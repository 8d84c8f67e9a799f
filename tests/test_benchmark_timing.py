"""benchmarks/timing.py: the matrix-product ceiling replays exactly the products an update runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from timing import alternating_rounds, record_matmuls, replay_matmuls, run_leanrl  # noqa: E402


def test_the_replayed_products_are_the_updates_own():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(14, 32), nn.ReLU(), nn.Linear(32, 1))
    stacked = torch.randn(2, 32, 32, requires_grad=True)  # an ensemble's batched layer (bmm)
    x = torch.randn(16, 14)

    def update() -> None:
        h = net[1](net[0](x))
        loss = net[2](h).sum() + torch.bmm(h.expand(2, -1, -1), stacked).pow(2).sum()
        loss.backward()

    with FlopCounterMode(display=False) as counted:
        update()
    calls = record_matmuls(update)
    # Forward: 2 addmm and 1 bmm. Backward: mm for both linears' weight gradients and the second's input
    # gradient (x needs none), 2 bmm for the batched product's two inputs.
    ops = [str(func) for func, _, _ in calls]
    assert (ops.count("aten.addmm.default"), ops.count("aten.mm.default"), ops.count("aten.bmm.default")) == (2, 3, 3)
    replay = replay_matmuls(calls, "cpu")
    with FlopCounterMode(display=False) as replayed:
        replay()
    assert replayed.get_total_flops() == counted.get_total_flops() > 0


def test_alternating_rounds_give_every_contender_a_time_per_call_in_each_round():
    calls = {"a": 0, "b": 0}

    def bump(name: str):
        return lambda: calls.__setitem__(name, calls[name] + 1)

    seconds = alternating_rounds({"a": bump("a"), "b": bump("b")}, rounds=3, seconds_per_round=0.0, min_calls=2)
    assert set(seconds) == {"a", "b"} and all(len(v) == 3 and min(v) > 0 for v in seconds.values())
    assert calls == {"a": 6, "b": 6}


def test_run_leanrl_passes_flags_and_threads_and_names_a_missing_or_failing_script(tmp_path):
    with pytest.raises(SystemExit, match="no leanrl/sac.py there"):
        run_leanrl(tmp_path, sys.executable, "sac.py", [], 1)
    (tmp_path / "leanrl").mkdir()
    script = tmp_path / "leanrl" / "sac.py"
    echo = "import os, sys\nargs = ' '.join(sys.argv[1:])\n"
    echo += "sys.stderr.write(args + ' ' + os.environ['OMP_NUM_THREADS'] + ' ' + os.environ['WANDB_MODE'])\n"
    script.write_text(echo)
    seconds, stderr = run_leanrl(tmp_path, sys.executable, "sac.py", ["--env-id", "Hopper-v4"], 3)
    assert stderr == "--env-id Hopper-v4 3 disabled" and seconds > 0
    script.write_text("import sys\nsys.stderr.write('boom')\nsys.exit(2)\n")
    with pytest.raises(SystemExit, match=r"(?s)sac.py failed \(exit 2\).*boom"):
        run_leanrl(tmp_path, sys.executable, "sac.py", [], 1)
