"""Run untrusted Python (written by a model) in a child process that the kernel confines.

Every rule is enforced by the kernel, for a root and a non-root caller alike; the layers below
need no privilege, only a kernel that has them (Linux 5.13 or later with Landlock enabled,
unprivileged user namespaces allowed, libseccomp installed):

1. **Process.** A child in its own session, killed with its group at a wall-clock limit; it
   also dies with the host process (``PR_SET_PDEATHSIG``).
2. **Resource limits** (``setrlimit``): CPU seconds, address space, size of any file written
   (which also caps the captured output), open files, no core dumps, ``RLIMIT_NPROC = 0``.
3. **Credentials.** A root caller first becomes ``nobody``: ordinary file permissions apply.
4. **Namespaces** (a user namespace, so no privilege is needed): a network namespace with only
   a loopback that is down; a mount namespace whose root (``pivot_root``, the host's root
   detached) is a read-only tmpfs holding only the allowed trees, bound read-only at their own
   paths, ``/dev/null`` and a size-capped tmpfs as the work directory, so that every other path
   does not exist for the code, for the calls Landlock does not check too (``stat``, ``access``,
   ``readlink``, extended attributes, inotify); a PID namespace in which the code is process 1
   and alone, with no ``/proc``; and IPC and UTS namespaces. Every capability is dropped once
   they are set up.
5. **Landlock** (filesystem rules that no later code can lift): the Python installation and the
   shared libraries are readable, the work directory is the one writable (and readable) place,
   ``/dev/null`` is usable; nothing else can be opened, created, linked or removed. This holds
   for paths reached through directory descriptors, symbolic links or ``/proc`` alike, since the
   kernel checks the file that is finally opened.
6. **seccomp-bpf** under ``no_new_privs`` (``pyseccomp``, bindings to libseccomp): the system
   calls that create processes or threads (``fork``, ``clone``, ``clone3``, ``execve``...),
   send signals (``kill``, ``tgkill``, ``pidfd_*``...), make sockets, change namespaces or
   mounts, trace or read other processes, load kernel code (``bpf``, modules), bypass the
   filter (``io_uring``), hold memory outside ``RLIMIT_AS`` (``memfd_create``, System V IPC),
   watch files (inotify) or edit x86 segment descriptors (``modify_ldt``) fail with ``EPERM``;
   reading extended attributes fails with ``ENOTSUP``.
7. **An audit hook** in the interpreter (``sys.addaudithook``): a convenience, not a boundary.
   It turns refusals into readable errors before the kernel is asked. Code can disable it (for
   example by reaching ctypes through a module that imported it, then rewriting the hook's code
   object); the runner removes the modules it used itself (ctypes and its submodules, pyseccomp,
   landlock) from ``sys.modules``, but a preloaded module may hold ctypes too. The boundary is the
   kernel's: seccomp, Landlock, the namespaces and the resource limits, which the tests show
   holding with the hook off.

``PythonSandbox`` checks the layers once per interpreter (a probe run) and refuses to start,
naming each missing layer and its fix, unless the caller accepts weaker isolation explicitly
with ``SandboxLimits(allow_missing_layers=(...))``. What the sandbox does not protect against is
written in ``docs/text_envs.md`` (threat model).

Each ``PythonSandbox`` keeps its temporary files in one directory, locked with ``flock`` while the
sandbox lives; a new sandbox removes the directories of sandboxes whose process died (the kernel
released their lock), so a killed trainer leaves nothing behind past the next start.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import fcntl
import functools
import glob
import importlib.util
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

NOBODY_UID = NOBODY_GID = 65534
LAYERS = ("namespaces", "landlock", "seccomp")
# What to do about each missing layer (shown in the error that refuses to start).
LAYER_FIXES = {
    "namespaces": (
        "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, or on Ubuntu "
        "kernel.apparmor_restrict_unprivileged_userns=0; in Docker run with --security-opt seccomp=unconfined)"
    ),
    "landlock": "use Linux 5.13 or later with Landlock enabled (CONFIG_LSM must list landlock)",
    "seccomp": "install libseccomp (apt-get install libseccomp2) and pyseccomp (pip install -e '.[sandbox]')",
}
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
TEMP_PREFIX = "envs-text-sandbox-"
# A directory without a lock file is a sandbox that died while creating it, or not ours yet.
UNLOCKED_DIR_GRACE_SECONDS = 3600


class SandboxUnavailableError(RuntimeError):
    """The kernel lacks a layer of the sandbox and the caller did not accept running without it."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits and isolation settings of one run.

    Attributes:
        cpu_seconds: CPU time before the kernel kills the code (SIGKILL).
        wall_seconds: Wall-clock time before the process group is killed (sleeps use no CPU).
        memory_bytes: Address-space limit (``RLIMIT_AS``).
        file_bytes: Largest file the code may write, its captured output included.
        output_chars: Characters of output returned to the caller (the rest is cut, and said so).
        open_files: Maximum open file descriptors.
        tmpfs_bytes: Size of the tmpfs that is the work directory (caps the total written).
        preload: Modules imported before the sandbox closes. Any module of the Python installation
            can be imported later too, except when the caller is root: the code runs as
            ``nobody``, who may be unable to read an installation under ``/root``.
        audit_hook: Install the interpreter-level hook that explains refusals in plain words.
            A convenience, not a boundary: code can disable it, and the kernel layers enforce
            every rule without it. Turn off only to show that they hold on their own (the tests do).
        allow_missing_layers: Layers (of ``namespaces``, ``landlock``, ``seccomp``) the caller
            accepts to run without when the kernel lacks them. Empty (the default): a missing
            layer makes ``PythonSandbox`` refuse to start. Naming a layer here weakens the
            isolation on such kernels; see the threat model in ``docs/text_envs.md``.
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
    allow_missing_layers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.allow_missing_layers) - set(LAYERS))
        if unknown:
            raise ValueError(f"allow_missing_layers: unknown layer(s) {unknown}; the layers are {list(LAYERS)}")
        if self.cpu_seconds < 1:
            raise ValueError(f"cpu_seconds must be >= 1 (a whole number of seconds), got {self.cpu_seconds}")
        if self.output_chars < 1:
            raise ValueError(f"output_chars must be >= 1 (characters of output returned), got {self.output_chars}")


