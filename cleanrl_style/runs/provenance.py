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


def _cpuinfo_fields() -> dict[str, str]:
    """The first processor's ``key: value`` lines of /proc/cpuinfo (empty where there is none)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break  # the end of the first processor's block
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_model() -> str:
    return _cpuinfo_fields().get("model name") or platform.processor() or platform.machine()


# The instruction-set flags that change which kernels torch runs, and so a run's float arithmetic.
KERNEL_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")


def cpu_identity() -> dict[str, Any]:
    """What tells two CPUs apart when their model name does not (virtual machines report a generic
    "Intel(R) Xeon(R) Processor"): vendor, family, model and stepping numbers, and the kernel flags."""
    fields = _cpuinfo_fields()
    flags = set(fields.get("flags", "").split())
    return {
        "vendor": fields.get("vendor_id", platform.machine()),
        "family": fields.get("cpu family"),
        "model": fields.get("model"),
        "stepping": fields.get("stepping"),
        "kernel_flags": [flag for flag in KERNEL_FLAGS if flag in flags],
    }


def threads() -> dict[str, Any]:
    """torch's intra- and inter-op threads, the ISA torch dispatches to (``ATEN_CPU_CAPABILITY`` lowers
    it), and the thread variables of the environment."""
    import torch

    return {
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "environment": {
            name: os.environ[name]
            for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "ATEN_CPU_CAPABILITY")
            if name in os.environ
        },
    }


def env_record(vec_env: Any) -> dict[str, Any]:
    """The vector env a run chose: its backend (what ``--backend auto`` resolved to) and, for the
    backends that step on CPU threads, how many (0: one per CPU)."""
    return {"backend": getattr(vec_env, "backend", None), "env_threads": getattr(vec_env, "num_threads", None)}


def update_last_record(run_dir: Path, fields: dict[str, Any]) -> None:
    """Add ``fields`` to the newest record of ``run_dir/provenance.json`` (what is known only once the
    run has made its env)."""
    path = Path(run_dir) / FILE_NAME
    records = json.loads(path.read_text()) if path.exists() else [{}]
    records[-1].update(fields)
    _write(path, records)


def cpu_has_native_bf16() -> bool:
    """Whether the CPU multiplies bfloat16 in hardware (AVX-512 BF16 or AMX); without it torch emulates
    bf16 matrix products, many times slower than float32 (about 45x on an AVX2-only EPYC)."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return False
    return any(flag in flags.split() for flag in ("avx512_bf16", "amx_bf16"))


def describe(repo: Path, device: str = "cpu") -> dict[str, Any]:
    """One record: time, commit, Python and package versions, CPU model, identity and cores, threads,
    load, device."""
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
        "cpu_identity": cpu_identity(),
        "threads": threads(),
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
    _write(path, records)


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(records, indent=2))
    os.replace(tmp, path)
