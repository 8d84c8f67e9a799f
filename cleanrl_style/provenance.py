"""Where and with what a run ran: code commit, package versions, CPU, load, device.

Each start of a run (fresh or resumed) appends one record to ``<run>/provenance.json``, so a
result can state its conditions without anyone remembering them.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "numpy", "gymnasium", "mujoco", "envpool", "mujoco-warp", "transformers")
FILE_NAME = "provenance.json"


def git_commit(repo: Path) -> str:
    """The repository's HEAD commit, with ``+dirty`` if tracked files differ from it; ``unknown`` outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True).stdout
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo, capture_output=True, text=True
        )
        return head.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_has_native_bf16() -> bool:
    """Whether the CPU multiplies bfloat16 in hardware (AVX-512 BF16 or AMX); without it torch emulates
    bf16 matrix products, many times slower than float32 (about 45x on an AVX2-only EPYC)."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return False
    return any(flag in flags.split() for flag in ("avx512_bf16", "amx_bf16"))


def describe(repo: Path, device: str = "cpu") -> dict[str, Any]:
    """One record: time, commit, Python and package versions, CPU model and cores, load, device."""
    versions = {}
    for name in PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    record: dict[str, Any] = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "commit": git_commit(repo),
        "python": platform.python_version(),
        "packages": versions,
        "cpu": cpu_model(),
        "cpu_native_bf16": cpu_has_native_bf16(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "device": device,
    }
    if device.startswith("cuda"):
        import torch

        record["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return record


def append_record(run_dir: Path, record: dict[str, Any]) -> None:
    """Add ``record`` to ``run_dir/provenance.json`` (a list, one entry per start of the run)."""
    path = Path(run_dir) / FILE_NAME
    records = json.loads(path.read_text()) if path.exists() else []
    records.append(record)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(records, indent=2))
    os.replace(tmp, path)
