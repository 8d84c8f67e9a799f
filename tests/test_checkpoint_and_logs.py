import csv
import os
import random
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from cleanrl_style import load_checkpoint, save_checkpoint
from cleanrl_style.runs.checkpoint import CheckpointError, rng_states, set_rng_states
from cleanrl_style.runs.logger import RunLogger, read_progress

REPO = Path(__file__).resolve().parents[1]


def test_checkpoint_round_trip_restores_models_optimizer_and_rng(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    save_checkpoint(
        tmp_path / "checkpoint.pt",
        {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": rng_states(), "global_step": 7},
    )
    expected = (random.random(), np.random.rand(), torch.rand(1))

    loaded = load_checkpoint(tmp_path)  # a run folder works as well as the file
    clone = torch.nn.Linear(3, 2)
    clone.load_state_dict(loaded["model"])
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), clone.parameters()))
    assert loaded["optimizer"]["state"][0]["step"] == 1
    set_rng_states(loaded["rng"])
    assert (random.random(), np.random.rand(), torch.rand(1)) == expected
    assert loaded["global_step"] == 7


def test_a_failed_write_leaves_the_previous_checkpoint_intact(tmp_path):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"global_step": 1})

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        save_checkpoint(path, {"global_step": 2, "bad": Unpicklable()})
    assert load_checkpoint(path)["global_step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no temporary file left


def test_missing_checkpoint_error_says_what_to_pass(tmp_path):
    with pytest.raises(FileNotFoundError, match="pass that run folder"):
        load_checkpoint(tmp_path)


def test_logger_resume_drops_rows_after_the_checkpoint_step(tmp_path):
    logger = RunLogger(tmp_path, {"lr": 1e-3})
    for step in (100, 200, 300):
        logger.log(step, {"charts/SPS": step / 10, "losses/value_loss": 1.0})
    logger.close()
    # killed after step 300, last checkpoint at step 200: the resumed run writes 300 again
    logger = RunLogger(tmp_path, {"lr": 1e-3}, resume_step=200, elapsed=5.0)
    logger.log(300, {"charts/SPS": 99.0, "losses/value_loss": 2.0})
    logger.close()
    series = read_progress(tmp_path)
    assert [s for s, _, _ in series["charts/SPS"]] == [100, 200, 300]
    assert series["charts/SPS"][-1][2] == 99.0
    with open(tmp_path / "progress.csv") as f:
        assert next(csv.reader(f)) == ["step", "time", "metric", "value"]
    assert (tmp_path / "args.json").read_text().count("lr") == 1


class _RunsCodeWhenUnpickled:
    """What a hostile checkpoint holds: unpickling it calls a function the file names (here: touch a file)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {shlex.quote(self.marker)}",))


def _hostile_run(tmp_path):
    run_dir = tmp_path / "run"
    marker = tmp_path / "code-ran"
    save_checkpoint(run_dir / "checkpoint.pt", {"global_step": 1, "agent": _RunsCodeWhenUnpickled(marker)})
    return run_dir, marker


def test_a_checkpoint_that_would_run_code_is_refused_naming_the_flag_and_the_code_does_not_run(tmp_path):
    run_dir, marker = _hostile_run(tmp_path)
    with pytest.raises(CheckpointError, match=r"holds a Python object beyond tensors.*\(posix.system\).*--trust-checkpoint"):
        load_checkpoint(run_dir)  # its hash trailer is valid: the hash proves integrity, not origin
    assert not marker.exists()
    proc = subprocess.run(
        [sys.executable, "-m", "cleanrl_style.runs.evaluate", str(run_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--trust-checkpoint" in proc.stderr, proc.stderr
    assert not marker.exists()


def test_checkpoints_of_the_suite_load_without_trust(tmp_path):
    """What Run.save stores (RNG states with NumPy's array, argument dicts with tuples, optimizer state)."""
    from cleanrl_style.runs.checkpoint import rng_states

    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    state = {"rng": rng_states(), "args": {"hidden_sizes": (64, 64), "target_kl": None, "env": "Hopper"},
             "optimizer": optimizer.state_dict(), "elapsed": 1.5, "np_scalar": np.float64(2.0)}  # fmt: skip
    save_checkpoint(tmp_path / "checkpoint.pt", state)
    loaded = load_checkpoint(tmp_path)
    assert loaded["args"]["hidden_sizes"] == (64, 64) and loaded["np_scalar"] == 2.0
    assert np.array_equal(loaded["rng"]["numpy"][1], state["rng"]["numpy"][1])


@pytest.mark.parametrize(
    "what, make, flags, phrase",
    [
        ("a missing folder", lambda d: None, [], "no such run folder"),
        ("a folder with no checkpoint", lambda d: d.mkdir(), [], "No checkpoint at"),
        ("negative episodes", lambda d: d.mkdir(), ["--episodes", "-1"], "--episodes -1: must be at least 1"),
    ],
)
def test_evaluate_answers_bad_input_in_one_line(tmp_path, what, make, flags, phrase):
    run_dir = tmp_path / "run"
    make(run_dir)
    proc = subprocess.run(
        [sys.executable, "-m", "cleanrl_style.runs.evaluate", str(run_dir), *flags],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert phrase in proc.stderr


def test_trust_checkpoint_loads_what_weights_only_refuses(tmp_path):
    import argparse

    save_checkpoint(tmp_path / "checkpoint.pt", {"global_step": 3, "args": argparse.Namespace(env="Hopper")})
    with pytest.raises(CheckpointError, match=r"\(argparse.Namespace\).*--trust-checkpoint"):
        load_checkpoint(tmp_path)
    assert load_checkpoint(tmp_path, trust=True)["args"].env == "Hopper"
