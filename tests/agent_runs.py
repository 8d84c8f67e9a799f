"""Running an agent file as a user would, in a subprocess, for the learning and resume tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def agent_command(agent: str, run_dir: Path | None, *flags: str) -> list[str]:
    """The command line of ``agents/<agent>.py`` (``--run-dir`` only when ``run_dir`` is given)."""
    return [
        sys.executable,
        str(REPO / "agents" / f"{agent}.py"),
        *(["--run-dir", str(run_dir)] if run_dir is not None else []),
        "--no-progress-bar",
        "--torch-threads",
        "1",
        *flags,
    ]


def _env(runs_root: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    if runs_root is not None:  # where a run without --run-dir makes its folder (cleanrl_style.runs.run.RUNS_DIR)
        env["CLEANRL_STYLE_RUNS"] = str(runs_root)
    return env


def _run(what: str, cmd: list[str], env: dict[str, str], check: bool, timeout: float | None) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{what} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def run_agent(
    agent: str,
    *flags: str,
    run_dir: Path | None = None,
    runs_root: Path | None = None,
    check: bool = True,
    timeout: float | None = None,
) -> subprocess.CompletedProcess:
    """Run ``agents/<agent>.py`` with ``flags`` to completion, as a user would, in a subprocess.

    ``run_dir`` is passed as ``--run-dir``; without it (``--resume``, or a run refused before it
    starts) ``runs_root`` must say where a run folder may be made, so that none lands in the
    repository's ``runs/`` (the ``run_agent`` fixture of ``conftest.py`` passes ``tmp_path / "runs"``).
    With ``check`` a non-zero exit raises with the end of the agent's output.
    """
    if run_dir is None and runs_root is None:
        raise ValueError("run_agent needs run_dir= or runs_root= (else the run would land in the repository's runs/)")
    return _run(agent, agent_command(agent, run_dir, *flags), _env(runs_root), check, timeout)


def resume_agent(agent: str, run_dir: Path, check: bool = True, timeout: float | None = None) -> subprocess.CompletedProcess:
    """``agents/<agent>.py --resume run_dir``, with no other flag (a resumed run keeps its arguments)."""
    cmd = [sys.executable, str(REPO / "agents" / f"{agent}.py"), "--resume", str(run_dir), "--no-progress-bar"]
    return _run(f"{agent} --resume", cmd, _env(), check, timeout)


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


def run_seeds(agent: str, seeds: tuple[int, ...], root: Path, *flags: str, workers: int = 2) -> list[Path]:
    """Run ``agents/<agent>.py`` with ``flags`` once per seed, ``workers`` at a time (one thread each),
    into ``root/s<seed>``; returns the run folders in the order of ``seeds``.

    A learning test asserts what holds over these seeds (a median), never what one seed reached:
    runs are bit-identical on one CPU but only alike in distribution across CPUs.
    """
    pending = list(seeds)
    running: list[tuple[int, subprocess.Popen]] = []
    root.mkdir(parents=True, exist_ok=True)
    try:
        while pending or running:
            while pending and len(running) < workers:
                seed = pending.pop(0)
                cmd = agent_command(agent, root / f"s{seed}", "--seed", str(seed), *flags)
                with open(root / f"s{seed}.log", "w") as log:  # a file, not a pipe: no run waits on a full pipe
                    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=log, stderr=subprocess.STDOUT)
                running.append((seed, proc))
            seed, proc = running.pop(0)
            if proc.wait() != 0:
                log_tail = (root / f"s{seed}.log").read_text()[-3000:]
                raise AssertionError(f"{agent} seed {seed} failed ({proc.returncode}):\n{log_tail}")
    finally:
        for _, proc in running:
            proc.kill()
            proc.wait()
    return [root / f"s{seed}" for seed in seeds]


def load_agent(name: str):
    """``agents/<name>.py`` as the module ``agents.<name>``, the name mutmut gives its mutants (under
    ``mutmut run``, the mutated copy is what loads); loaded once per process."""
    import importlib.util

    module_name = f"agents.{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, REPO / "agents" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses look their module up in sys.modules
        spec.loader.exec_module(module)
    return sys.modules[module_name]
