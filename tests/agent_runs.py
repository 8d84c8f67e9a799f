"""Running an agent file as a user would, in a subprocess, for the learning and resume tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def agent_command(agent: str, run_dir: Path, *flags: str) -> list[str]:
    return [
        sys.executable,
        str(REPO / "agents" / f"{agent}.py"),
        "--run-dir",
        str(run_dir),
        "--no-progress-bar",
        "--torch-threads",
        "1",
        *flags,
    ]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}


def run_agent(agent: str, run_dir: Path, *flags: str) -> subprocess.CompletedProcess:
    """Run ``agents/<agent>.py`` to completion; raise with its output if it fails."""
    proc = subprocess.run(agent_command(agent, run_dir, *flags), cwd=REPO, env=_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"{agent} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def resume_agent(agent: str, run_dir: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(REPO / "agents" / f"{agent}.py"), "--resume", str(run_dir), "--no-progress-bar"]
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"{agent} --resume failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def run_until_first_checkpoint_then_kill(agent: str, run_dir: Path, *flags: str) -> None:
    """Start a run, wait for its first checkpoint, then kill it (SIGKILL), as a crash would."""
    proc = subprocess.Popen(
        agent_command(agent, run_dir, *flags),
        cwd=REPO,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    checkpoint = run_dir / "checkpoint.pt"
    try:
        while not checkpoint.exists():
            if proc.poll() is not None:
                raise AssertionError(f"{agent} ended before its first checkpoint:\n{proc.stderr.read()[-3000:]}")
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
