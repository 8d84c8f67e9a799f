"""Run untrusted Python (written by a model) in a contained child process.

Layers, from the kernel up (each one is there because the one above can be bypassed):

1. A separate process in its own session, killed with its whole group at a wall-clock limit.
2. ``setrlimit`` in the child: CPU seconds, address space (memory), size of any file written
   (which also caps the captured output: stdout/stderr go to a file), open files, no core dumps,
   and ``RLIMIT_NPROC = 0`` so it cannot fork or start threads.
3. When run as root: fresh network and mount namespaces (``unshare --net --mount``: no
   interface but a down loopback, so no connection can be made; every mount remounted
   read-only and a size-capped tmpfs as the work directory, so the kernel itself allows writes
   there only and bounds their total) and, after the limits are set, a switch to the
   unprivileged ``nobody`` user, so the kernel enforces the process limit and ordinary file
   permissions (root ignores both).
4. Inside the interpreter (``python -I``: no ``PYTHON*`` variables, no user site, no cwd on the
   path), a ``sys.addaudithook`` hook installed before the code runs refuses: opening files for
   writing outside the temporary directory, reading outside it and the Python installation,
   creating sockets, starting processes (``subprocess``, ``os.system``, ``exec*``, ``fork``,
   ``posix_spawn``), sending signals, and importing ``ctypes``/``cffi``/``mmap``.
5. A scrubbed environment (``PATH``, ``HOME`` and ``TMPDIR`` pointing to the fresh temporary
   directory, ``LANG``, single-threaded BLAS): no secrets or tokens are inherited.

Honest limits: the audit hook lives in the same interpreter as the code, so code that finds
and rewrites it (through ``gc``, which is therefore not importable, or a CPython
memory-corruption bug) escapes that layer; layers 1-3 remain, and as root they alone already
stop writes, processes and network. Reads of world-readable host files (``/etc/passwd``) are
then possible. Without root (no namespaces, no uid switch) the network and file-system rules
rest on the hook alone, the process rule on ``RLIMIT_NPROC`` (per user, so it still holds),
and disk use on the per-file limit times the CPU time. This is a sandbox for model mistakes and
mischief during RL, not a boundary against a targeted exploit: for that, run the whole trainer
in a container or VM.

Because ``nobody`` may be unable to read the interpreter's files (a Python under ``/root``),
the child imports the modules in ``SandboxLimits.preload`` before it drops privileges.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

NOBODY_UID = NOBODY_GID = 65534
DEFAULT_PRELOAD = (
    "math",
    "cmath",
    "fractions",
    "decimal",
    "statistics",
    "itertools",
    "functools",
    "collections",
    "heapq",
    "bisect",
    "random",
    "re",
    "string",
    "json",
    "datetime",
    "operator",
    "numbers",
)


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one run.

    Attributes:
        cpu_seconds: CPU time before SIGXCPU (then SIGKILL one second later).
        wall_seconds: Wall-clock time before the process group is killed (sleeps use no CPU).
        memory_bytes: Address-space limit (``RLIMIT_AS``).
        file_bytes: Largest file the code may write, its captured output included.
        output_chars: Characters of output returned to the caller (the rest is cut, and said so).
        open_files: Maximum open file descriptors.
        preload: Modules imported before privileges drop (imports of other modules may fail).
        tmpfs_bytes: Size of the tmpfs mounted as the work directory when running as root (caps
            the total written to disk; without root only the per-file limit applies).
        audit_hook: Install the interpreter-level hook. Turn off only to test that the kernel
            layers hold on their own.
    """

    cpu_seconds: int = 3
    wall_seconds: float = 10.0
    memory_bytes: int = 1 << 30
    file_bytes: int = 8 << 20
    output_chars: int = 8000
    open_files: int = 64
    tmpfs_bytes: int = 64 << 20
    audit_hook: bool = True
    preload: tuple[str, ...] = field(
        default_factory=lambda: DEFAULT_PRELOAD + (("numpy",) if importlib.util.find_spec("numpy") else ())
    )


@dataclass
class SandboxResult:
    """What a run produced; ``output`` is stdout and stderr interleaved, cut to ``output_chars``."""

    output: str
    exit_code: int | None
    timed_out: bool
    killed_reason: str | None
    output_truncated: bool
    seconds: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.killed_reason is None

    def to_text(self) -> str:
        """The result as the model should see it."""
        parts = [self.output.rstrip("\n")] if self.output.strip() else []
        if self.output_truncated:
            parts.append("[output truncated]")
        if self.killed_reason:
            parts.append(f"[killed: {self.killed_reason}]")
        elif self.exit_code:
            parts.append(f"[exit code {self.exit_code}]")
        return "\n".join(parts) if parts else "[no output]"


