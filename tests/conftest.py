import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# Agents are scripts, not a package: make `import ppo_nap` work in tests.
sys.path.insert(0, str(REPO_ROOT / "agents"))


@pytest.fixture
def run_agent(tmp_path):
    """Run ``agents/<name>.py`` as a subprocess with the given flags; return the CompletedProcess."""
    import subprocess

    def _run(name: str, *flags: str, check: bool = True, timeout: float = 600):
        env = {**os.environ, "CLEANRL_STYLE_RUNS": str(tmp_path / "runs")}
        proc = subprocess.run(
            [sys.executable, str(REPO_ROOT / "agents" / f"{name}.py"), *flags, "--no-progress-bar"],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            cwd=tmp_path,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{name} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    return _run


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """Small networks run fastest single-threaded on a 2-core machine (as the agents default to)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
