"""Tool suites written for this project, one module each: its tools (a ``ToolSuite`` class), its
initial states and its task templates, declared as the module's ``SUITE``.

``SUITE_DEFINITIONS`` maps a suite name to that definition and ``SUITES`` to its class. A new
suite is a new module with a ``SUITE`` and one entry in the tuple below; templates whose turns
span two suites live in ``cross.py``.
"""

from envs.text.suites import bank, calculator, filesystem, messaging, travel
from envs.text.suites.bank import Bank
from envs.text.suites.base import CallFailed, SuiteDefinition, ToolError, ToolSuite, World, read_only
from envs.text.suites.calculator import Calculator
from envs.text.suites.filesystem import FileSystem
from envs.text.suites.messaging import Messaging
from envs.text.suites.travel import Travel

SUITE_DEFINITIONS: dict[str, SuiteDefinition] = {
    suite.name: suite for suite in (filesystem.SUITE, calculator.SUITE, messaging.SUITE, bank.SUITE, travel.SUITE)
}
SUITES: dict[str, type[ToolSuite]] = {name: suite.tools for name, suite in SUITE_DEFINITIONS.items()}

__all__ = [
    "SUITES",
    "SUITE_DEFINITIONS",
    "Bank",
    "Calculator",
    "CallFailed",
    "FileSystem",
    "Messaging",
    "SuiteDefinition",
    "ToolError",
    "ToolSuite",
    "Travel",
    "World",
    "read_only",
]