# The trusted part of the child: set limits, drop privileges, install the audit hook, run the code.
_RUNNER = r"""
import json, os, resource, sys
config = json.loads(sys.argv[1])
work = config["workdir"]
os.chdir(work)
code = open(os.path.join(work, "main.py"), encoding="utf-8").read()
if config["tmpfs_bytes"] and os.geteuid() == 0:
    # In the private mount namespace (unshare --mount) only: every mount becomes read-only, then a
    # size-capped tmpfs over the work directory is the one writable place. The host's mounts
    # are untouched, and descriptors opened before (the output file) keep writing.
    import subprocess
    script = ('for m in $(cut -d" " -f2 /proc/self/mounts | sort -u); do mount -o remount,bind,ro "$m" 2>/dev/null; done; '
              'mount -t tmpfs -o "size=$2,mode=0700,uid=$3,gid=$3" tmpfs "$1"')
    subprocess.run(["/bin/sh", "-c", script, "sh", work, str(config["tmpfs_bytes"]), str(config["uid"])], check=True)
    os.chdir(work)
for name in config["preload"]:
    try:
        __import__(name)
    except Exception:
        pass
def limit(kind, soft, hard=None):
    resource.setrlimit(kind, (soft, soft if hard is None else hard))
limit(resource.RLIMIT_CPU, config["cpu_seconds"], config["cpu_seconds"] + 1)
limit(resource.RLIMIT_AS, config["memory_bytes"])
limit(resource.RLIMIT_FSIZE, config["file_bytes"])
limit(resource.RLIMIT_NOFILE, config["open_files"])
limit(resource.RLIMIT_CORE, 0)
if os.geteuid() == 0:
    os.setgroups([])
    os.setgid(config["gid"])
    os.setuid(config["uid"])
limit(resource.RLIMIT_NPROC, 0)

def _install(work, read_roots):
    import os as _os, sys as _sys
    realpath, sep, fsdecode = _os.path.realpath, _os.sep, _os.fsdecode
    write_flags = _os.O_WRONLY | _os.O_RDWR | _os.O_CREAT | _os.O_APPEND | _os.O_TRUNC
    work = realpath(work)
    read_roots = tuple(realpath(r) for r in read_roots) + (work,)
    denied = frozenset({
        "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
        "os.kill", "os.killpg", "signal.pthread_kill", "pty.spawn", "socket.__new__", "socket.connect", "socket.bind",
        "socket.getaddrinfo", "socket.gethostbyname", "socket.sendto", "ctypes.dlopen", "ctypes.dlsym",
        "ctypes.call_function", "os.startfile", "winreg.OpenKey", "sys.remote_exec", "os.setuid", "os.chroot",
    })
    # gc could reach the hook's closure and rewrite it; the others load or map native code.
    blocked_modules = frozenset({"ctypes", "_ctypes", "cffi", "_cffi_backend", "mmap", "_posixsubprocess", "gc"})
    write_events = frozenset({"os.remove", "os.rename", "os.replace", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
                              "os.symlink", "os.link", "os.truncate", "os.utime", "os.chflags", "os.lchflags",
                              "os.setxattr", "os.removexattr", "shutil.rmtree", "shutil.move", "shutil.copyfile"})
    read_events = frozenset({"os.listdir", "os.scandir", "os.chdir", "glob.glob", "os.walk"})

    def inside(path, roots):
        if isinstance(path, int) or path is None:
            return True  # an already open descriptor: it was checked when opened
        try:
            p = realpath(fsdecode(path))
        except Exception:
            return False
        return any(p == r or p.startswith(r + sep) for r in roots)

    def hook(event, args):
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = isinstance(mode, str) and any(c in mode for c in "wax+")
            writing = writing or (isinstance(flags, int) and flags & write_flags)
            if not inside(path, (work,) if writing else read_roots):
                raise PermissionError(f"sandbox: {'writing' if writing else 'reading'} {path!r} is not allowed")
        elif event in denied:
            raise PermissionError(f"sandbox: {event} is not allowed")
        elif event == "import" and args and str(args[0]).split(".")[0] in blocked_modules:
            raise ImportError(f"sandbox: importing {args[0]} is not allowed")
        elif event in write_events:
            for path in args[:2]:
                if isinstance(path, (str, bytes, os.PathLike)) and not inside(path, (work,)):
                    raise PermissionError(f"sandbox: {event} on {path!r} is not allowed")
        elif event in read_events and args and isinstance(args[0], (str, bytes, os.PathLike)):
            if not inside(args[0], read_roots):
                raise PermissionError(f"sandbox: {event} on {args[0]!r} is not allowed")
    _sys.addaudithook(hook)

for name in ("gc", "ctypes", "_ctypes"):  # imports served from sys.modules raise no audit event
    sys.modules.pop(name, None)
if config["audit_hook"]:
    _install(work, [sys.prefix, sys.base_prefix, sys.exec_prefix])
del _install, limit, config
sys.argv = ["main.py"]
exec(compile(code, "main.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
"""


