"""benchmarks/gpu_check.py runs every code path on warp's CPU device at the smallest sizes, so that
the script works the day a GPU is lent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mujoco_warp")

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_runs_on_the_cpu_at_tiny_sizes(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "gpu_check.py"),
            *("--device", "cpu", "--tiny", "--smoke-workers", "2", "--runs-dir", str(tmp_path)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1500,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "4 worlds: physics" in out and "SPS" in out
    assert "smoke runs: all passed" in out
    assert out.count(" ok ") == 8  # the eight smoke runs, each with finite losses
    assert "meets" not in out and "misses" not in out  # tiny figures are not judged against the goals
