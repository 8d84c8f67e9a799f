"""Runs hostile snippets through ``PythonReasoningEnv`` with the audit hook off; prints the outcome as JSON.

Started by ``test_text_sandbox.py`` as its own process, as an unprivileged user or as root, so
that the process whose secrets and life are at stake (this one, the trainer's stand-in) runs
with the privileges being tested. Usage: ``python sandbox_attack_worker.py CONTEXT_JSON``.

Every attempt in a snippet prints ``HELD <label> <error>`` when refused and ``ESCAPED <label>``
when it went through; after each snippet the same episode must still run a benign call and
earn reward 1 for a correct answer.
"""

from __future__ import annotations

import json
import os
import platform
import sys

PRELUDE = """
import os, sys
for _name in ("signal", "socket", "sqlite3", "subprocess", "threading", "ctypes", "_posixsubprocess"):
    try:
        globals()[_name] = __import__(_name)
    except BaseException as error:  # the audit hook, when installed, refuses some
        print("import", _name, "refused:", error)
try:
    libc = ctypes.CDLL(None, use_errno=True)
except BaseException:
    libc = None
V = {victim!r}
def raw(function, *args):
    result = function(*args)
    if result < 0:
        raise OSError(ctypes.get_errno(), "raw call refused")
    return result
def checked_status(status):
    if status != 0:
        raise OSError("exit status %r" % status)
def attempt(label, action):
    try:
        result = action()
    except BaseException as error:
        print("HELD", label, type(error).__name__, str(error)[:80])
    else:
        print("ESCAPED", label, repr(result)[:200])
    sys.stdout.flush()
"""

