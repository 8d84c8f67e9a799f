"""Latency of a trivial python-tool call (``print(1)``): this checkout's sandbox against another version.

    python benchmarks/sandbox_latency.py --baseline-ref main --rounds 10 --calls 5

The baseline is ``envs/text/sandbox.py`` as of a git ref (or a file given with ``--baseline-file``),
loaded beside this checkout's. Rounds alternate the two (the machine's speed drifts), each
round timing ``--calls`` calls of each after one warm-up call; the medians over all calls and
their ratio are printed. Both run with their default limits, as ``PythonReasoningEnv`` does.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-ref", default="main", help="git ref whose envs/text/sandbox.py is the baseline")
    parser.add_argument("--baseline-file", default="", help="a sandbox.py to use as the baseline instead of a git ref")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=5, help="timed calls per contender per round")
    args = parser.parse_args()

    if args.baseline_file:
        baseline_path = Path(args.baseline_file)
        label = str(baseline_path)
    else:
        source = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{args.baseline_ref}:envs/text/sandbox.py"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        baseline_path = Path(tempfile.mkdtemp()) / "baseline_sandbox.py"
        baseline_path.write_text(source)
        label = args.baseline_ref
    contenders = {
        f"baseline ({label})": load_module(baseline_path, "baseline_sandbox").PythonSandbox(),
        "this checkout": load_module(REPO / "envs" / "text" / "sandbox.py", "current_sandbox").PythonSandbox(),
    }
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for name, sandbox in contenders.items():
        assert sandbox.run("print(1)").output.strip() == "1", name  # warm-up, and a check that it works
    for _ in range(args.rounds):
        for name, sandbox in contenders.items():
            for _ in range(args.calls):
                start = time.perf_counter()
                result = sandbox.run("print(1)")
                times[name].append(time.perf_counter() - start)
                assert result.ok and result.output.strip() == "1", result
    load = os.getloadavg()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f}")
    print(f"Python {platform.python_version()}, uid {os.geteuid()}, {args.rounds} rounds x {args.calls} calls each")
    medians = {}
    for name, values in times.items():
        medians[name] = statistics.median(values)
        quartiles = statistics.quantiles(values, n=4)
        low, high = quartiles[0] * 1000, quartiles[2] * 1000
        print(f"{name:>28}: median {medians[name] * 1000:6.0f} ms  (quartiles {low:.0f}-{high:.0f} ms)")
    baseline, current = medians.values()
    print(f"ratio this checkout / baseline: {current / baseline:.2f}")


if __name__ == "__main__":
    main()
