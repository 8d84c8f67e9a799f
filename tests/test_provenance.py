"""What a run records about where it ran: enough to tell two CPUs, two thread settings and two
env backends apart."""

from __future__ import annotations

import json
import subprocess
import sys

import envs
from cleanrl_style.runs import provenance


def test_the_record_names_the_cpu_the_threads_and_the_isa_torch_chose(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    record = provenance.describe(tmp_path)
    identity = record["cpu_identity"]
    assert set(identity) == {"vendor", "family", "model", "stepping", "kernel_flags"}
    assert set(identity["kernel_flags"]) <= set(provenance.KERNEL_FLAGS)
    assert record["threads"]["environment"]["OMP_NUM_THREADS"] == "1"
    assert record["threads"]["torch_threads"] >= 1


def test_a_lowered_isa_is_recorded():
    # ATEN_CPU_CAPABILITY is read when torch loads: a fresh interpreter with it set reports it.
    code = "from cleanrl_style.runs import provenance; print(provenance.threads()['torch_cpu_capability'])"
    out = subprocess.run(
        [sys.executable, "-c", code], env={"ATEN_CPU_CAPABILITY": "default", "PATH": ""}, capture_output=True, text=True
    )
    assert out.stdout.strip() == "DEFAULT", out.stderr


def test_the_backend_auto_chose_lands_in_the_newest_record(tmp_path):
    provenance.append_record(tmp_path, {"start_step": 0})
    provenance.append_record(tmp_path, {"start_step": 100})
    vec_env = envs.make("Pendulum", 2, backend="auto")
    provenance.update_last_record(tmp_path, provenance.env_record(vec_env))
    records = json.loads((tmp_path / provenance.FILE_NAME).read_text())
    assert "backend" not in records[0]
    assert records[1]["backend"] == vec_env.backend != "abstract"


def test_the_run_records_whether_its_update_is_compiled(tmp_path):
    from agent_runs import run_agent

    run_dir = tmp_path / "run"
    common = ["--env", "Pendulum", "--learning-starts", "50", "--batch-size", "8", "--hidden-sizes", "8", "8"]
    run_agent("sac_nap", *common, "--total-timesteps", "60", "--eval-episodes", "0", "--compile", "off", run_dir=run_dir)
    records = json.loads((run_dir / provenance.FILE_NAME).read_text())
    assert records[-1]["compiled_update"] is False and records[-1]["backend"]


def test_env_threads_reaches_the_training_env(tmp_path):
    from agent_runs import run_agent

    run_dir = tmp_path / "run"
    tiny = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "1", "--update-epochs", "1"]
    flags = ["--env", "Hopper", "--backend", "mujoco", "--env-threads", "1", "--total-timesteps", "32", "--eval-episodes", "0"]
    run_agent("ppo_nap", *tiny, *flags, "--compile", "off", run_dir=run_dir)
    records = json.loads((run_dir / provenance.FILE_NAME).read_text())
    assert records[-1]["backend"] == "mujoco" and records[-1]["env_threads"] == 1
