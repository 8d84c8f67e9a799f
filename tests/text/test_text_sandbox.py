"""The sandboxed ``python`` tool: each attack is contained and the env keeps working afterwards.

Modules that the attacks need are preloaded, so that the sandbox's own layers are what stops
them, not a failed import. The first tests run with the audit hook (the friendly layer); the
attack suite at the end turns it off and runs as an unprivileged user and as root, so that the
kernel layers alone are shown to hold.
"""

import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from envs.text.sandbox import PythonSandbox, SandboxLimits, SandboxUnavailableError, remove_stale_directories
from envs.text.tir_env import ProblemSet, PythonReasoningEnv, PythonReasoningExpert, extract_answer

sys.path.insert(0, str(Path(__file__).parent))
from sandbox_attack_worker import ATTACKS, expected_attempts  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

LIMITS = SandboxLimits(
    cpu_seconds=1,
    wall_seconds=3.0,
    memory_bytes=512 << 20,
    output_chars=2000,
    preload=("os", "socket", "subprocess", "threading", "shutil", "pathlib"),
)


@pytest.fixture(scope="module")
def env():
    return PythonReasoningEnv(ProblemSet(14, seed=0), limits=LIMITS)


def python_call(code: str) -> str:
    return "<tool_call>" + json.dumps({"name": "python", "arguments": {"code": code}}) + "</tool_call>"


def run_attack_then_solve(env, code: str) -> str:
    """Run ``code`` as the model's first tool call, then check the same episode still works:
    a benign call returns its output and a correct boxed answer earns reward 1."""
    observation, info = env.reset(options={"problem_id": 6})
    observation, reward, terminated, truncated, info = env.step(python_call(code))
    attack_output = observation[-1]["content"]
    assert not (terminated or truncated) and observation[-1]["role"] == "tool"
    observation, *_ = env.step(python_call("print(6 * 7)"))
    assert observation[-1]["content"] == "42"
    answer = env.problem.answer
    _, reward, terminated, _, _ = env.step(f"\\boxed{{{int(answer) if answer.is_integer() else answer}}}")
    assert terminated and reward == 1.0
    return attack_output


def test_expert_solves_problems_through_the_sandbox(env):
    for problem in list(env.problems)[:7]:
        observation, info = env.reset(options={"problem": problem})
        expert = PythonReasoningExpert()
        observation, _, _, _, info = env.step(expert.act(observation, info))
        _, reward, terminated, _, info = env.step(expert.act(observation, info))
        assert terminated and reward == 1.0 and info["errors"] == {}


def run_expert(env, problem, expert):
    observation, info = env.reset(options={"problem": problem})
    for _ in range(4):
        observation, reward, terminated, truncated, info = env.step(expert.act(observation, info))
        if terminated or truncated:
            break
    return observation, reward, info


def test_the_expert_fixes_a_crashing_first_call_in_its_second_message(env):
    """One problem of each of the seven kinds: error, fix, answer."""
    for problem in list(env.problems)[:7]:
        observation, reward, info = run_expert(env, problem, PythonReasoningExpert(crash_first=1.0))
        assistant = [m for m in observation if m["role"] == "assistant"]
        tools = [m["content"] for m in observation if m["role"] == "tool"]
        assert len(assistant) == 3 and reward == 1.0 and info["errors"] == {"tool_error": 1}
        assert "NameError" in tools[0] and "pritn" in tools[0] and float(tools[1].strip()) == problem.answer


def test_the_expert_solves_each_sibling_kind_through_the_sandbox_after_a_crash():
    """The seven sibling kinds of python-math-siblings (ids 7-13): their reference programs run in the
    sandbox within its limits, and the crash-and-fix trace ends with the right answer."""
    siblings = PythonReasoningEnv(ProblemSet(14, seed=0, siblings=True), limits=LIMITS)
    for problem_id in range(7, 14):
        problem = siblings.problems.get(problem_id)
        observation, reward, info = run_expert(siblings, problem, PythonReasoningExpert(crash_first=1.0))
        tools = [m["content"] for m in observation if m["role"] == "tool"]
        assert reward == 1.0 and info["errors"] == {"tool_error": 1}, problem.question
        assert float(tools[1].strip()) == problem.answer


