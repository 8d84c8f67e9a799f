"""Videos of a policy: MP4 files under ``runs/<run>/videos/``, the same clips in TensorBoard.

``--capture-video`` (every control agent) films the deterministic policy (``policy.act``, as the
evaluation uses it) in one extra rendering environment: at the start of training, after every
``--video-every`` training episodes, and at the end. ``python -m cleanrl_style.runs.evaluate runs/<run>
--capture-video`` films evaluation episodes; episode ``i`` is seeded like the evaluation's
sub-environment ``i``, so its video is the episode whose return the evaluation reports.

Rendering is off-screen, by MuJoCo's renderer (Gymnasium's MuJoCo envs, DeepMind Control tasks)
through the OpenGL platform in ``MUJOCO_GL``: ``egl`` unless set otherwise, which renders on a
headless Linux machine with Mesa's EGL (on the CPU, no GPU needed) or an NVIDIA driver. When the
platform cannot be opened the recorder fails at construction, before any training, naming what is
missing. On a software renderer (Mesa's llvmpipe) shadows and reflections are turned off in the
rendering environment's copy of the model: they cost about 5x per frame there (0.24 s against 0.04 s
for a 256x256 Hopper frame on a loaded 2-core CPU) and change nothing the video is for.

Encoding: H.264 MP4 with the ffmpeg binary that the ``imageio-ffmpeg`` package ships, at the env's
real-time frame rate (``1 / dt``). TensorBoard shows the clip as an animated GIF (its image plugin
plays GIFs) at up to 25 frames per second.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import gymnasium as gym
import numpy as np
import torch

GL_PLATFORMS = ("egl", "osmesa", "glfw")
MAX_EPISODE_STEPS = 10_000  # an env without a time limit still gives a finite video
TENSORBOARD_MAX_FPS = 25
HOW_TO_INSTALL = {
    "egl": "install Mesa's EGL (Debian/Ubuntu: apt-get install libegl1 libgl1-mesa-dri; it renders on the CPU, "
    "no GPU needed) or an NVIDIA driver, or set MUJOCO_GL=osmesa with libosmesa6 installed",
    "osmesa": "install OSMesa (Debian/Ubuntu: apt-get install libosmesa6), or set MUJOCO_GL=egl with Mesa's EGL installed",
    "glfw": "glfw needs a display (set DISPLAY, or run under xvfb-run); off-screen, set MUJOCO_GL=egl",
}


class RenderingUnavailable(RuntimeError):
    """Videos were asked for, but the host cannot render or encode them."""


def gl_platform() -> str:
    """The OpenGL platform MuJoCo renders through (``MUJOCO_GL``, set to ``egl`` when unset)."""
    platform = os.environ.setdefault("MUJOCO_GL", "egl").lower()
    if platform not in GL_PLATFORMS:
        raise RenderingUnavailable(f"MUJOCO_GL={platform!r}: off-screen rendering needs one of {', '.join(GL_PLATFORMS)}.")
    if platform in ("egl", "osmesa"):  # PyOpenGL, which MuJoCo's EGL and OSMesa contexts use, reads this
        os.environ.setdefault("PYOPENGL_PLATFORM", platform)
    return platform


def check_rendering() -> str:
    """Open (and free) a small off-screen OpenGL context; return the renderer's name (``GL_RENDERER``).

    Raises :class:`RenderingUnavailable` naming the missing library, or the ffmpeg encoder.
    """
    platform = gl_platform()
    try:
        import imageio_ffmpeg

        imageio_ffmpeg.get_ffmpeg_exe()
    except (ImportError, RuntimeError) as error:
        raise RenderingUnavailable(
            f"--capture-video encodes MP4 with the ffmpeg of the imageio-ffmpeg package, which is missing or broken "
            f"({error}). Install it: pip install imageio-ffmpeg (or pip install -e '.[video]')."
        ) from error
    try:
        if platform == "egl":
            from mujoco.egl import GLContext
        elif platform == "osmesa":
            from mujoco.osmesa import GLContext
        else:
            from mujoco.glfw import GLContext
        context = GLContext(16, 16)
        context.make_current()
        from OpenGL import GL

        renderer = GL.glGetString(GL.GL_RENDERER)
        context.free()
    except Exception as error:  # ImportError, or the platform's own error when it has no display/device
        raise RenderingUnavailable(
            f"--capture-video: MuJoCo cannot render off-screen with MUJOCO_GL={platform} "
            f"({type(error).__name__}: {error}). To fix: {HOW_TO_INSTALL[platform]}."
        ) from error
    return renderer.decode() if isinstance(renderer, bytes) else str(renderer)


def _mujoco_model(env: gym.Env):
    """The ``mujoco.MjModel`` the env renders (Gymnasium MuJoCo envs, DeepMind Control tasks), if any."""
    import mujoco

    unwrapped = env.unwrapped
    model = getattr(unwrapped, "model", None)
    physics = getattr(unwrapped, "physics", None)
    if not isinstance(model, mujoco.MjModel) and physics is not None:
        model = physics.model.ptr  # dm_control's wrapper around MuJoCo's model
    return model if isinstance(model, mujoco.MjModel) else None


def make_render_env(env_id: str, width: int, height: int) -> gym.Env:
    """One Gymnasium env that renders ``rgb_array`` frames of ``width`` x ``height``, built as the
    ``gymnasium`` backend builds its sub-environments (same id and wrappers, so the same episodes)."""
    from envs.registry import resolve_env_id

    full_id = resolve_env_id(env_id)
    try:
        return gym.make(full_id, render_mode="rgb_array", width=width, height=height)
    except TypeError:  # an env that renders at its own size, without width/height arguments
        return gym.make(full_id, render_mode="rgb_array")


@dataclass
class Episode:
    """One filmed episode."""

    path: Path
    frames: list[np.ndarray]  # (height, width, 3) uint8: the first observation's and one per step
    episode_return: float
    length: int
    fps: float


class VideoRecorder:
    """Films a policy in its own rendering environment and writes MP4 files into ``folder``.

    Construction checks everything videos need (the OpenGL platform, ffmpeg, an env that renders
    frames of the requested size) and raises :class:`RenderingUnavailable` otherwise.
    """

    def __init__(self, env_id: str, folder: str | os.PathLike, width: int = 256, height: int = 256):
        if width <= 0 or height <= 0 or width % 2 or height % 2:
            raise ValueError(f"video size {width}x{height}: width and height must be positive and even (H.264 needs it)")
        renderer = check_rendering()
        self.folder = Path(folder)
        self.env_id = env_id
        try:
            self.env = make_render_env(env_id, width, height)
        except Exception as error:
            message = f"--capture-video: {env_id} cannot be rendered ({type(error).__name__}: {error})."
            raise RenderingUnavailable(message) from error
        self.software_renderer = any(name in renderer.lower() for name in ("llvmpipe", "softpipe", "swrast"))
        model = _mujoco_model(self.env)
        if self.software_renderer and model is not None:
            model.light_castshadow[:] = 0
            model.mat_reflectance[:] = 0
        self.env.reset(seed=0)
        frame = self.env.render()
        if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[2] != 3:
            raise RenderingUnavailable(f"{env_id} does not render RGB frames (render() gave {type(frame).__name__}).")
        self.height, self.width = frame.shape[:2]
        dt = getattr(self.env.unwrapped, "dt", None)
        self.fps = 1.0 / dt if dt else float(self.env.metadata.get("render_fps") or 30)
        space = cast(gym.spaces.Box, self.env.action_space)  # the suite's envs have Box actions
        self._low, self._high = space.low.astype(np.float32), space.high.astype(np.float32)

    @torch.no_grad()
    def record(
        self,
        act: Callable[[torch.Tensor], torch.Tensor],
        path: str | os.PathLike,
        seed: int,
        device="cpu",
        action_repeat: int = 1,
    ) -> Episode:
        """Run one episode of ``act`` (batch of raw observations -> actions) from ``reset(seed)``; write it.
        ``action_repeat``: each action is held for that many simulator steps (one frame each), as in training."""
        obs, _ = self.env.reset(seed=seed)
        frames = [self._frame()]
        episode_return, length, done = 0.0, 0, False
        while not done and length < MAX_EPISODE_STEPS:
            if length % action_repeat == 0:
                batch = torch.as_tensor(obs, dtype=torch.float32).to(device).unsqueeze(0)
                action = np.clip(act(batch)[0].cpu().numpy().astype(np.float32), self._low, self._high)
            obs, reward, terminated, truncated, _ = self.env.step(action)
            episode_return += float(reward)
            length += 1
            done = terminated or truncated
            frames.append(self._frame())
        path = Path(path)
        write_mp4(path, frames, self.fps)
        return Episode(path, frames, episode_return, length, self.fps)

    def _frame(self) -> np.ndarray:
        return cast(np.ndarray, self.env.render())  # an RGB array: render_mode "rgb_array", checked in __init__

    def close(self) -> None:
        self.env.close()


def write_mp4(path: Path, frames: list[np.ndarray], fps: float) -> None:
    """H.264 MP4 (yuv420p, playable everywhere) through imageio-ffmpeg's ffmpeg; written atomically."""
    import imageio_ffmpeg

    path.parent.mkdir(parents=True, exist_ok=True)
    height, width = frames[0].shape[:2]
    tmp = path.with_name(path.name + ".tmp.mp4")
    writer = imageio_ffmpeg.write_frames(
        str(tmp),
        (width, height),
        fps=fps,
        codec="libx264",
        pix_fmt_out="yuv420p",
        macro_block_size=1,
        ffmpeg_log_level="error",
    )
    writer.send(None)
    for frame in frames:
        writer.send(np.ascontiguousarray(frame, dtype=np.uint8))
    writer.close()
    os.replace(tmp, path)


