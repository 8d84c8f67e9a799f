"""The README's quick start and CI cannot drift apart: CI runs the README's test command verbatim."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def quick_start_commands() -> list[str]:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the README's quick start has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


def test_the_quick_start_is_two_commands_that_install_first():
    commands = quick_start_commands()
    assert len(commands) == 2, commands
    assert all(c.startswith("./install.sh && ") for c in commands)


def test_ci_runs_the_readmes_test_command_verbatim():
    test_command = quick_start_commands()[1]
    ci_lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert test_command in ci_lines, f"{test_command!r} is not a line of .ci/run"


def test_the_install_script_is_executable_and_makes_a_virtual_environment():
    script = REPO / "install.sh"
    assert script.stat().st_mode & 0o111
    text = script.read_text()
    assert "python3 -m venv .venv" in text and 'pip install -e ".[all]"' in text
