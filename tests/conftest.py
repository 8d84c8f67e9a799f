import atexit
import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# torch.compile's kernels go to a cache of this session (the agents' subprocesses inherit it), not to
# the machine's /tmp/torchinductor_<user>: a kernel left broken there by a killed compile made
# tests/test_sorting.py abort the whole run (SIGABRT) on a machine where it had been written.
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="cleanrl_style_inductor_")
    atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)
# Agents are scripts, not a package: make `import ppo_nap` work in tests.
sys.path.insert(0, str(REPO_ROOT / "agents"))

import agent_runs  # noqa: E402  (tests/ is on sys.path, as for this conftest)


@pytest.fixture
def run_agent(tmp_path):
    """:func:`agent_runs.run_agent` with the runs that have no ``--run-dir`` kept under ``tmp_path``."""
    return functools.partial(agent_runs.run_agent, runs_root=tmp_path / "runs")


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """Small networks run fastest single-threaded on a 2-core machine (as the agents default to)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
