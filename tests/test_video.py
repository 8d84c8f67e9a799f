"""--capture-video: MP4s of the policy during training and at evaluation, read back; TensorBoard clips;
a clear error at start when the machine cannot render."""

from __future__ import annotations

import ctypes.util
import os
import re
import subprocess
import sys

import imageio_ffmpeg
import numpy as np
import pytest
from agent_runs import REPO, agent_command

from cleanrl_style.runs.evaluate import evaluate_policy, evaluate_run, load_run_policy
from cleanrl_style.runs.logger import read_progress
from cleanrl_style.runs.video import RenderingUnavailable, check_rendering

VIDEO_LINE = re.compile(r"video: (\S+\.mp4) \((\d+) steps, return (-?[\d.]+)")
FLAGS = [
    "--env",
    "InvertedPendulum",
    "--total-timesteps",
    "1024",
    "--num-envs",
    "4",
    "--num-steps",
    "128",
    "--num-minibatches",
    "4",
    "--update-epochs",
    "2",
    "--compile",
    "off",
    "--eval-episodes",
    "2",
    "--capture-video",
    "--video-every",
    "30",
    "--video-size",
    "64",
    "48",
    "--progress-every",
    "1e-9",
]


def read_mp4(path) -> tuple[dict, list[np.ndarray]]:
    """Decode an MP4 with ffmpeg: its metadata and every frame (height, width, 3)."""
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    width, height = meta["size"]
    return meta, [np.frombuffer(frame, np.uint8).reshape(height, width, 3) for frame in reader]