@dataclass
class SandboxResult:
    """What a run produced; ``output`` is stdout and stderr interleaved, cut to ``output_chars``.

    ``not_run`` says why the code was not started (invalid text, time budget spent, the sandbox
    could not be set up); then ``output`` is empty and ``exit_code`` None.
    """

    output: str
    exit_code: int | None
    timed_out: bool
    killed_reason: str | None
    output_truncated: bool
    seconds: float
    not_run: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.killed_reason is None and self.not_run is None

    def to_text(self) -> str:
        """The result as the model should see it."""
        if self.not_run:
            return f"[not run: {self.not_run}]"
        parts = [self.output.rstrip("\n")] if self.output.strip() else []
        if self.output_truncated:
            parts.append("[output truncated]")
        if self.killed_reason:
            parts.append(f"[killed: {self.killed_reason}]")
        elif self.exit_code:
            parts.append(f"[exit code {self.exit_code}]")
        return "\n".join(parts) if parts else "[no output]"

    @classmethod
    def refused(cls, reason: str) -> SandboxResult:
        return cls(output="", exit_code=None, timed_out=False, killed_reason=None, output_truncated=False, seconds=0.0,
                   not_run=reason)  # fmt: skip


# The trusted part of the child: it reads the code, closes the sandbox around itself, then runs
# the code. It reports on the status descriptor: "missing LAYER: why" for a layer it ran without
# (allowed by the caller), "failed LAYER: why" when it stops, "ready" just before the code runs.
_RUNNER = r"""
import ctypes, errno, json, os, resource, signal, sys
config = json.loads(sys.argv[1])
status = os.fdopen(config["status_fd"], "w", buffering=1)
work = config["workdir"]
allowed_missing = set(config["allow_missing"])

def give_up(layer, error):
    status.write(f"failed {layer}: {error}\n")
    os._exit(125)

def layer_missing(layer, error):
    if layer not in allowed_missing:
        give_up(layer, error)
    status.write(f"missing {layer}: {error}\n")

os.chdir(work)
with open("main.py", encoding="utf-8") as f:
    code = f.read()
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
for name in config["preload"]:
    try:
        __import__(name)
    except Exception:
        pass
# ctypes.util.find_library runs ldconfig; the host looked the libraries up once for every run.
import ctypes.util
_libraries = config["libraries"]
ctypes.util.find_library = lambda name, _find=ctypes.util.find_library: _libraries.get(name) or _find(name)
def import_failed(name, error):  # the package is missing or unreadable: no statement about the kernel
    return f"cannot import {name}: {type(error).__name__}: {error}"
try:
    import pyseccomp
except ImportError as error:
    pyseccomp, seccomp_error = None, import_failed("pyseccomp", error)
except Exception as error:
    pyseccomp, seccomp_error = None, f"pyseccomp unusable: {error}"
try:
    import landlock
except ImportError as error:
    landlock, landlock_error = None, import_failed("landlock", error)
else:
    try:
        landlock_error = None if landlock.landlock_abi_version() >= 1 else "no Landlock ABI"
    except Exception as error:
        landlock, landlock_error = None, f"{type(error).__name__}: {error}"
libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 1, 24, 47, 4

def checked(result, what):
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")

class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]

def build_root(trees, tmpfs_bytes):
    # The code's root is a read-only tmpfs holding only the allowed trees, each bound read-only at
    # its own path, /dev/null and the work tmpfs. Any other path does not exist for it: stat,
    # access, readlink, extended attributes and inotify, which Landlock does not check, find nothing.
    numbers = config["syscall_numbers"]
    if numbers is None:
        raise OSError(errno.ENOSYS, f"pivot_root and mount_setattr numbers unknown on {os.uname().machine}")
    MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE, MNT_DETACH = 2, 4, 4096, 16384, 1 << 18, 2
    MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, AT_RECURSIVE, AT_FDCWD = 1, 2, 0x8000, ctypes.c_long(-100)
    def set_attributes(path, attributes, flags):
        attr = _MountAttr(attributes, 0, 0, 0)
        result = libc.syscall(numbers["mount_setattr"], AT_FDCWD, path, flags, ctypes.byref(attr), ctypes.sizeof(attr))
        checked(result, f"making {path!r} read-only")
    def mount_point(path, directory):
        target = root + path
        os.makedirs(target if directory else os.path.dirname(target), exist_ok=True)
        if not directory:
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
        return target.encode()
    checked(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making mounts private")
    root = work  # an empty mount point once main.py, read above, is covered
    options = f"size=1m,mode=0755,uid={uid},gid={gid}".encode()
    checked(libc.mount(b"tmpfs", root.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options), "mounting the new root")
    for path, link in trees["links"]:  # e.g. /lib -> usr/lib: the link, its target bound below
        os.makedirs(os.path.dirname(root + path), exist_ok=True)
        os.symlink(link, root + path)
    for path in trees["binds"]:
        if not os.path.exists(path):
            continue  # out of this user's reach (a root caller's Python under /root): only the preloaded modules
        target = mount_point(path, os.path.isdir(path))
        checked(libc.mount(path.encode(), target, None, MS_BIND | MS_REC, None), f"binding {path!r}")
        set_attributes(target, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, AT_RECURSIVE)
    checked(libc.mount(b"/dev/null", mount_point("/dev/null", False), None, MS_BIND, None), "binding /dev/null")
    options = f"size={tmpfs_bytes},mode=0700,uid={uid},gid={gid}".encode()
    checked(libc.mount(b"tmpfs", mount_point(work, True), b"tmpfs", MS_NOSUID | MS_NODEV, options), "mounting the work tmpfs")
    set_attributes(root.encode(), MOUNT_ATTR_RDONLY, 0)  # the root itself: no file outside the work directory
    os.chdir(root)
    checked(libc.syscall(numbers["pivot_root"], b".", b"."), "pivot_root")  # the host's root now lies over the new one
    checked(libc.umount2(b".", MNT_DETACH), "detaching the host's root")
    os.chdir(work)

host = os.getppid()
if os.geteuid() == 0:  # root ignores file permissions and owns most host files: become nobody first
    os.setgroups([])
    os.setresgid(config["nobody_gid"], config["nobody_gid"], config["nobody_gid"])
    os.setresuid(config["nobody_uid"], config["nobody_uid"], config["nobody_uid"])
uid, gid = os.geteuid(), os.getegid()

namespaces = False
try:
    # user, mount, network, PID, IPC, UTS
    libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: a uid change cleared it, and /proc/self must be ours to write the maps
    checked(libc.unshare(0x10000000 | 0x00020000 | 0x40000000 | 0x20000000 | 0x08000000 | 0x04000000), "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    libc.prctl(4, 0, 0, 0, 0)
    namespaces = True
except OSError as error:
    layer_missing("namespaces", error)
checked(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")  # set after the credential changes, which clear it
if os.getppid() != host:
    os._exit(125)
if namespaces:
    # The new PID namespace takes effect for the next child: it is process 1 there; this process
    # stays outside, waits, and passes its end on (a signal as a signal).
    child = os.fork()
    if child:
        status.close()
        _, wait_status = os.waitpid(child, 0)
        if os.WIFSIGNALED(wait_status):
            if os.WTERMSIG(wait_status) not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(os.WTERMSIG(wait_status), signal.SIG_DFL)
            os.kill(os.getpid(), os.WTERMSIG(wait_status))
        os._exit(os.waitstatus_to_exitcode(wait_status))
    checked(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
    try:
        build_root(config["root_trees"], config["tmpfs_bytes"])
    except OSError as error:
        layer_missing("namespaces", error)

limit = lambda kind, value: resource.setrlimit(kind, (value, value))
limit(resource.RLIMIT_CPU, config["cpu_seconds"])  # soft = hard: SIGKILL, which even process 1 cannot ignore
limit(resource.RLIMIT_AS, config["memory_bytes"])
limit(resource.RLIMIT_FSIZE, config["file_bytes"])
limit(resource.RLIMIT_NOFILE, config["open_files"])
limit(resource.RLIMIT_NPROC, 0)

if landlock is None:
    layer_missing("landlock", landlock_error)
else:
    try:
        FS = landlock.FSAccess
        ctypes.set_errno(0)  # the package reads errno to detect failure
        ruleset = landlock.Ruleset()  # handles every access right this kernel knows: all denied unless allowed
        read = FS.READ_FILE | FS.READ_DIR
        for path in config["root_trees"]["binds"]:
            if os.path.isdir(path):
                ruleset.allow(path, rules=read & ruleset.restrict_rules)
            elif os.path.exists(path):
                ruleset.allow(path, rules=FS.READ_FILE)
        work_rules = read | FS.WRITE_FILE | FS.REMOVE_DIR | FS.REMOVE_FILE | FS.MAKE_DIR | FS.MAKE_REG | FS.MAKE_SYM
        work_rules |= ruleset.restrict_rules & (FS.TRUNCATE | FS.REFER)
        ruleset.allow(work, rules=work_rules & ruleset.restrict_rules)
        ruleset.allow("/dev/null", rules=FS.READ_FILE | FS.WRITE_FILE)
        ctypes.set_errno(0)
        ruleset.apply()  # sets no_new_privs too
    except Exception as error:
        layer_missing("landlock", f"{type(error).__name__}: {error}")

if namespaces:  # the capabilities the user namespace gave are no longer needed
    class _Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
    class _Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    checked(libc.capset(ctypes.byref(_Header(0x20080522, 0)), (_Data * 2)()), "dropping capabilities")

if pyseccomp is None:
    layer_missing("seccomp", seccomp_error)
else:
    try:
        seccomp = pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)
        newer = config["newer_syscalls"]
        for answer, names in ((errno.EPERM, config["denied_syscalls"]), (errno.ENOTSUP, config["unsupported_syscalls"])):
            for name in names:
                number = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)
                if number < 0:
                    number = newer.get(name, -1)  # newer than this libseccomp: by number, where known
                if number < 0:
                    continue  # a system call this architecture does not have
                seccomp.add_rule(pyseccomp.ERRNO(answer), number)
        seccomp.load()  # under no_new_privs (libseccomp sets it)
        del seccomp  # frees libseccomp's copy now (the kernel keeps the filter), not in an atexit finalizer
    except Exception as error:
        layer_missing("seccomp", f"{type(error).__name__}: {error}")

status.write("ready\n")
status.close()
if config["probe"]:
    os._exit(0)
_runner_only = ("gc", "ctypes", "_ctypes", "_posixsubprocess", "pyseccomp", "landlock")
for name in list(sys.modules):  # an import served from sys.modules raises no audit event
    top = name.partition(".")[0]
    if config["audit_hook"] and top in _runner_only and top not in config["preload"]:
        del sys.modules[name]  # submodules too: ctypes._endian holds all of ctypes' names

def _install(work, read_roots, isinstance=isinstance, any=any, str=str, tuple=tuple, PermissionError=PermissionError,
             ImportError=ImportError, Exception=Exception):
    # Only explains refusals early: the kernel enforces the same rules (builtins bound here, so
    # that replacing them changes nothing of what the hook says).
    import os as _os, sys as _sys
    realpath, sep, fsdecode, PathLike = _os.path.realpath, _os.sep, _os.fsdecode, _os.PathLike
    write_flags = _os.O_WRONLY | _os.O_RDWR | _os.O_CREAT | _os.O_APPEND | _os.O_TRUNC
    work = realpath(work)
    read_roots = tuple(realpath(r) for r in read_roots) + (work, "/dev/null")
    denied = frozenset({
        "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
        "os.kill", "os.killpg", "signal.pthread_kill", "pty.spawn", "socket.__new__", "socket.connect", "socket.bind",
        "socket.getaddrinfo", "socket.gethostbyname", "socket.sendto", "ctypes.dlopen", "ctypes.dlsym",
        "ctypes.call_function", "os.startfile", "winreg.OpenKey", "sys.remote_exec", "os.setuid", "os.chroot",
        "_thread.start_new_thread", "os.mkfifo", "os.mknod",
    })
    blocked_modules = frozenset({"ctypes", "_ctypes", "cffi", "_cffi_backend", "mmap", "_posixsubprocess", "gc"})
    write_events = frozenset({"os.remove", "os.rename", "os.replace", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
                              "os.symlink", "os.link", "os.truncate", "os.utime", "os.chflags", "os.lchflags",
                              "os.setxattr", "os.removexattr", "shutil.rmtree", "shutil.move", "shutil.copyfile"})
    read_events = frozenset({"os.listdir", "os.scandir", "os.chdir", "glob.glob", "os.walk", "sqlite3.connect"})

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
                if isinstance(path, (str, bytes, PathLike)) and not inside(path, (work,)):
                    raise PermissionError(f"sandbox: {event} on {path!r} is not allowed")
        elif event in read_events and args and isinstance(args[0], (str, bytes, PathLike)):
            if not inside(args[0], read_roots):
                raise PermissionError(f"sandbox: {event} on {args[0]!r} is not allowed")
    _sys.addaudithook(hook)

if config["audit_hook"]:
    _install(work, config["read_roots"])
for name in ("_install", "limit", "config", "status", "libc", "checked", "pyseccomp", "landlock", "ctypes", "build_root",
             "_MountAttr", "_Header", "_Data", "import_failed"):
    globals().pop(name, None)
sys.argv = ["main.py"]
exec(compile(code, "main.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
"""

