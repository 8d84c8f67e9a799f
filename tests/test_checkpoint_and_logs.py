import csv
import random

import numpy as np
import pytest
import torch

from cleanrl_style import load_checkpoint, save_checkpoint
from cleanrl_style.checkpoint import rng_states, set_rng_states
from cleanrl_style.logger import RunLogger, read_progress


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