@pytest.fixture(scope="module")
def filmed_run(tmp_path_factory):
    """A short PPO run on InvertedPendulum filmed every 30 training episodes; its folder and stdout."""
    run_dir = tmp_path_factory.mktemp("video") / "run"
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(agent_command("ppo_nap", run_dir, *FLAGS), cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return run_dir, proc.stdout


@pytest.mark.slow
def test_training_writes_playable_mp4s_with_one_frame_per_step(filmed_run):
    run_dir, stdout = filmed_run
    filmed = VIDEO_LINE.findall(stdout)
    names = [os.path.basename(path) for path, _, _ in filmed]
    # At the start, after every 30 training episodes (InvertedPendulum's early episodes last ~10 steps),
    # and at the end (here filmed already by the last periodic video, at the same step).
    assert names[0] == "step_000000000.mp4" and names[-1] == "step_000001024.mp4" and len(names) >= 3
    assert sorted(p.name for p in (run_dir / "videos").iterdir()) == sorted(names)
    for path, length, _ in filmed:
        meta, frames = read_mp4(path)
        assert meta["size"] == (64, 48) and meta["codec"].startswith("h264")
        assert len(frames) == int(length) + 1  # the first observation, then one frame per step
        assert meta["fps"] == pytest.approx(1 / 0.04)  # InvertedPendulum's dt: real time
        assert frames[0].std() > 5  # a rendered scene, not a blank frame


def test_the_final_video_is_the_policys_own_episode(filmed_run):
    run_dir, stdout = filmed_run
    _, length, episode_return = VIDEO_LINE.findall(stdout)[-1]
    policy, _, _ = load_run_policy(str(run_dir))
    # Videos start from seed + 20,000 (seed 1 by default): the same episode without rendering.
    (expected,) = evaluate_policy(policy.act, "InvertedPendulum", episodes=1, seed=20_001)
    assert float(episode_return) == pytest.approx(expected, abs=0.05)
    # InvertedPendulum-v5 rewards 1 per step with the pole up, 0 on the step that drops it.
    assert float(episode_return) in (int(length), int(length) - 1)


def test_videos_go_to_tensorboard_as_animated_gifs(filmed_run):
    from tensorboard.backend.event_processing.event_accumulator import IMAGES, EventAccumulator

    run_dir, stdout = filmed_run
    events = EventAccumulator(str(run_dir), size_guidance={IMAGES: 0})
    events.Reload()
    clips = events.Images("videos/policy")
    steps = [int(os.path.basename(path)[5:14]) for path, _, _ in VIDEO_LINE.findall(stdout)]
    assert [clip.step for clip in clips] == steps
    assert all(clip.encoded_image_string[:6] == b"GIF89a" and (clip.width, clip.height) == (64, 48) for clip in clips)


def test_training_prints_plain_progress_lines_when_stdout_is_not_a_terminal(filmed_run):
    _, stdout = filmed_run
    lines = [line for line in stdout.splitlines() if line.startswith("[progress]")]
    assert lines[0].startswith("[progress] step 512/1,024 (50.0%) | SPS ")
    assert lines[-1].startswith("[progress] step 1,024/1,024 (100.0%)") and " | left 0:00:00" in lines[-1]
    assert all(" | return " in line and " | elapsed " in line for line in lines)


@pytest.mark.slow
def test_filming_leaves_training_unchanged(filmed_run, tmp_path):
    """The same run without videos logs the same returns: filming draws nothing from the training RNGs."""
    run_dir, _ = filmed_run
    flags = [f for f in FLAGS if f not in ("--capture-video",)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    subprocess.run(agent_command("ppo_nap", tmp_path / "plain", *flags), cwd=REPO, env=env, check=True, capture_output=True)
    filmed = read_progress(run_dir)["charts/episodic_return"]
    plain = read_progress(tmp_path / "plain")["charts/episodic_return"]
    assert [(s, v) for s, _, v in filmed] == [(s, v) for s, _, v in plain]


@pytest.mark.slow
def test_evaluate_films_the_episodes_it_scores(filmed_run):
    run_dir, _ = filmed_run
    proc = subprocess.run(
        [sys.executable, "-m", "cleanrl_style.runs.evaluate", str(run_dir), "--episodes", "3", "--capture-video"]
        + ["--video-episodes", "2", "--video-size", "32", "32"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    filmed = VIDEO_LINE.findall(proc.stdout)
    assert [os.path.basename(p) for p, _, _ in filmed] == [
        "eval_step_000001024_seed_12345.mp4",
        "eval_step_000001024_seed_12346.mp4",
    ]
    returns = evaluate_run(str(run_dir), episodes=3)  # seeds 12345, 12346, 12347
    for i, (path, length, episode_return) in enumerate(filmed):
        assert float(episode_return) == pytest.approx(returns[i], abs=0.05)
        meta, frames = read_mp4(path)
        assert meta["size"] == (32, 32) and len(frames) == int(length) + 1


def test_an_impossible_gl_platform_is_refused_with_its_name(monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "directx")
    with pytest.raises(RenderingUnavailable, match="MUJOCO_GL='directx'.*one of egl, osmesa, glfw"):
        check_rendering()


@pytest.mark.skipif(ctypes.util.find_library("OSMesa") is not None, reason="OSMesa is installed here")
def test_a_missing_gl_library_fails_at_start_naming_it(tmp_path):
    env = {**os.environ, "MUJOCO_GL": "osmesa", "PYTHONWARNINGS": "ignore"}
    env.pop("PYOPENGL_PLATFORM", None)
    proc = subprocess.run(
        agent_command("ppo_nap", tmp_path / "run", *FLAGS), cwd=REPO, env=env, capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert "MuJoCo cannot render off-screen with MUJOCO_GL=osmesa" in proc.stderr
    assert "apt-get install libosmesa6" in proc.stderr
    assert "charts/SPS" not in (tmp_path / "run" / "progress.csv").read_text()  # nothing trained


@pytest.mark.slow
def test_the_final_policy_is_filmed_without_an_evaluation(tmp_path):
    flags = list(FLAGS)
    flags[flags.index("--eval-episodes") + 1] = "0"
    flags[flags.index("--video-every") + 1] = "1000000"  # no periodic video: the start and the end only
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    subprocess.run(agent_command("ppo_nap", tmp_path / "run", *flags), cwd=REPO, env=env, check=True, capture_output=True)
    assert sorted(p.name for p in (tmp_path / "run" / "videos").iterdir()) == ["step_000000000.mp4", "step_000001024.mp4"]
