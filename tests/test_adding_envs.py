"""The "adding environments" code of docs/experiments.md, run exactly as written there."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "experiments.md"
TINY_PPO = [
    "--num-envs",
    "2",
    "--num-steps",
    "64",
    "--num-minibatches",
    "4",
    "--update-epochs",
    "2",
    "--total-timesteps",
    "1024",
    "--no-progress-bar",
]


def doc_files() -> dict[str, str]:
    """The doc's Python blocks whose first line names a file (``# my_env.py``), by file name."""
    files = {}
    for block in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S):
        name = re.match(r"# (\w+\.py)", block)
        if name:
            files[name.group(1)] = block
    return files


@pytest.fixture
def project(tmp_path) -> Path:
    """A user's folder holding the doc's files."""
    for name, text in doc_files().items():
        (tmp_path / name).write_text(text)
    return tmp_path


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def returns_logged(run_dir: Path) -> list[float]:
    with open(run_dir / "progress.csv", newline="") as f:
        return [float(r["value"]) for r in csv.DictReader(f) if r["metric"] == "charts/episodic_return"]


def test_the_doc_holds_every_file_it_tells_the_user_to_write():
    assert {"my_env.py", "train_my_env.py", "my_suite.py", "use_my_suite.py"} <= set(doc_files())


def test_the_new_gymnasium_env_passes_the_checker(project):
    proc = run([sys.executable, "-m", "envs.check", "my_env:MyEnv-v0"], project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MyEnv-v0: follows the contract" in proc.stdout and "FAIL" not in proc.stdout


@pytest.mark.slow
def test_an_agent_trains_on_the_new_env_through_the_launcher(project):
    proc = run(
        [
            sys.executable,
            "train_my_env.py",
            str(REPO / "agents" / "ppo_nap.py"),
            "--env",
            "MyEnv-v0",
            *TINY_PPO,
            "--eval-episodes",
            "2",
            "--run-dir",
            "run",
        ],
        project,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert returns_logged(project / "run"), "no episode finished"
    assert "evaluation over 2 episodes" in proc.stdout


@pytest.mark.slow
def test_a_sweep_imports_the_module_that_registers_the_env(project):
    proc = run(
        [
            sys.executable,
            "-m",
            "cleanrl_style.experiments.sweep",
            "--import",
            "my_env",
            "--agents",
            "ppo_nap",
            "--envs",
            "MyEnv-v0",
            "--seeds",
            "1",
            "--sweep-dir",
            "sweep",
            "--flags",
            " ".join([*TINY_PPO, "--eval-episodes", "0"]),
        ],
        project,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert returns_logged(project / "sweep" / "MyEnv-v0__ppo_nap__s1")


def test_the_new_tool_suite_and_task_family_run_in_the_text_env(project):
    proc = run([sys.executable, "use_my_suite.py"], project)
    assert proc.returncode == 0, proc.stderr
    reward, verdict = proc.stdout.splitlines()[:2]
    assert reward == "1.0"
    assert "'passed': False" in verdict and "'failed_checks': ['response']" in verdict


def test_the_expert_solves_every_task_of_the_new_family_and_a_wrong_call_fails(project):
    script = """
from envs.text import ExpertPolicy, ToolUseEnv, rollout, SUITES
from my_suite import thermostat_tasks
tasks = thermostat_tasks(30, seed=1)
env = ToolUseEnv(tasks)
assert all(rollout(env, ExpertPolicy(), options={"task_id": t.task_id}).reward == 1.0 for t in tasks)
assert {t.split for t in tasks} == {"train", "test"}
messages, _ = env.reset(options={"task_id": 0})
assert "set_temperature" in messages[0]["content"]  # the schema generated from the docstring is in the prompt
room = tasks[0].turns[1].gold_calls[0].arguments["room"]
first_room = tasks[0].turns[0].gold_calls[0].arguments["room"]
env.step('<tool_call>{"name": "get_temperature", "arguments": {"room": "%s"}}</tool_call>' % first_room)
env.step("Here you are.")
env.step('<tool_call>{"name": "set_temperature", "arguments": {"room": "%s", "celsius": 29.5}}</tool_call>' % room)
_, reward, terminated, _, info = env.step("Done.")
assert terminated and reward == 0.0, info["turn_results"]
assert info["turn_results"][-1]["failed_checks"] == ["state", "response"], info["turn_results"]
print("ok")
"""
    proc = run([sys.executable, "-c", script], project)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr
