"""Checkpoints that survive a killed run and are checked when loaded.

A checkpoint is ``torch.save``'s file followed by one trailer line holding the SHA-256 of those
bytes and their length; ``torch.load`` reads the file as it is (it ignores bytes after the
archive), and :func:`load_checkpoint` refuses a file whose bytes no longer match. Writes are
atomic (temporary file, fsync, rename), and the checkpoint they replace is kept as
``checkpoint.prev.pt``, so that a checkpoint damaged later (disk, copy, editing) leaves an intact
one to resume from.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import importlib
import os
import pickle
import random
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cleanrl_style.runs.cli import UsageError

CHECKPOINT_NAME = "checkpoint.pt"
PREVIOUS_NAME = "checkpoint.prev.pt"
_TRAILER = re.compile(rb"\n#cleanrl-style-checkpoint sha256=([0-9a-f]{64}) size=([0-9]+)\n\Z")
_TRAILER_MAX = 128
_CHUNK = 1 << 22


class CheckpointError(UsageError):
    """A checkpoint that is empty, truncated, no longer matches its hash, or would run code to load."""


class MissingCheckpointError(CheckpointError, FileNotFoundError):
    """No checkpoint where one was asked for (a ``FileNotFoundError`` too, as callers may expect)."""


class _HashingWriter:
    """A write-only file that hashes and counts what passes through it."""

    def __init__(self, file):
        self.file, self.sha256, self.size = file, hashlib.sha256(), 0

    def write(self, data) -> int:
        self.sha256.update(data)
        self.size += len(data)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any], keep_previous: bool = True) -> None:
    """Write ``state`` with ``torch.save`` and a content hash, atomically; keep the one it replaces
    (unless ``keep_previous`` is False).

    A run killed mid-write leaves the previous checkpoint intact, never a truncated one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            writer = _HashingWriter(f)
            torch.save(state, writer)  # type: ignore[arg-type]  # torch.save takes any object with write() and flush()
            f.write(b"\n#cleanrl-style-checkpoint sha256=%s size=%d\n" % (writer.sha256.hexdigest().encode(), writer.size))
            f.flush()
            os.fsync(f.fileno())
        if path.exists() and keep_previous:
            _keep_previous(path)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _keep_previous(path: Path) -> None:
    """Make ``checkpoint.prev.pt`` the current checkpoint, leaving ``path`` in place until replaced."""
    previous = path.with_name(PREVIOUS_NAME if path.name == CHECKPOINT_NAME else f"{path.stem}.prev{path.suffix}")
    link = previous.with_name(f".{previous.name}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(link)
    try:
        os.link(path, link)  # a second name for the same bytes, then an atomic rename over the old one
        os.replace(link, previous)
    except OSError:  # a filesystem without hard links
        import shutil

        shutil.copyfile(path, link)
        os.replace(link, previous)


def verify_checkpoint(path: str | os.PathLike) -> None:
    """Raise :class:`CheckpointError` naming ``path`` unless its bytes match the hash it carries."""
    path = Path(path)
    size = path.stat().st_size
    if size == 0:
        raise CheckpointError(f"{path} is empty (0 bytes): it was never written completely")
    with open(path, "rb") as f:
        f.seek(max(0, size - _TRAILER_MAX))
        match = _TRAILER.search(f.read())
        if match is None:
            raise CheckpointError(
                f"{path} has no content hash at its end: it is truncated, or was not written by save_checkpoint "
                "(load_checkpoint(..., verify=False) reads such a file unchecked)"
            )
        expected, length = match.group(1).decode(), int(match.group(2))
        if length != size - len(match.group(0)):
            raise CheckpointError(f"{path} is truncated or extended: {size} bytes, its trailer says {length} plus itself")
        f.seek(0)
        sha256, left = hashlib.sha256(), length
        while left:
            chunk = f.read(min(_CHUNK, left))
            if not chunk:
                break
            sha256.update(chunk)
            left -= len(chunk)
    if sha256.hexdigest() != expected:
        raise CheckpointError(f"{path} is corrupt: its content no longer matches the SHA-256 stored with it")


def _allowed_globals() -> list[Any]:
    """What a checkpoint of this suite holds besides tensors and plain data: NumPy's RNG state, an
    array of uint32 (and NumPy scalars, should an agent store one). Nothing here runs code on load."""
    multiarray = importlib.import_module("numpy._core.multiarray" if hasattr(np, "_core") else "numpy.core.multiarray")
    dtypes = [type(np.dtype(t)) for t in (np.uint32, np.int64, np.int32, np.float64, np.float32, np.bool_)]
    return [
        multiarray._reconstruct,
        (multiarray._reconstruct, "numpy.core.multiarray._reconstruct"),  # as NumPy 1 pickled it
        multiarray.scalar,
        (multiarray.scalar, "numpy.core.multiarray.scalar"),
        np.ndarray,
        np.dtype,
        *dtypes,
    ]


_UNSUPPORTED = re.compile(r"(?:unsupported|Unsupported global:) GLOBAL ([\w.]+)")


def load_checkpoint(
    path: str | os.PathLike,
    map_location: str | torch.device = "cpu",
    verify: bool = True,
    trust: bool = False,
    mmap: bool = False,
) -> dict[str, Any]:
    """Load a checkpoint (a run folder or the file) after checking its content hash.

    ``mmap`` maps the tensors' bytes from the file instead of reading them into memory.

    The file is unpickled with ``weights_only=True``: tensors, plain data and the NumPy types of
    :func:`_allowed_globals`, never a callable that the file names. The hash proves the bytes are
    intact, not who wrote them. ``trust`` (``--trust-checkpoint``) loads anything, as older
    versions of this suite did: only for a file you made or trust.

    Raises:
        FileNotFoundError: nothing there.
        CheckpointError: empty, truncated or corrupt (the message names the file, and the previous
            checkpoint when that one is intact); or holding other Python objects, without ``trust``.
    """
    path = Path(path)
    if path.is_dir():
        path = path / CHECKPOINT_NAME
    if not path.exists():
        raise MissingCheckpointError(
            f"No checkpoint at {path}. A run writes {CHECKPOINT_NAME} into its folder under runs/ "
            "at every --checkpoint-every interval; pass that run folder."
        )
    if verify:
        try:
            verify_checkpoint(path)
        except CheckpointError as error:
            previous = path.with_name(PREVIOUS_NAME)
            if path.name == CHECKPOINT_NAME and previous.exists():
                try:
                    verify_checkpoint(previous)
                except CheckpointError:
                    raise CheckpointError(f"{error}; the previous checkpoint {previous} is damaged too") from None
                raise CheckpointError(
                    f"{error}. The previous checkpoint {previous} is intact: move it over {path} "
                    f"(mv {previous} {path}) and resume from there."
                ) from None
            raise
    if trust:
        return torch.load(path, map_location=map_location, weights_only=False, mmap=mmap)
    try:
        with torch.serialization.safe_globals(_allowed_globals()):
            return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as error:
        named = _UNSUPPORTED.search(str(error))
        what = named.group(1) if named else "an object torch.load refuses with weights_only=True"
        raise CheckpointError(
            f"{path} holds a Python object beyond tensors and plain data ({what}), and loading it could run code "
            "stored in the file; if you wrote it or trust its source, pass --trust-checkpoint "
            "(load_checkpoint(..., trust=True))"
        ) from None


def remove_stale_temporaries(run_dir: str | os.PathLike) -> list[str]:
    """Remove the temporary files of saves that were killed mid-write; call only while holding the
    run directory's lock (``Run`` does), so that no live save's file is taken."""
    removed = []
    for name in glob.glob(os.path.join(glob.escape(str(run_dir)), ".*.tmp")):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)
            removed.append(name)
    return removed


def rng_states() -> dict[str, Any]:
    """Python, NumPy and torch RNG states, to put in a checkpoint."""
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "torch_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if states.get("torch_cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["torch_cuda"])


def seed_everything(seed: int, deterministic: bool = True) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = deterministic