def test_the_expert_with_a_silent_mistake_boxes_a_wrong_number_and_fails(env):
    for problem in list(env.problems)[:7]:
        observation, reward, info = run_expert(env, problem, PythonReasoningExpert(silent_mistake=1.0))
        assert reward == 0.0 and info["errors"] == {} and len([m for m in observation if m["role"] == "assistant"]) == 2
        assert float(observation[-2]["content"].strip()) == pytest.approx(2 * problem.answer + 1)


def test_the_expert_draws_its_mistakes_per_episode_and_refuses_bad_probabilities(env):
    expert = PythonReasoningExpert(crash_first=0.5, seed=3)
    problem = list(env.problems)[0]
    lengths = [len([m for m in run_expert(env, problem, expert)[0] if m["role"] == "assistant"]) for _ in range(12)]
    assert set(lengths) == {2, 3}
    with pytest.raises(ValueError, match="crash_first is a probability"):
        PythonReasoningExpert(crash_first=1.5)


def test_reading_outside_the_temporary_directory_is_refused(env, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-42")
    output = run_attack_then_solve(env, f"print(open({str(secret)!r}).read())\nprint(open('/etc/hostname').read())")
    assert "TOPSECRET" not in output and "not allowed" in output


def test_writing_outside_the_temporary_directory_is_refused(env, tmp_path):
    targets = [str(tmp_path / "pwned.txt"), f"/tmp/envs_text_pwned_{os.getpid()}.txt", "/work/pwned.txt"]
    code = "\n".join(f"try:\n    open({t!r}, 'w').write('x')\nexcept Exception as e:\n    print(e)" for t in targets)
    code += "\nimport os\ntry:\n    os.remove('/etc/hostname')\nexcept Exception as e:\n    print(e)"
    output = run_attack_then_solve(env, code)
    assert all(not os.path.exists(t) for t in targets) and os.path.exists("/etc/hostname")
    assert output.count("not allowed") == 4


def test_the_temporary_directory_is_writable_and_fresh(env):
    output = run_attack_then_solve(
        env, "import os\nopen('a.txt', 'w').write('hi')\nprint(open('a.txt').read(), sorted(os.listdir('.')))"
    )
    assert output.startswith("hi ['a.txt']")


def test_spawning_a_process_or_shell_is_refused(env, tmp_path):
    marker = tmp_path / "spawned"
    attempts = [
        f"import os; os.system('touch {marker}')",
        f"import subprocess; subprocess.run(['sh', '-c', 'touch {marker}'])",
        "import os; os.fork()",
        f"import os; os.execv('/bin/sh', ['sh', '-c', 'touch {marker}'])",
        "import threading; threading.Thread(target=print).start()",
    ]
    code = "\n".join(f"try:\n    {a}\nexcept BaseException as e:\n    print('blocked:', e)" for a in attempts)
    output = run_attack_then_solve(env, code)
    assert not marker.exists() and output.count("blocked:") == len(attempts)


def test_network_connections_are_refused_even_to_localhost(env):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    try:
        output = run_attack_then_solve(
            env, f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\nprint('connected')"
        )
        assert "connected" not in output.replace("not allowed", "")
        with pytest.raises(socket.timeout):
            listener.accept()  # nobody knocked
    finally:
        listener.close()


@pytest.fixture(scope="module")
def patient_env():
    """LIMITS with a wall-clock limit far above the CPU limit: the CPU and memory limits then fire
    first even on a machine so loaded that one CPU second takes several seconds of wall time."""
    limits = dataclasses.replace(LIMITS, wall_seconds=120.0)
    return PythonReasoningEnv(ProblemSet(14, seed=0), limits=limits, message_seconds=120.0)


def test_an_infinite_loop_is_killed_by_the_cpu_limit(patient_env):
    output = run_attack_then_solve(patient_env, "while True:\n    pass")
    assert "[killed: CPU time limit of 1 s]" in output


def test_sleeping_forever_is_killed_by_the_wall_clock_limit():
    result = PythonSandbox(LIMITS).run("import time\ntime.sleep(60)")
    assert result.timed_out and result.seconds < LIMITS.wall_seconds + 2


def test_allocating_far_more_memory_than_allowed_fails_inside_the_sandbox():
    # Zeroing 512 MiB of pages takes a fair part of a CPU second on a loaded host: give the CPU
    # limit room, so that the memory limit is the one that fires.
    limits = dataclasses.replace(LIMITS, cpu_seconds=10, wall_seconds=120.0)
    env = PythonReasoningEnv(ProblemSet(14, seed=0), limits=limits, message_seconds=120.0)
    output = run_attack_then_solve(env, "chunks = []\nwhile True:\n    chunks.append(bytearray(50_000_000))")
    assert "MemoryError" in output
    output = run_attack_then_solve(env, "x = bytearray(10 ** 11)")
    assert "MemoryError" in output


def test_printing_gigabytes_returns_a_bounded_output(env):
    output = run_attack_then_solve(env, "while True:\n    print('x' * 1_000_000)")
    assert len(output) < LIMITS.output_chars + 200 and "[output truncated]" in output


def test_filling_the_disk_is_bounded(env):
    output = run_attack_then_solve(
        env, "for i in range(1000):\n    open(f'f{i}', 'wb').write(b'x' * (4 << 20))\nprint('filled')"
    )
    assert "filled" not in output


def test_no_secrets_are_inherited_through_the_environment(env, monkeypatch):
    monkeypatch.setenv("API_TOKEN_FOR_TEST", "hunter2")
    output = run_attack_then_solve(env, "import os\nprint(sorted(os.environ))")
    assert "API_TOKEN" not in output and "hunter2" not in output


def test_ctypes_is_refused(env):
    output = run_attack_then_solve(env, "import ctypes\nctypes.CDLL(None)")
    assert "not allowed" in output


def test_ctypes_is_not_left_in_sys_modules(env):
    # ctypes' submodules hold its names (ctypes._endian imports *): none stays for the code to find.
    code = "import sys\nprint(sorted(m for m in sys.modules if 'ctypes' in m or m.startswith(('pyseccomp', 'landlock'))))"
    assert run_attack_then_solve(env, code) == "[]"


def test_memory_outside_the_address_space_limit_is_refused(env):
    # A memfd's pages count against RLIMIT_AS only while mapped: 8 MiB (RLIMIT_FSIZE) per descriptor
    # would add hundreds of MiB beyond the limit.
    code = (
        "import os\nhoarded = 0\ntry:\n    for _ in range(40):\n        fd = os.memfd_create('hoard')\n"
        "        os.write(fd, b'x' * (4 << 20))\n        hoarded += 4\nexcept OSError as error:\n    print(error)\n"
        "print('hoarded', hoarded, 'MiB')"
    )
    output = run_attack_then_solve(env, code)
    assert output.endswith("hoarded 0 MiB") and "Operation not permitted" in output


def test_answer_extraction():
    assert extract_answer("so \\boxed{1,234.5}") == 1234.5
    assert extract_answer("<answer> 7 </answer>") == 7.0
    assert extract_answer("the answer is 7") is None
    assert extract_answer("\\boxed{inf}") is None


def test_bad_tool_input_is_an_error_message_and_the_episode_goes_on(env):
    env.reset(options={"problem_id": 1})
    observation, _, _, _, info = env.step(
        '<tool_call>{"name": "bash", "arguments": {"cmd": "ls"}}</tool_call>'
        '<tool_call>{"name": "python", "arguments": {"script": 1}}</tool_call><tool_call>{bad</tool_call>'
    )
    assert info["errors"] == {"unknown_tool": 1, "bad_arguments": 1, "parse": 1}
    assert [m["role"] for m in observation[-3:]] == ["tool"] * 3


def test_tool_turn_limit_truncates():
    env = PythonReasoningEnv(ProblemSet(7), max_tool_turns=2, limits=LIMITS)
    env.reset(options={"problem_id": 0})
    assert env.step(python_call("print(1)"))[3] is False
    _, reward, terminated, truncated, _ = env.step(python_call("print(1)"))
    assert truncated and not terminated and reward == 0.0


@pytest.mark.parametrize(
    "code, problem",
    [
        ("print('\ud800')", "lone surrogate"),
        ("x = '\udfff\ud800'\nprint(x)", "lone surrogate"),
        ("print(1)\x00print(2)", "NUL character"),
        ("\x00", "NUL character"),
    ],
)
def test_any_tool_input_gives_a_tool_error_never_an_exception(env, code, problem):
    env.reset(options={"problem_id": 2})
    observation, reward, terminated, truncated, info = env.step(python_call(code))
    assert observation[-1]["role"] == "tool" and problem in observation[-1]["content"]
    assert info["errors"] == {"tool_error": 1} and not (terminated or truncated)


def test_odd_strings_in_calls_and_arguments_never_raise(env):
    odd = ["\ud800", "\x00", "\udcff" * 1000, "\u202e", "\ufeff", "a" * 100_000]
    env.reset(options={"problem_id": 3})
    for text in odd:
        for action in (
            text,
            f"<tool_call>{text}</tool_call>",
            "<tool_call>" + json.dumps({"name": text, "arguments": {"code": text}}) + "</tool_call>",
            "<tool_call>" + json.dumps({"name": "python", "arguments": {"code": text, text: 1}}) + "</tool_call>",
            "<tool_call>" + json.dumps({"name": "python", "arguments": [text]}) + "</tool_call>",
        ):
            if env.done:
                env.reset(options={"problem_id": 3})
            env.step(action)  # must not raise


def test_one_message_gets_one_time_budget_across_its_calls():
    env = PythonReasoningEnv(ProblemSet(7), limits=LIMITS, message_seconds=1.5)
    env.reset(options={"problem_id": 0})
    sleep = python_call("import time\ntime.sleep(30)")
    observation, _, _, _, info = env.step(sleep * 3 + python_call("print('late')"))
    tool_messages = [m["content"] for m in observation if m["role"] == "tool"]
    assert "[killed: wall-clock limit of 1." in tool_messages[0]  # what was left of the 1.5 s
    assert all("s for python calls are spent" in m for m in tool_messages[1:]) and len(tool_messages) == 4
    assert info["errors"]["time_budget"] == 3 and info["sandbox_runs"] == 1
    with pytest.raises(ValueError, match="message_seconds"):
        PythonReasoningEnv(ProblemSet(7), limits=LIMITS, message_seconds=0)


def test_a_missing_layer_refuses_to_start_unless_explicitly_accepted(tmp_path):
    # An interpreter started with -S has no site-packages: neither pyseccomp nor landlock imports.
    wrapper = tmp_path / "python-without-site"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    wrapper.chmod(0o755)
    with pytest.raises(SandboxUnavailableError) as refused:
        PythonSandbox(SandboxLimits(preload=()), python=str(wrapper))
    message = str(refused.value)
    assert "failed landlock" in message and "allow_missing_layers" in message and "fix:" in message
    # The failure is an import, not the kernel: the message says so, with the interpreter's own error.
    assert "cannot import" in message and "No module named 'landlock'" in message and str(wrapper) in message
    assert "Linux 5.13" not in message
    weak = PythonSandbox(SandboxLimits(preload=(), allow_missing_layers=("landlock", "seccomp")), python=str(wrapper))
    assert set(weak.missing_layers) == {"landlock", "seccomp"}
    assert weak.run("print(6 * 7)").output.strip() == "42"
    with pytest.raises(ValueError, match="unknown layer"):
        SandboxLimits(allow_missing_layers=("audit",))


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def test_temporary_files_of_a_killed_trainer_are_removed_at_the_next_start(tmp_path):
    script = (
        "import sys, threading\n"
        "from envs.text.sandbox import PythonSandbox, SandboxLimits\n"
        "sandbox = PythonSandbox(SandboxLimits(preload=(), wall_seconds=60, cpu_seconds=60))\n"
        "print(sandbox.directory, flush=True)\n"
        "sandbox.run('import time\\nprint(1, flush=True)\\ntime.sleep(60)')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    trainer = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True, env=env)
    directory = trainer.stdout.readline().strip()  # printed once the probe is done: what starts next is the run
    deadline = time.monotonic() + 60
    sandbox_processes: list[int] = []
    while len(sandbox_processes) < 2 and time.monotonic() < deadline:  # the runner and the code in its PID namespace
        runners = _children(trainer.pid)
        sandbox_processes = runners + [pid for runner in runners for pid in _children(runner)]
        time.sleep(0.05)
    assert len(sandbox_processes) == 2 and os.path.isdir(directory)
    trainer.send_signal(signal.SIGKILL)
    trainer.wait()
    trainer.stdout.close()
    while any(Path(f"/proc/{pid}").exists() for pid in sandbox_processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(Path(f"/proc/{pid}").exists() for pid in sandbox_processes), "the sandbox outlived its trainer"
    assert os.path.isdir(directory)  # left behind by the kill...
    assert directory in remove_stale_directories()  # ...and removed by the next start
    assert not os.path.exists(directory)
    live = PythonSandbox(LIMITS)
    assert live.directory not in remove_stale_directories() and os.path.isdir(live.directory)
    live.close()
    assert not os.path.exists(live.directory)


# ---- the kernel layers alone: hostile snippets with the audit hook off, as a user and as root ----

UNPRIVILEGED_UID = 64_321  # an unused uid: the tests' stand-in for an ordinary user


def _worker_command(mode: str, context: dict) -> list[str]:
    worker = [sys.executable, str(Path(__file__).parent / "sandbox_attack_worker.py"), json.dumps(context)]
    if mode == "root" or os.geteuid() != 0:
        return worker
    if shutil.which("setpriv") is None:
        pytest.skip("dropping to an unprivileged uid needs setpriv (util-linux)")
    drop = ["setpriv", f"--reuid={UNPRIVILEGED_UID}", f"--regid={UNPRIVILEGED_UID}", "--clear-groups"]
    # What the worker does before any attack: import the project, and start the interpreter again
    # from there (the sandbox asks it where its installation lies).
    again = "subprocess.run([sys.executable, '-I', '-c', ''], check=True)"
    probe = [sys.executable, "-c", f"import subprocess, sys, envs.text; {again}"]
    if _runs(drop, probe, context) is None:
        return [*drop, *worker]
    # The interpreter or the checkout sits where this uid cannot read (a Python under /root): keep
    # only the capability to read it. The sandbox's user namespace drops it too.
    drop += ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", "--bounding-set=-all,+dac_read_search"]
    if (error := _runs(drop, probe, context)) is not None:
        pytest.skip(
            f"uid {UNPRIVILEGED_UID} cannot start {sys.executable} with the project imported, even with the capability "
            f"to read any file: {error}. Closed to other users: {_closed_to_others()}. Run the tests from a "
            "checkout and a Python that other users can reach."
        )
    return [*drop, *worker]


def _closed_to_others() -> str:
    """The folders on the way to the interpreter and the checkout that other users cannot enter."""
    closed = []
    for target in (sys.executable, os.path.realpath(sys.executable), str(REPO)):
        for folder in [*reversed(Path(target).parents)]:
            mode = folder.stat().st_mode & 0o777
            if not mode & 0o001 and f"{folder} ({mode:o})" not in closed:
                closed.append(f"{folder} ({mode:o})")
    return ", ".join(closed) or "none"


def _runs(drop: list[str], probe: list[str], context: dict) -> str | None:
    """None when ``probe`` runs as the dropped user; otherwise the end of its error output."""
    result = subprocess.run([*drop, *probe], env=_worker_env(context), capture_output=True, text=True, timeout=120)
    return None if result.returncode == 0 else (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]


def _worker_env(context: dict) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO), "TRAINER_SECRET_TOKEN": context["token"]}


@pytest.fixture(scope="module", params=["unprivileged", "root"])
def attack_run(request):
    """Run every attack once per privilege mode; yield the worker's report and the host's view."""
    mode = request.param
    if mode == "root" and os.geteuid() != 0:
        pytest.skip("the root half of the suite runs when the tests run as root (as CI does)")
    code_uid = os.geteuid() if os.geteuid() != 0 else (UNPRIVILEGED_UID if mode == "unprivileged" else 65534)
    victim = tempfile.mkdtemp(prefix="sandbox-victim-")  # a directory the code's uid owns: only Landlock guards it
    os.chmod(victim, 0o755)
    (Path(victim) / "secret.txt").write_text("TOPSECRET-42")
    # On a filesystem without user attributes the probe shows only that the file is out of reach.
    with contextlib.suppress(OSError):
        os.setxattr(Path(victim) / "secret.txt", "user.secret", b"TOPSECRET-42")
    os.symlink(Path(victim) / "secret.txt", Path(victim) / "host-link")
    os.mkfifo(Path(victim) / "host-fifo", 0o666)
    with sqlite3.connect(Path(victim) / "host.sqlite") as db:
        db.execute("create table secrets (value)")
        db.execute("insert into secrets values ('TOPSECRET-42')")
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    unix_path = str(Path(victim) / "host.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(unix_path)
    unix.listen(8)
    abstract_name = f"\0sandbox-test-{secrets.token_hex(4)}"
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(abstract_name)
    abstract.listen(8)
    for path in [victim, *Path(victim).iterdir()]:
        os.lchown(path, code_uid, code_uid)
        if not Path(path).is_symlink():
            os.chmod(path, 0o777 if Path(path).suffix == ".sock" else (0o755 if Path(path).is_dir() else 0o600))
    tag = secrets.token_hex(4)
    context = {
        "victim": victim,
        "tag": tag,
        "token": f"token-{secrets.token_hex(8)}",
        "pytest_pid": os.getpid(),
        "port": tcp.getsockname()[1],
        "unix_path": unix_path,
        "abstract_name": abstract_name,
        "marker": str(Path(victim) / "spawned"),
    }
    before = sorted(os.listdir(victim))
    command = _worker_command(mode, context)
    proc = subprocess.run(command, env=_worker_env(context), capture_output=True, text=True, timeout=600)
    try:
        died = f"the worker (the trainer) died: {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        assert proc.returncode == 0, died
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        if "unavailable" in report:
            pytest.skip(f"this kernel lacks a sandbox layer: {report['unavailable']}")
        connections = 0
        for listener in (tcp, unix, abstract):
            listener.settimeout(0.2)
            try:
                listener.accept()[0].close()
                connections += 1
            except TimeoutError:
                pass
        yield {
            "mode": mode,
            "report": report,
            "code_uid": code_uid,
            "before": before,
            "after": sorted(os.listdir(victim)),
            "secret": (Path(victim) / "secret.txt").read_text(),
            "secret_mode": (Path(victim) / "secret.txt").stat().st_mode & 0o777,
            "connections": connections,
            "escape_file": Path(f"/tmp/sandbox-escape-{tag}.txt").exists(),
            "context": context,
        }
    finally:
        for listener in (tcp, unix, abstract):
            listener.close()
        shutil.rmtree(victim, ignore_errors=True)
        Path(f"/tmp/sandbox-escape-{tag}.txt").unlink(missing_ok=True)


@pytest.mark.parametrize("attack", [*ATTACKS, "builtins_and_hook_with_hook_on"])
def test_kernel_layers_alone_contain_the_attack(attack_run, attack):
    report = attack_run["report"]
    assert report["uid"] == (0 if attack_run["mode"] == "root" else attack_run["code_uid"])
    assert report["missing_layers"] == {}
    outcome = report["attacks"][attack]
    output = outcome["output"]
    expected = expected_attempts(attack.replace("_with_hook_on", ""))
    assert "ESCAPED" not in output, output
    assert output.count("HELD ") == expected, output  # every attempt ran and was refused
    assert "TOPSECRET" not in output and attack_run["context"]["token"] not in output
    # The episode goes on: a benign call works and a correct answer earns its reward.
    assert outcome["benign"] == "42" and outcome["reward"] == 1.0 and not outcome["episode_ended"]
    # Nothing changed on the host, whatever the attack.
    assert attack_run["after"] == attack_run["before"], "files appeared or vanished in the user's directory"
    assert attack_run["secret"] == "TOPSECRET-42" and attack_run["secret_mode"] == 0o600
    assert attack_run["connections"] == 0 and not attack_run["escape_file"]