# EPERM for these, whatever the arguments. Process and thread creation, signals to any process,
# sockets, namespaces and mounts, other processes' memory, kernel code and key stores, io_uring
# (whose operations seccomp cannot see), device nodes and FIFOs, file handles (which bypass path
# checks), metadata changes (modes, owners, times, extended attributes: Landlock does not cover
# them), sessions and process groups (leaving the group the host kills), time and host names,
# x86 segment descriptors (modify_ldt), memory that RLIMIT_AS does not count (memfd pages are
# counted only while mapped; System V segments and queues outlive their mappings), and watching
# files (inotify, fanotify).
DENIED_SYSCALLS = (
    "fork", "vfork", "clone", "clone3", "execve", "execveat",
    "kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open", "pidfd_send_signal",
    "pidfd_getfd",
    "socket", "socketpair",
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr",
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp",
    "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key", "init_module", "finit_module",
    "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "quotactl",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "mknod", "mknodat", "name_to_handle_at", "open_by_handle_at",
    "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat", "utime", "utimes",
    "utimensat", "futimesat", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
    "setsid", "setpgid",
    "personality", "syslog", "iopl", "ioperm", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "sethostname", "setdomainname", "vhangup", "uselib", "lookup_dcookie", "nfsservctl",
    "modify_ldt",
    "memfd_create", "memfd_secret", "shmget", "shmat", "shmdt", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl",
    "semget", "semop", "semtimedop", "semctl", "ipc",
    "inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init", "fanotify_mark",
    "setxattrat", "removexattrat", "file_setattr",
)  # fmt: skip
# ENOTSUP for reading extended attributes, as a filesystem without them answers (shutil.copy2
# and copystat expect that). The mount namespace already hides every file outside the allowed
# trees; this keeps attribute values out of reach where the caller accepted running without it.
UNSUPPORTED_SYSCALLS = ("getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr", "getxattrat",
                        "listxattrat")  # fmt: skip
