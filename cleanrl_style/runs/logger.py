"""Run logging: a CSV flushed as it goes, TensorBoard, and optionally Weights & Biases.

``progress.csv`` is in long form, one row per scalar: ``step,time,metric,value`` (``time`` is
training seconds since the run started, resumes included). Long form keeps the file valid when a
metric appears late, and makes resuming exact: rows after the checkpoint's step are dropped and
then written again by the resumed run, so none is duplicated or lost.

Stable metric names used by every agent:
``charts/episodic_return``, ``charts/episodic_length``, ``charts/SPS``, ``charts/learning_rate``,
``losses/<name>``, ``nap/norm/<layer>``, ``nap/eff_lr/<layer>``, ``eval/return_mean``.
"""

from __future__ import annotations

import csv
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cleanrl_style.runs.cli import UsageError

CSV_NAME = "progress.csv"
CSV_FIELDS = ("step", "time", "metric", "value")


def truncate_csv_after(path: Path, step: int) -> int:
    """Rewrite ``path`` (atomically) without rows whose step is greater than ``step``; return rows kept."""
    if not path.exists():
        return 0
    with open(path, newline="") as f:
        rows = [row for row in csv.DictReader(f) if int(row["step"]) <= step]
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return len(rows)


class RunLogger:
    """Writes scalars to ``<run_dir>/progress.csv`` and TensorBoard; hyperparameters to ``args.json``.

    Args:
        run_dir: the run's folder (created).
        config: hyperparameters, saved to ``args.json`` and shown as a table in TensorBoard.
        resume_step: when resuming, the checkpoint's global step; later rows are dropped.
        elapsed: training seconds already spent before this process (from the checkpoint).
        track: also log to Weights & Biases (``wandb`` must be installed and configured).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        config: Mapping[str, Any],
        resume_step: int | None = None,
        elapsed: float = 0.0,
        track: bool = False,
        wandb_project: str = "cleanrl-style",
    ):
        from torch.utils.tensorboard import SummaryWriter

        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.csv_path = self.run_dir / CSV_NAME
        self._start = time.time() - elapsed
        if resume_step is not None:
            truncate_csv_after(self.csv_path, resume_step)
        else:
            (self.run_dir / "args.json").write_text(json.dumps(dict(config), indent=2, default=str))
        new_file = not self.csv_path.exists()
        self._csv_file = open(self.csv_path, "a", newline="")  # noqa: SIM115 - open for the run's lifetime
        self._csv = csv.writer(self._csv_file)
        if new_file:
            self._csv.writerow(CSV_FIELDS)
            self._csv_file.flush()
        # purge_step drops TensorBoard events after the checkpoint, like the CSV truncation above.
        self.writer = SummaryWriter(str(self.run_dir), purge_step=resume_step)
        if resume_step is None:
            table = "\n".join(f"|{k}|{v}|" for k, v in config.items())
            self.writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}")
        self.wandb = None
        if track:
            import wandb

            try:
                self.wandb = wandb.init(
                    project=wandb_project,
                    name=self.run_dir.name,
                    config=dict(config),
                    dir=str(self.run_dir),
                    resume="allow",
                    id=self.run_dir.name.replace("/", "_")[:128],
                )
            except wandb.errors.Error as error:  # no API key, a refused login, no connection...
                self._csv_file.close()
                self.writer.close()
                raise UsageError(
                    f"--track: Weights & Biases did not start ({error}); run `wandb login` or set WANDB_API_KEY, "
                    "or log locally with WANDB_MODE=offline, or drop --track"
                ) from None

    @property
    def elapsed(self) -> float:
        return time.time() - self._start

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Record scalars at ``step``; the CSV is flushed before returning."""
        now = round(self.elapsed, 3)
        for name, value in metrics.items():
            value = float(value)
            self._csv.writerow((step, now, name, repr(value)))
            self.writer.add_scalar(name, value, step)
        self._csv_file.flush()
        if self.wandb is not None:
            self.wandb.log(dict(metrics), step=step)

    def log_video(self, tag: str, frames: list, fps: float, step: int, mp4_path: str | os.PathLike | None = None) -> None:
        """A clip (frames ``(height, width, 3)`` uint8) in TensorBoard, and with ``track`` its MP4 in W&B."""
        from cleanrl_style.runs.video import add_to_tensorboard

        add_to_tensorboard(self.writer, tag, frames, fps, step)
        if self.wandb is not None and mp4_path is not None:
            import wandb

            self.wandb.log({tag: wandb.Video(str(mp4_path), format="mp4")}, step=step)

    def close(self) -> None:
        self._csv_file.close()
        self.writer.close()
        if self.wandb is not None:
            self.wandb.finish()


def read_progress(run_dir: str | os.PathLike) -> dict[str, list[tuple[int, float, float]]]:
    """Read ``progress.csv`` into ``{metric: [(step, time, value), ...]}`` in file order."""
    series: dict[str, list[tuple[int, float, float]]] = {}
    with open(Path(run_dir) / CSV_NAME, newline="") as f:
        for row in csv.DictReader(f):
            series.setdefault(row["metric"], []).append((int(row["step"]), float(row["time"]), float(row["value"])))
    return series