def gif_bytes(frames: list[np.ndarray], fps: float, max_fps: float = TENSORBOARD_MAX_FPS) -> tuple[bytes, float]:
    """An animated GIF of ``frames``, every k-th frame so that it plays at most at ``max_fps``; and its fps."""
    from PIL import Image

    stride = max(1, math.ceil(fps / max_fps))
    images = [Image.fromarray(np.asarray(frame, dtype=np.uint8)) for frame in frames[::stride]]
    buffer = io.BytesIO()
    gif_fps = fps / stride
    images[0].save(buffer, format="GIF", save_all=True, append_images=images[1:], duration=round(1000 / gif_fps), loop=0)
    return buffer.getvalue(), gif_fps


def add_to_tensorboard(writer, tag: str, frames: list[np.ndarray], fps: float, step: int) -> None:
    """Add the clip to a ``torch.utils.tensorboard.SummaryWriter`` as an animated GIF image summary.

    (``SummaryWriter.add_video`` would do the same through moviepy, whose 2.x API it no longer matches.)
    """
    from tensorboard.compat.proto.summary_pb2 import Summary

    gif, _ = gif_bytes(frames, fps)
    height, width = frames[0].shape[:2]
    image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=gif)
    writer._get_file_writer().add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), step)
    writer.flush()