# Calls newer than some libseccomp releases, by number: the same on x86_64 and the
# asm-generic table (aarch64, riscv64) for every call added since Linux 5.1.
NEWER_SYSCALLS = {"setxattrat": 463, "getxattrat": 464, "listxattrat": 465, "removexattrat": 466, "file_setattr": 469}
UNIFIED_SYSCALL_TABLES = ("x86_64", "aarch64", "riscv64")
# What building the code's root calls, by number (glibc has no pivot_root wrapper).
ROOT_SYSCALLS = {"x86_64": {"pivot_root": 155, "mount_setattr": 442}, "aarch64": {"pivot_root": 41, "mount_setattr": 442},
                 "riscv64": {"pivot_root": 41, "mount_setattr": 442}}  # fmt: skip
# Shared libraries that extension modules load lazily (read-only, like the installation).
LIBRARY_PATHS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/etc/ld.so.cache", "/dev/urandom")


@functools.cache
def _python_installation(python: str) -> tuple[str, ...]:
    """Directories of ``python``'s installation: its prefixes and its site-packages (not the
    current directory or an editable project on its path)."""
    script = (
        "import json, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]"
        " + [p for p in sys.path if 'site-packages' in p or 'dist-packages' in p]))"
    )
    out = subprocess.run([python, "-I", "-c", script], capture_output=True, text=True, timeout=60, check=True).stdout
    roots = []
    for path in json.loads(out):
        real = os.path.realpath(path)
        if os.path.exists(real) and real not in roots:
            roots.append(real)
    return tuple(roots)