ATTACKS = {
    "files": """
attempt("read a host file the user owns", lambda: open(V + "/secret.txt").read())
attempt("read a world-readable system file", lambda: open("/etc/hostname").read())
attempt("create a file in the user's directory", lambda: open(V + "/written.txt", "w").write("x"))
attempt("create a file in /tmp", lambda: open("/tmp/sandbox-escape-{tag}.txt", "w").write("x"))
attempt("append to a host file", lambda: open(V + "/secret.txt", "a").write("x"))
attempt("truncate a host file", lambda: os.truncate(V + "/secret.txt", 0))
attempt("remove a host file", lambda: os.unlink(V + "/secret.txt"))
attempt("rename a host file", lambda: os.rename(V + "/secret.txt", V + "/moved.txt"))
attempt("chmod a host file", lambda: os.chmod(V + "/secret.txt", 0o777))
attempt("list the user's directory", lambda: os.listdir(V))
""",
    "dir_fd_and_symlinks": """
def path_descriptor(path):  # O_PATH opens need no access right; a path hidden from the code gives none
    try:
        return os.open(path, os.O_PATH)
    except OSError as error:
        print("no descriptor of", path, error)
        return -1
victim_fd, root_fd = path_descriptor(V), path_descriptor("/")
attempt("open relative to an O_PATH descriptor", lambda: os.read(os.open("secret.txt", os.O_RDONLY, dir_fd=victim_fd), 99))
attempt("open relative to a descriptor of /", lambda: os.open(V.lstrip("/") + "/secret.txt", os.O_RDONLY, dir_fd=root_fd))
attempt("create relative to a descriptor", lambda: os.open("dirfd.txt", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=victim_fd))
os.symlink(V + "/secret.txt", "link-to-secret")
os.symlink(V, "link-to-victim")
attempt("read through a symlink made in the work directory", lambda: open("link-to-secret").read())
attempt("write through a directory symlink", lambda: open("link-to-victim/via-symlink.txt", "w").write("x"))
attempt("hard-link a host file into the work directory", lambda: os.link(V + "/secret.txt", "hardlink"))
attempt("plant a symlink in the user's directory", lambda: os.symlink("/etc/passwd", V + "/planted-link"))
attempt("read through a planted host symlink", lambda: open(V + "/host-link").read())
""",
    "fifos_and_sqlite": """
attempt("create a FIFO in the user's directory", lambda: os.mkfifo(V + "/planted-fifo"))
attempt("create a FIFO in the work directory", lambda: os.mkfifo("own-fifo"))
attempt("open a host FIFO for writing", lambda: os.open(V + "/host-fifo", os.O_WRONLY | os.O_NONBLOCK))
attempt("open a host FIFO for reading", lambda: os.open(V + "/host-fifo", os.O_RDONLY | os.O_NONBLOCK))
attempt("create an SQLite database outside", lambda: sqlite3.connect(V + "/planted.sqlite").execute("create table t (x)"))
def read_host_database():
    database = sqlite3.connect("file:" + V + "/host.sqlite?mode=ro", uri=True)
    return database.execute("select * from secrets").fetchall()
attempt("read a host SQLite database", read_host_database)
""",
    "metadata_reads": """
# Calls that Landlock does not check: they must find nothing of the host to read.
attempt("stat a host file (existence, size, times)", lambda: os.stat(V + "/secret.txt").st_size)
attempt("lstat a host symlink", lambda: os.lstat(V + "/host-link").st_mtime)
attempt("stat a world-readable system file", lambda: os.stat("/etc/hostname").st_size)
attempt("test a host path with access()", lambda: raw(libc.access, (V + "/secret.txt").encode(), 0))
attempt("read a host file's extended attribute", lambda: os.getxattr(V + "/secret.txt", "user.secret"))
attempt("list a host file's extended attributes", lambda: os.listxattr(V + "/secret.txt"))
attempt("read a host symlink's target", lambda: os.readlink(V + "/host-link"))
def watch_host_directory():
    inotify = raw(libc.inotify_init1, 0)
    return raw(libc.inotify_add_watch, inotify, V.encode(), 0x100)  # IN_CREATE: names of new files
attempt("watch the user's directory with inotify", watch_host_directory)
""",
    "memory_outside_rlimit_as": """
attempt("memfd_create (its pages are not in RLIMIT_AS)", lambda: os.memfd_create("hoard"))
attempt("System V shared memory", lambda: raw(libc.shmget, 0, 1 << 20, 0o1600))
attempt("System V message queue", lambda: raw(libc.msgget, 0, 0o1600))
""",
    "proc": """
attempt("list /proc", lambda: os.listdir("/proc"))
attempt("read the trainer's environment", lambda: open("/proc/{host_pid}/environ").read())
attempt("read the test runner's environment", lambda: open("/proc/{pytest_pid}/environ").read())
attempt("read the trainer's command line", lambda: open("/proc/{host_pid}/cmdline").read())
def scan():
    found = []
    for pid in range(1, 5000):
        try:
            if "{token}" in open("/proc/%d/environ" % pid).read():
                found.append(pid)
        except OSError:
            pass
    if not found:
        raise LookupError("no process environment holds the token")
    return found
attempt("scan every /proc/PID/environ for the token", scan)
attempt("reach the host through /proc/1/root", lambda: open("/proc/1/root" + V + "/secret.txt").read())
""",
    "network": """
attempt("connect to a localhost TCP service", lambda: socket.socket().connect(("127.0.0.1", {port})))
attempt("send UDP to localhost", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", {port})))
attempt("connect to a host AF_UNIX socket", lambda: socket.socket(socket.AF_UNIX).connect({unix_path!r}))
attempt("connect to a host abstract AF_UNIX socket", lambda: socket.socket(socket.AF_UNIX).connect({abstract_name!r}))
attempt("raw socket() system call", lambda: raw(libc.socket, 2, 1, 0))
attempt("raw socketpair() system call", lambda: raw(libc.socketpair, 1, 1, 0, (ctypes.c_int * 2)()))
""",
    "signals": """
attempt("kill the trainer", lambda: os.kill({host_pid}, signal.SIGKILL))
attempt("kill the test runner", lambda: os.kill({pytest_pid}, signal.SIGKILL))
attempt("signal the trainer through a pidfd", lambda: signal.pidfd_send_signal(os.pidfd_open({host_pid}), signal.SIGKILL))
attempt("raw pidfd_open system call", lambda: raw(libc.syscall, 434, {host_pid}, 0))
attempt("raw kill system call", lambda: raw(libc.kill, {host_pid}, 9))
attempt("raw tgkill system call", lambda: raw(libc.tgkill, {host_pid}, {host_pid}, 9))
attempt("leave the process group", os.setsid)
attempt("kill every process it may signal", lambda: os.kill(-1, signal.SIGKILL))
attempt("kill its own process group", lambda: os.killpg(0, signal.SIGKILL))
""",
    "processes": """
M = {marker!r}
attempt("os.system", lambda: checked_status(os.system("touch " + M)))
attempt("subprocess.run", lambda: subprocess.run(["/bin/sh", "-c", "touch " + M], check=True))
attempt("_posixsubprocess (already loaded) through Popen", lambda: subprocess.Popen(["/bin/touch", M]).wait())
attempt("os.fork", lambda: os.fork() or os._exit(0))
attempt("os.posix_spawn", lambda: os.posix_spawn("/bin/touch", ["touch", M], {{}}))
attempt("os.execv", lambda: os.execv("/bin/touch", ["touch", M]))
def start_thread():
    thread = threading.Thread(target=lambda: open(M, "w"))
    thread.start()
    thread.join()
attempt("a thread", start_thread)
attempt("raw fork through libc", lambda: raw(libc.fork) or os._exit(0))
attempt("a new user namespace", lambda: raw(libc.unshare, 0x10000000))
attempt("ptrace", lambda: raw(libc.ptrace, 16, {host_pid}, 0, 0))
""",
    "builtins_and_hook": """
import builtins, os.path
builtins.any = lambda *args, **kwargs: True
builtins.isinstance = lambda *args: True
os.path.realpath = lambda path, *args, **kwargs: os.getcwd()
sys.addaudithook = lambda hook: None
attempt("read a host file after replacing builtins", lambda: open(V + "/secret.txt").read())
attempt("write a host file after replacing builtins", lambda: open(V + "/tampered.txt", "w").write("x"))
attempt("import ctypes after replacing builtins", lambda: raw(ctypes.CDLL(None, use_errno=True).kill, {host_pid}, 9))
""",
}
if platform.machine() == "x86_64":
    # modify_ldt widens the kernel surface (segment descriptors); x86 only. Read the table (func 0).
    ATTACKS["x86_ldt"] = """
attempt("modify_ldt", lambda: raw(libc.syscall, 154, 0, ctypes.create_string_buffer(64), 64))
"""
PRELOAD = ("os", "signal", "socket", "encodings.idna", "sqlite3", "subprocess", "threading", "ctypes", "_posixsubprocess")