@functools.lru_cache(maxsize=1)
def namespaces_available() -> bool:
    """Whether ``unshare --net --mount`` works here (as root it usually does; in some containers not)."""
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "--net", "--mount", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


class PythonSandbox:
    """Runs code strings; each run gets a fresh temporary directory, removed afterwards.

    Args:
        limits: Resource limits (defaults: 3 s CPU, 10 s wall, 1 GiB memory, 8000 output characters).
        python: Interpreter to run; defaults to the current one (so installed packages are available).
    """

    def __init__(self, limits: SandboxLimits | None = None, python: str | None = None) -> None:
        self.limits = limits or SandboxLimits()
        self.python = python or sys.executable
        self.is_root = os.geteuid() == 0
        self.uses_namespaces = self.is_root and namespaces_available()

    def _environment(self, workdir: str) -> dict[str, str]:
        return {
            "PATH": "/usr/bin:/bin",
            "HOME": workdir,
            "TMPDIR": workdir,
            "LANG": "C.UTF-8",
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }

    def run(self, code: str) -> SandboxResult:
        """Execute ``code`` as a script; never raises for anything the code does."""
        limits = self.limits
        private = tempfile.mkdtemp(prefix="envs-text-sandbox-")  # holds the output file, unreachable by the code
        workdir = os.path.join(private, "work")
        os.mkdir(workdir, 0o700)
        os.chmod(private, 0o711)  # nobody may traverse to workdir but not list or touch the output file
        try:
            with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8") as f:
                f.write(code)
            if self.is_root:
                os.chown(workdir, NOBODY_UID, NOBODY_GID)
            config = {
                "workdir": workdir,
                "cpu_seconds": limits.cpu_seconds,
                "memory_bytes": limits.memory_bytes,
                "file_bytes": limits.file_bytes,
                "open_files": limits.open_files,
                "preload": list(limits.preload),
                "uid": NOBODY_UID,
                "gid": NOBODY_GID,
                "audit_hook": limits.audit_hook,
                "tmpfs_bytes": limits.tmpfs_bytes if self.uses_namespaces else 0,
            }
            command = [self.python, "-I", "-c", _RUNNER, json.dumps(config)]
            if self.uses_namespaces:
                command = ["unshare", "--net", "--mount", "--"] + command
            output_path = os.path.join(private, "output.txt")
            start = time.monotonic()
            with open(output_path, "wb") as output_file:
                process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=output_file,
                    stderr=subprocess.STDOUT,
                    cwd=workdir,
                    env=self._environment(workdir),
                    start_new_session=True,
                    close_fds=True,
                )
                timed_out = False
                try:
                    process.wait(timeout=limits.wall_seconds)
                except subprocess.TimeoutExpired:
                    timed_out = True
                _kill_group(process)  # nothing of the run may outlive it
                process.wait()
            seconds = time.monotonic() - start
            with open(output_path, "rb") as f:
                raw = f.read(limits.output_chars * 4 + 1)
            text = raw.decode("utf-8", errors="replace")
            truncated = len(text) > limits.output_chars or os.path.getsize(output_path) > len(raw)
            code_ = process.returncode
            reason = None
            if timed_out:
                reason = f"wall-clock limit of {limits.wall_seconds:g} s"
            elif code_ in (-signal.SIGXCPU, -signal.SIGKILL):
                reason = f"CPU time limit of {limits.cpu_seconds} s"
            elif code_ == -signal.SIGXFSZ:
                reason = "output or file size limit"
            elif code_ is not None and code_ < 0:
                reason = f"signal {-code_}"
            return SandboxResult(
                output=text[: limits.output_chars],
                exit_code=code_,
                timed_out=timed_out,
                killed_reason=reason,
                output_truncated=truncated,
                seconds=seconds,
            )
        finally:
            shutil.rmtree(private, ignore_errors=True)