def _root_trees(read_roots: tuple[str, ...]) -> dict[str, list]:
    """What the code's root holds: ``binds``, the real paths of the readable trees and files,
    each once (a tree inside another comes with it), and ``links``, ``(path, target)`` for a root
    that is itself a symbolic link (``/lib -> usr/lib``) in a directory that is not one."""
    real_paths, links = [], []
    for path in read_roots:
        if os.path.islink(path) and os.path.realpath(os.path.dirname(path)) == os.path.dirname(path):
            links.append((path, os.readlink(path)))
        real = os.path.realpath(path)
        if os.path.exists(real):
            real_paths.append(real)
    binds: list[str] = []
    for path in sorted(set(real_paths)):  # a parent sorts before its children
        if not any(path.startswith(tree.rstrip("/") + "/") for tree in binds):
            binds.append(path)
    return {"binds": binds, "links": links}


@functools.lru_cache(maxsize=1)
def _libraries() -> dict[str, str]:
    return {name: found for name in ("c", "seccomp") if (found := ctypes.util.find_library(name))}


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _invalid_code(code: object) -> str | None:
    """Why ``code`` cannot be a Python source file, or None; said so that a model can fix it."""
    if not isinstance(code, str):
        return f"the code must be a string, got {type(code).__name__}"
    try:
        code.encode("utf-8")
    except UnicodeEncodeError as error:
        return (
            f"the code is not valid Unicode text: {code[error.start]!r} at character {error.start} is a lone "
            "surrogate; write such characters as escapes inside string literals"
        )
    if "\0" in code:
        return f"the code contains a NUL character at position {code.index(chr(0))}; write it as '\\0' in a string literal"
    return None


