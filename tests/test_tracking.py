"""--track with WANDB_MODE=offline: the run's W&B files hold the scalars of its progress.csv, no network used."""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess

import pytest
from agent_runs import REPO, agent_command

from cleanrl_style.runs.logger import read_progress

pytest.importorskip("wandb")

BLOCK = 32 * 1024  # the transaction log is a LevelDB-style log of 32 KiB blocks after a 7-byte header


def wandb_history(path) -> dict[int, dict[str, float]]:
    """``{step: {metric: value}}`` from an offline run's transaction log (``run-<id>.wandb``)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7]) if left >= 7 else (0, 0, 0)
        if left < 7 or (length, kind) == (0, 0):  # block trailer or padding
            pos += left
            continue
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk  # full / first / middle / last
        if kind in (1, 4):
            records.append(pending)
    history: dict[int, dict[str, float]] = {}
    for raw in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            step = row.pop("_step", record.history.step.num)
            history.setdefault(int(step), {}).update(row)
    return history


@pytest.mark.slow
def test_an_offline_tracked_run_writes_the_csvs_scalars_to_wandb(tmp_path):
    run_dir = tmp_path / "run"
    flags = ["--env", "InvertedPendulum", "--total-timesteps", "1024", "--num-envs", "4", "--num-steps", "128"]
    flags += ["--num-minibatches", "4", "--update-epochs", "1", "--compile", "off", "--eval-episodes", "2", "--track"]
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "WANDB_CONFIG_DIR": str(tmp_path / "wandb_config"),
        "WANDB_CACHE_DIR": str(tmp_path / "wandb_cache"),
        "PYTHONWARNINGS": "ignore",
    }
    env.pop("WANDB_API_KEY", None)
    proc = subprocess.run(agent_command("ppo_nap", run_dir, *flags), cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (log,) = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    history = wandb_history(log)
    csv_rows = [(step, metric, value) for metric, rows in read_progress(run_dir).items() for step, _, value in rows]
    assert len(csv_rows) > 40 and {"charts/episodic_return", "eval/return_mean"} <= {m for _, m, _ in csv_rows}
    assert sorted(history) == sorted({step for step, _, _ in csv_rows})
    for step, metric, value in csv_rows:
        logged = history[step][metric]
        assert (math.isnan(value) and math.isnan(logged)) or logged == pytest.approx(value, rel=1e-12), (step, metric)
    logged_metrics = {metric for row in history.values() for metric in row if not metric.startswith("_")}
    assert logged_metrics == {metric for _, metric, _ in csv_rows}  # nothing in W&B that the CSV lacks
