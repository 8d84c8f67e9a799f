"""What a run refuses: a second writer, a damaged checkpoint, non-finite actions, flags that cannot
work (one line ``error: ...``, exit status 2, no run directory left behind) and resume flags that
contradict the saved run."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import envs
from cleanrl_style import Run, load_checkpoint, save_checkpoint
from cleanrl_style.runs.checkpoint import CheckpointError
from cleanrl_style.runs.cli import UsageError

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "agents"))  # for `from ppo_nap import Args` (also done by tests/conftest.py)
FAST_PPO = ["--env", "Pendulum", "--num-envs", "1", "--num-steps", "64", "--num-minibatches", "2", "--update-epochs", "1"]
FAST_PPO += ["--eval-episodes", "0", "--compile", "off", "--no-progress-bar", "--torch-threads", "1"]


def agent(name: str, *flags: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "CLEANRL_STYLE_RUNS": str(cwd / "runs"), "PYTHONWARNINGS": "ignore"}
    command = [sys.executable, str(REPO_ROOT / "agents" / f"{name}.py"), *flags]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def assert_usage_error(proc: subprocess.CompletedProcess, *phrases: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr  # one line, no traceback
    for phrase in phrases:
        assert phrase in lines[0], lines[0]


# ---- command-line errors -------------------------------------------------------------------------

CLI_ERRORS = [
    ("sac_nap", ["--total-timesteps", "-5"], ["--total-timesteps -5: must be at least 1"]),
    ("ppo_nap", ["--num-envs", "0"], ["--num-envs 0: must be at least 1"]),
    ("ppo_nap", ["--env", "Hoper"], ["Unknown env 'Hoper'", "Did you mean 'Hopper'?"]),
    ("sac_nap", ["--env", "CartPole-v1"], ["action space Discrete(2) is not a Box"]),
    ("ppo_nap", ["--num-envs", "1", "--num-steps", "8", "--num-minibatches", "64"], ["--num-minibatches 64 exceeds"]),
    ("ppo_nap", ["--total-timesteps", "100"], ["--total-timesteps 100 is below one batch (2048 steps"]),
    ("sac_nap", ["--batch-size", "512", "--buffer-size", "100"], ["--batch-size 512 is larger than --buffer-size 100"]),
    ("sac_simba", ["--env", "Nope"], ["Unknown env 'Nope'"]),  # raised before the agent makes its Run
    ("symphony", ["--total-timesteps", "1000"], ["not more than --warmup-steps 10240"]),
    ("sac_nap", ["--env", "Hopper", "--backend", "bullet"], ["Unknown backend 'bullet'"]),
    ("sac_nap", ["--tau", "-3"], ["--tau -3.0: must lie in (0, 1]"]),
]


OUT_OF_RANGE = [
    ("sac_nap", "tau", 1.5, "(0, 1]"),
    ("sac_simba", "tau", 0.0, "(0, 1]"),
    ("symphony", "tau", float("nan"), "(0, 1]"),
    ("ppo_nap", "gamma", 0.0, "(0, 1]"),
    ("sac_nap", "gamma", 1.01, "(0, 1]"),
    ("ppo_nap", "gae_lambda", -0.1, "[0, 1]"),
    ("ppo_nap", "learning_rate", 0.0, "greater than 0"),
    ("sac_nap", "q_lr", float("inf"), "greater than 0"),
    ("sac_nap", "alpha", -1.0, "greater than 0"),
    ("ppo_nap", "clip_coef", -0.2, "greater than 0"),
    ("ppo_nap", "max_grad_norm", 0.0, "greater than 0"),
    ("ppo_nap", "target_kl", -0.01, "greater than 0"),
    ("ppo_nap", "ent_coef", -1.0, "0 or more"),
    ("sac_simba", "weight_decay", -0.01, "0 or more"),
    ("ppo_nap", "hidden_sizes", (64, 0), "one width of 1 or more"),
    ("sac_nap", "hidden_sizes", (), "one width of 1 or more"),
    ("sac_nap", "log_std_min", 3.0, "the minimum must be below the maximum"),
    ("sac_nap", "batch_size", 0, "must be at least 1"),
    ("sac_simba", "critic_width", 0, "widths of 1 or more"),
    ("sac_simba", "actor_blocks", -1, "0 or more blocks"),
    ("sac_simba", "target_entropy_scale", -0.5, "[0, inf]"),
    ("symphony", "grad_dropout", 1.0, "[0, 1)"),
    ("symphony", "advantage_smoothing", 1.5, "[0, 1]"),
    ("symphony", "betas", (0.9, 1.0), "[0, 1)"),
    ("symphony", "hidden", 0, "widths of 1 or more"),
    ("symphony", "adv_eps", 0.0, "greater than 0"),
]


@pytest.mark.parametrize("agent_name, field, value, phrase", OUT_OF_RANGE, ids=[f"{a} {f}={v}" for a, f, v, _ in OUT_OF_RANGE])
def test_out_of_range_hyperparameters_are_refused_by_name(agent_name, field, value, phrase):
    import dataclasses
    import importlib

    from cleanrl_style.runs.cli import check_args, flag

    args = dataclasses.replace(importlib.import_module(agent_name).Args(env="Pendulum"), **{field: value})
    with pytest.raises(UsageError) as refused:
        check_args(args)
    assert phrase in str(refused.value) and (flag(field) in str(refused.value) or field == "batch_size"), str(refused.value)
    check_args(importlib.import_module(agent_name).Args(env="Pendulum"))  # the defaults pass


@pytest.mark.parametrize("agent_name, flags, phrases", CLI_ERRORS, ids=[" ".join([a, *f]) for a, f, _ in CLI_ERRORS])
def test_a_user_error_is_one_line_exit_status_2_and_leaves_no_run_directory(tmp_path, agent_name, flags, phrases):
    proc = agent(agent_name, *flags, "--no-progress-bar", cwd=tmp_path)
    assert_usage_error(proc, *phrases)
    assert not (tmp_path / "runs").exists()  # neither the run's folder nor runs/, made for it


def test_an_env_error_raised_after_the_run_folder_exists_removes_the_folder_it_created(tmp_path):
    run_dir = tmp_path / "fresh"
    proc = agent("sac_nap", "--env", "Hopper", "--backend", "bullet", "--run-dir", str(run_dir), cwd=tmp_path)
    assert_usage_error(proc, "Unknown backend 'bullet'")
    assert not run_dir.exists()
    kept = tmp_path / "a-folder-the-user-made"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    proc = agent("sac_nap", "--env", "Hopper", "--backend", "bullet", "--run-dir", str(kept), cwd=tmp_path)
    assert_usage_error(proc, "Unknown backend 'bullet'")
    assert (kept / "notes.txt").read_text() == "mine"  # a folder it did not create is never removed
    assert sorted(p.name for p in kept.iterdir()) == ["notes.txt"]  # only what the failed run wrote there goes


# ---- one writer per run directory ----------------------------------------------------------------


def test_a_second_writer_is_refused_with_the_holders_pid_and_the_kernel_frees_the_lock(tmp_path):
    from ppo_nap import Args

    run_dir = tmp_path / "run"
    first = Run(Args(env="Pendulum", run_dir=str(run_dir), progress_bar=False), agent_file="ppo_nap.py")
    with pytest.raises(UsageError, match=rf"is in use: another process \(pid {os.getpid()}\)"):
        Run(Args(env="Pendulum", run_dir=str(run_dir), progress_bar=False), agent_file="ppo_nap.py")
    proc = agent("ppo_nap", *FAST_PPO, "--run-dir", str(run_dir), cwd=tmp_path)
    assert_usage_error(proc, f"pid {os.getpid()}")
    first.close()

    # A holder that dies (SIGKILL, no clean-up) releases the lock: the kernel drops it.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR); "
         "fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(600)", str(run_dir / ".lock")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(UsageError, match="is in use"):
        Run(Args(env="Pendulum", run_dir=str(run_dir), progress_bar=False), agent_file="ppo_nap.py")
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    holder.stdout.close()
    # The lock is free again: what refuses this run now is the first run's logs, looked at under the lock.
    with pytest.raises(UsageError, match="ended before its first checkpoint"):
        Run(Args(env="Pendulum", run_dir=str(run_dir), progress_bar=False), agent_file="ppo_nap.py")


# ---- checkpoints ---------------------------------------------------------------------------------


def _two_checkpoints(path):
    save_checkpoint(path, {"global_step": 1, "weights": torch.arange(10_000.0)})
    save_checkpoint(path, {"global_step": 2, "weights": torch.arange(10_000.0) * 2})


def test_a_checkpoint_with_flipped_bytes_is_refused_naming_it_and_the_intact_previous_one(tmp_path):
    path = tmp_path / "checkpoint.pt"
    _two_checkpoints(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the 80 kB of tensor bytes
    path.write_bytes(bytes(data))
    assert torch.load(path, weights_only=False)["global_step"] == 2  # torch alone would load it, wrong weights and all
    with pytest.raises(CheckpointError) as refused:
        load_checkpoint(path)
    message = str(refused.value)
    assert f"{path} is corrupt" in message and f"{tmp_path / 'checkpoint.prev.pt'} is intact" in message
    assert load_checkpoint(tmp_path / "checkpoint.prev.pt")["global_step"] == 1


@pytest.mark.parametrize("damage", ["empty", "truncated", "extended"])
def test_an_empty_truncated_or_extended_checkpoint_is_refused_naming_the_file(tmp_path, damage):
    path = tmp_path / "checkpoint.pt"
    _two_checkpoints(path)
    data = path.read_bytes()
    path.write_bytes({"empty": b"", "truncated": data[: len(data) // 3], "extended": data + b"x"}[damage])
    with pytest.raises(CheckpointError, match=str(path)):
        load_checkpoint(path)


@pytest.mark.slow
def test_resume_of_a_corrupt_checkpoint_is_a_one_line_error_and_stale_temporaries_go(tmp_path):
    run_dir = tmp_path / "run"
    assert agent("ppo_nap", *FAST_PPO, "--total-timesteps", "128", "--checkpoint-every", "64", "--run-dir", str(run_dir),
                 cwd=tmp_path).returncode == 0  # fmt: skip
    assert (run_dir / "checkpoint.prev.pt").exists()
    stale = run_dir / ".checkpoint.pt.killed-mid-save.tmp"
    stale.write_bytes(b"half a checkpoint")
    data = bytearray((run_dir / "checkpoint.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (run_dir / "checkpoint.pt").write_bytes(bytes(data))
    proc = agent("ppo_nap", "--resume", str(run_dir), "--no-progress-bar", cwd=tmp_path)
    assert_usage_error(proc, "checkpoint.pt is corrupt", "checkpoint.prev.pt is intact")
    assert not stale.exists() and run_dir.exists()


# ---- resume flags --------------------------------------------------------------------------------


@pytest.mark.slow
def test_resume_refuses_contradicting_flags_and_applies_a_larger_total(tmp_path):
    run_dir = tmp_path / "run"
    assert agent("ppo_nap", *FAST_PPO, "--total-timesteps", "128", "--run-dir", str(run_dir), cwd=tmp_path).returncode == 0
    proc = agent("ppo_nap", "--resume", str(run_dir), "--env", "Hopper", "--num-steps", "32", cwd=tmp_path)
    assert_usage_error(proc, "contradict the saved run", "--env 'Hopper' (saved: 'Pendulum')", "--num-steps 32 (saved: 64)")
    proc = agent("ppo_nap", "--resume", str(run_dir), "--total-timesteps", "64", cwd=tmp_path)
    assert_usage_error(proc, "already at step 128")
    # The saved values given again are no conflict; a larger total extends the run and is recorded.
    proc = agent("ppo_nap", "--resume", str(run_dir), "--env", "Pendulum", "--total-timesteps", "192", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert load_checkpoint(run_dir)["global_step"] == 192
    saved = json.loads((run_dir / "args.json").read_text())
    assert saved["total_timesteps"] == 192 and saved["num_iterations"] == 3 and saved["env"] == "Pendulum"


# ---- non-finite actions --------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["gymnasium", "mujoco"])
def test_nan_and_inf_actions_are_refused_naming_the_sub_environments(backend):
    vec = envs.make("Hopper", 4, backend=backend, seed=0)
    vec.reset()
    actions = torch.zeros(4, 3)
    actions[1, 0] = float("nan")
    actions[3, 2] = float("inf")
    with pytest.raises(envs.NonFiniteActionError, match=r"sub-environment\(s\) \[1, 3\]") as refused:
        vec.step(actions)
    assert refused.value.sub_envs == [1, 3]
    clipping = envs.make("Hopper", 4, backend=backend, seed=0, nonfinite_actions="clip")
    clipping.reset()
    _, reward, *_ = clipping.step(actions)
    assert torch.isfinite(reward).all()
    with pytest.raises(envs.EnvRequestError, match="nonfinite_actions"):
        envs.make("Hopper", 1, backend=backend, nonfinite_actions="ignore")
    vec.close()
    clipping.close()


def test_clipping_maps_nan_to_zero_and_inf_to_the_bounds():
    reference = envs.make("Pendulum", 1, backend="gymnasium", seed=3)
    clipping = envs.make("Pendulum", 1, backend="gymnasium", seed=3, nonfinite_actions="clip")
    reference.reset()
    clipping.reset()
    for bad, same_as in ((float("nan"), 0.0), (float("inf"), 2.0), (float("-inf"), -2.0)):
        expected = reference.step(torch.tensor([[same_as]]))
        got = clipping.step(torch.tensor([[bad]]))
        assert torch.equal(expected[0], got[0]) and torch.equal(expected[1], got[1])


# ---- run folders: never lose or mix a run's data ------------------------------------------------


def _args(run_dir, **kw):
    from ppo_nap import Args

    return Args(env="Pendulum", run_dir=str(run_dir), progress_bar=False, **kw)


def test_the_run_that_loses_the_start_race_leaves_the_winners_folder_alone(tmp_path, monkeypatch):
    """Two runs started at once on a new folder: the loser may be the one that made the folder, but
    the lock's holder owns it, so the loser's clean-up must not remove it."""
    import cleanrl_style.runs.run as run_module
    from cleanrl_style.runs import cli

    run_dir = tmp_path / "new"
    lock = run_module._lock_run_directory
    winner = []

    def the_other_run_locks_first(directory):  # between this run's mkdir and its lock
        winner.append(subprocess.Popen(
            [sys.executable, "-c", "import sys, time; sys.path.insert(0, 'agents'); from ppo_nap import Args; "
             "from cleanrl_style import Run; Run(Args(env='Pendulum', run_dir=sys.argv[1], progress_bar=False), "
             "agent_file='ppo_nap.py'); print('started', flush=True); time.sleep(600)", str(run_dir)],
            cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True,
        ))  # fmt: skip
        while winner[0].stdout.readline().strip() != "started":  # after its "run folder: ..."
            assert winner[0].poll() is None
        return lock(directory)

    monkeypatch.setattr(run_module, "_lock_run_directory", the_other_run_locks_first)
    try:
        try:
            Run(_args(run_dir), agent_file="ppo_nap.py")
        except UsageError as error:
            assert "is in use" in str(error)
            cli._remove_fresh_run_directories()  # what the error handler does, while the loser's frame is alive
        else:
            pytest.fail("the second run took the lock")
        assert (run_dir / "args.json").exists() and (run_dir / "progress.csv").exists() and winner[0].poll() is None
    finally:
        winner[0].kill()
        winner[0].wait()
        winner[0].stdout.close()


def test_a_new_run_into_the_folder_of_a_run_that_died_before_its_first_checkpoint_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    dead = Run(_args(run_dir, seed=7), agent_file="ppo_nap.py")
    for step in (100, 200):
        dead.log(step, {"charts/SPS": 1.0})
    dead.close()  # killed before any checkpoint
    logged, saved = (run_dir / "progress.csv").read_text(), (run_dir / "args.json").read_text()
    with pytest.raises(UsageError, match=r"no checkpoint.*another --run-dir.*rm -r"):
        Run(_args(run_dir), agent_file="ppo_nap.py")
    assert (run_dir / "progress.csv").read_text() == logged and (run_dir / "args.json").read_text() == saved


def test_resume_of_a_folder_without_a_checkpoint_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    Run(_args(run_dir), agent_file="ppo_nap.py").close()  # killed before its first checkpoint
    with pytest.raises(UsageError, match=r"--resume .*: no checkpoint"):
        Run(_args("", resume=str(run_dir)), agent_file="ppo_nap.py")


def test_a_run_dir_that_is_a_file_or_cannot_be_made_is_a_usage_error(tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    with pytest.raises(UsageError, match="--run-dir .*notes.txt: a file"):
        Run(_args(a_file), agent_file="ppo_nap.py")
    with pytest.raises(UsageError, match="--run-dir .*cannot be created"):
        Run(_args(a_file / "run"), agent_file="ppo_nap.py")
    with pytest.raises(UsageError, match="--run-dir .*cannot be created"):
        Run(_args("/proc/no-such-process/run"), agent_file="ppo_nap.py")
    assert a_file.read_text() == "mine"


def test_track_without_a_wandb_key_is_one_line_and_leaves_no_run_folder(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path), CLEANRL_STYLE_RUNS=str(tmp_path / "runs"), PYTHONWARNINGS="ignore")
    env.update(WANDB_CONFIG_DIR=str(tmp_path / "wandb_config"), WANDB_CACHE_DIR=str(tmp_path / "wandb_cache"))
    command = [sys.executable, str(REPO_ROOT / "agents" / "ppo_nap.py"), *FAST_PPO, "--track"]
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    import importlib.util

    installed = importlib.util.find_spec("wandb") is not None
    assert_usage_error(proc, "--track", *(["wandb login", "WANDB_MODE=offline"] if installed else ["pip install wandb"]))
    assert not (tmp_path / "runs").exists()


def test_a_resumed_run_says_from_which_step_and_every_run_names_its_folder(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run = Run(_args(run_dir), agent_file="ppo_nap.py")
    run.save(64, agent={})
    run.close()
    out = capsys.readouterr().out
    assert f"run folder: {run_dir}" in out and f"python -m cleanrl_style.runs.evaluate {run_dir}" in out
    Run(_args("", resume=str(run_dir)), agent_file="ppo_nap.py").close()
    assert f"resuming {run_dir} from step 64" in capsys.readouterr().out