def _directory_is_ours(path: str) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return info.st_uid == os.geteuid() and not os.path.islink(path) and os.path.isdir(path)


def remove_stale_directories(parent: str | None = None) -> list[str]:
    """Remove the temporary directories of sandboxes whose process died; return their paths.

    A live sandbox holds an ``flock`` on its directory's ``lock`` file, which the kernel releases
    when the process dies, however it dies. Only directories owned by this user are touched.
    """
    removed = []
    for path in glob.glob(os.path.join(parent or tempfile.gettempdir(), TEMP_PREFIX + "*")):
        if not _directory_is_ours(path):
            continue
        lock_path = os.path.join(path, "lock")
        try:
            fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            if time.time() - os.lstat(path).st_mtime > UNLOCKED_DIR_GRACE_SECONDS:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)  # a live sandbox
            continue
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)
        removed.append(path)
    return removed


def _release(directory: str, lock_fd: int) -> None:
    shutil.rmtree(directory, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.close(lock_fd)


class PythonSandbox:
    """Runs code strings; each run gets a fresh work directory, removed afterwards.

    Args:
        limits: Resource limits and isolation settings (defaults: 3 s CPU, 10 s wall, 1 GiB
            memory, 8000 output characters, every kernel layer required).
        python: Interpreter to run; defaults to the current one (so installed packages are available).

    Raises:
        SandboxUnavailableError: the kernel lacks a layer that ``limits.allow_missing_layers``
            does not name. ``missing_layers`` lists those run without.
    """

    def __init__(self, limits: SandboxLimits | None = None, python: str | None = None) -> None:
        self.limits = limits or SandboxLimits()
        self.python = python or sys.executable
        self.is_root = os.geteuid() == 0
        self.read_roots = _python_installation(self.python) + LIBRARY_PATHS
        self.root_trees = _root_trees(self.read_roots)
        remove_stale_directories()
        self.directory = tempfile.mkdtemp(prefix=TEMP_PREFIX)
        os.chmod(self.directory, 0o711)  # nobody (a root caller's code) may traverse, not list
        # Lock under a temporary name, then rename: a directory with a "lock" is always locked while alive.
        self._lock_fd = os.open(os.path.join(self.directory, ".lock"), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        os.rename(os.path.join(self.directory, ".lock"), os.path.join(self.directory, "lock"))
        self._finalizer = weakref.finalize(self, _release, self.directory, self._lock_fd)
        self.missing_layers = self._check_layers()

    def close(self) -> None:
        """Remove the sandbox's temporary directory (also done when it is garbage-collected)."""
        self._finalizer()

    def _check_layers(self) -> dict[str, str]:
        key = (self.python, os.geteuid(), self.limits.allow_missing_layers)
        if key not in _PROBES:
            result, events = self._execute("", self.limits.wall_seconds + 20, probe=True)
            failed = [line for line in events if line.startswith("failed ")]
            if failed or "ready" not in events:
                reasons = failed or [f"the probe ended without reporting (exit {result.exit_code}): {result.output[-500:]}"]
                _PROBES[key] = ("refused", reasons)
            else:
                missing = {}
                for line in events:
                    if line.startswith("missing "):
                        layer, _, why = line[len("missing ") :].partition(": ")
                        missing[layer] = why
                _PROBES[key] = ("ok", missing)
        verdict, detail = _PROBES[key]
        if verdict == "refused":
            lines = []
            for reason in detail:
                layer, _, why = reason[len("failed ") :].partition(": ") if reason.startswith("failed ") else ("", "", "")
                fix = LAYER_FIXES.get(layer)
                if why.startswith("cannot import"):  # the interpreter, not the kernel
                    fix = (
                        f"make it importable by {self.python} (the sandbox's interpreter) as uid {os.geteuid()}: "
                        "install the sandbox's packages in it (pip install -e '.[sandbox]'), and let this user "
                        "read its installation and site-packages"
                    )
                lines.append(f"  {reason}" + (f"\n    fix: {fix}" if fix else ""))
            raise SandboxUnavailableError(
                "The python-tool sandbox cannot start: a layer it needs is unavailable.\n"
                + "\n".join(lines)
                + "\nTo run with weaker isolation anyway (see the threat model in docs/text_envs.md), pass "
                "SandboxLimits(allow_missing_layers=(...)) naming the missing layers."
            )
        return dict(detail)

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

    def run(self, code: str, wall_seconds: float | None = None) -> SandboxResult:
        """Execute ``code`` as a script; never raises for anything in ``code`` or done by it.

        ``wall_seconds`` lowers the wall-clock limit of this run (a caller's remaining budget).
        """
        problem = _invalid_code(code)
        if problem:
            return SandboxResult.refused(problem)
        wall = self.limits.wall_seconds if wall_seconds is None else min(wall_seconds, self.limits.wall_seconds)
        result, events = self._execute(code, wall, probe=False)
        if "ready" not in events and not result.timed_out:
            failed = [line for line in events if line.startswith("failed ")]
            why = failed[0] if failed else f"exit {result.exit_code}"
            return SandboxResult.refused(f"the sandbox could not be set up ({why}); the code did not run")
        return result

    def _execute(self, code: str, wall_seconds: float, probe: bool) -> tuple[SandboxResult, list[str]]:
        limits = self.limits
        private = tempfile.mkdtemp(prefix="run-", dir=self.directory)  # holds the output file, unreachable by the code
        workdir = os.path.join(private, "work")
        os.mkdir(workdir, 0o700)
        os.chmod(private, 0o711)
        status_read, status_write = os.pipe()
        try:
            with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8") as f:
                f.write(code)
            if self.is_root:
                os.chown(workdir, NOBODY_UID, NOBODY_GID)
                os.chown(os.path.join(workdir, "main.py"), NOBODY_UID, NOBODY_GID)
            config = {
                "workdir": workdir,
                "status_fd": status_write,
                "probe": probe,
                "cpu_seconds": limits.cpu_seconds,
                "memory_bytes": limits.memory_bytes,
                "file_bytes": limits.file_bytes,
                "open_files": limits.open_files,
                "tmpfs_bytes": limits.tmpfs_bytes,
                "preload": list(limits.preload),
                "nobody_uid": NOBODY_UID,
                "nobody_gid": NOBODY_GID,
                "audit_hook": limits.audit_hook,
                "allow_missing": list(limits.allow_missing_layers),
                "read_roots": list(self.read_roots),
                "root_trees": self.root_trees,
                "denied_syscalls": list(DENIED_SYSCALLS),
                "unsupported_syscalls": list(UNSUPPORTED_SYSCALLS),
                "newer_syscalls": NEWER_SYSCALLS if platform.machine() in UNIFIED_SYSCALL_TABLES else {},
                "syscall_numbers": ROOT_SYSCALLS.get(platform.machine()),
                "libraries": _libraries(),
            }
            output_path = os.path.join(private, "output.txt")
            start = time.monotonic()
            with open(output_path, "wb") as output_file:
                process = subprocess.Popen(
                    [self.python, "-I", "-c", _RUNNER, json.dumps(config)],
                    stdin=subprocess.DEVNULL,
                    stdout=output_file,
                    stderr=subprocess.STDOUT,
                    cwd=workdir,
                    env=self._environment(workdir),
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=(status_write,),
                )
                os.close(status_write)
                status_write = -1
                timed_out = False
                try:
                    process.wait(timeout=wall_seconds)
                except subprocess.TimeoutExpired:
                    timed_out = True
                _kill_group(process)  # nothing of the run may outlive it
                process.wait()
            seconds = time.monotonic() - start
            with os.fdopen(status_read, "rb") as status:
                status_read = -1
                events = status.read(1 << 16).decode("utf-8", errors="replace").splitlines()
            with open(output_path, "rb") as f:
                raw = f.read(limits.output_chars * 4 + 1)
            text = raw.decode("utf-8", errors="replace")
            truncated = len(text) > limits.output_chars or os.path.getsize(output_path) > len(raw)
            exit_code = process.returncode
            reason = None
            if timed_out:
                reason = f"wall-clock limit of {wall_seconds:.3g} s"
            elif exit_code in (-signal.SIGXCPU, -signal.SIGKILL):
                reason = f"CPU time limit of {limits.cpu_seconds} s"
            elif exit_code == -signal.SIGXFSZ:
                reason = "output or file size limit"
            elif exit_code is not None and exit_code < 0:
                reason = f"signal {-exit_code}"
            result = SandboxResult(
                output=text[: limits.output_chars],
                exit_code=exit_code,
                timed_out=timed_out,
                killed_reason=reason,
                output_truncated=truncated,
                seconds=seconds,
            )
            return result, events
        finally:
            for fd in (status_read, status_write):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            shutil.rmtree(private, ignore_errors=True)


# (python, euid, allowed missing layers) -> ("ok", {missing layer: why}) or ("refused", [reasons])
_PROBES: dict[tuple, tuple[str, Any]] = {}