def expected_attempts(name: str) -> int:
    return ATTACKS[name].count('attempt("')


def main() -> None:
    context = json.loads(sys.argv[1])
    context["host_pid"] = os.getpid()
    from envs.text.sandbox import SandboxLimits, SandboxUnavailableError
    from envs.text.tir_env import ProblemSet, PythonReasoningEnv

    def make_env(audit_hook: bool) -> PythonReasoningEnv:
        limits = SandboxLimits(cpu_seconds=2, wall_seconds=10.0, audit_hook=audit_hook, preload=PRELOAD, output_chars=20_000)
        return PythonReasoningEnv(ProblemSet(14, seed=0), limits=limits, message_seconds=30.0)

    try:
        envs = {False: make_env(False), True: make_env(True)}
    except SandboxUnavailableError as error:
        print(json.dumps({"unavailable": str(error)}))
        return

    def attack_then_solve(env: PythonReasoningEnv, code: str) -> dict:
        call = lambda source: "<tool_call>" + json.dumps({"name": "python", "arguments": {"code": source}}) + "</tool_call>"
        observation, _ = env.reset(options={"problem_id": 6})
        observation, _, terminated, truncated, _ = env.step(call(code))
        output = observation[-1]["content"]
        observation, *_ = env.step(call("print(6 * 7)"))
        benign = observation[-1]["content"]
        answer = env.problem.answer
        _, reward, done, _, _ = env.step(f"\\boxed{{{int(answer) if answer.is_integer() else answer}}}")
        return {"output": output, "benign": benign, "reward": reward, "episode_ended": bool(terminated or truncated)}

    results = {"uid": os.geteuid(), "missing_layers": envs[False].sandbox.missing_layers, "attacks": {}}
    for name, body in ATTACKS.items():
        code = (PRELUDE + body).format(**context)
        results["attacks"][name] = attack_then_solve(envs[False], code)
    # The same tampering with the hook installed: replacing builtins must not open a way past it either.
    tamper = (PRELUDE + ATTACKS["builtins_and_hook"]).format(**context)
    results["attacks"]["builtins_and_hook_with_hook_on"] = attack_then_solve(envs[True], tamper)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
