"""The sandboxed ``python`` tool: each attack is contained and the env keeps working afterwards.

Modules that the attacks need are preloaded, so that the sandbox's own layers (audit hook,
kernel limits, namespaces) are what stops them, not a failed import.
"""

import json
import os
import socket
import time

import pytest

from envs.text.sandbox import PythonSandbox, SandboxLimits
from envs.text.tir_env import ProblemSet, PythonReasoningEnv, PythonReasoningExpert, extract_answer

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


def test_an_infinite_loop_is_killed_by_the_cpu_limit(env):
    start = time.monotonic()
    output = run_attack_then_solve(env, "while True:\n    pass")
    assert "killed" in output and "CPU" in output
    assert time.monotonic() - start < LIMITS.wall_seconds + 3


def test_sleeping_forever_is_killed_by_the_wall_clock_limit():
    result = PythonSandbox(LIMITS).run("import time\ntime.sleep(60)")
    assert result.timed_out and result.seconds < LIMITS.wall_seconds + 2


def test_allocating_far_more_memory_than_allowed_fails_inside_the_sandbox(env):
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


def test_kernel_layers_hold_without_the_audit_hook(tmp_path):
    """Defence in depth: as root, with namespaces, writes, processes and network are stopped by
    the kernel even if the interpreter-level hook were gone."""
    sandbox = PythonSandbox(
        SandboxLimits(cpu_seconds=1, wall_seconds=3.0, audit_hook=False, preload=("os", "socket", "subprocess"))
    )
    if not sandbox.uses_namespaces:
        pytest.skip("needs root and unshare --net --mount")
    marker = f"/tmp/envs_text_kernel_probe_{os.getpid()}"
    code = "\n".join(
        f"try:\n    {attempt}\n    print('ESCAPED')\nexcept BaseException as e:\n    print('held:', type(e).__name__)"
        for attempt in (
            f"open({marker!r}, 'w').write('x')",
            f"open({str(tmp_path / 'x')!r}, 'w').write('x')",
            "import os; os.fork()",
            "import socket; socket.create_connection(('1.1.1.1', 53), timeout=1)",
            "import os; os.kill(1, 9)",
        )
    )
    result = sandbox.run(code + "\nopen('inside.txt', 'w').write('ok'); print(open('inside.txt').read())")
    assert "ESCAPED" not in result.output and result.output.count("held:") == 5, result.output
    assert result.output.rstrip().endswith("ok") and not os.path.exists(marker)
