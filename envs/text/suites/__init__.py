"""Tool suites written for this project; ``SUITES`` maps a suite name to its class."""

from envs.text.suites.bank import Bank
from envs.text.suites.base import CallFailed, ToolError, ToolSuite, World, read_only
from envs.text.suites.calculator import Calculator
from envs.text.suites.filesystem import FileSystem
from envs.text.suites.messaging import Messaging
from envs.text.suites.travel import Travel

SUITES: dict[str, type[ToolSuite]] = {cls.name: cls for cls in (FileSystem, Calculator, Messaging, Bank, Travel)}

__all__ = [
    "SUITES",
    "Bank",
    "Calculator",
    "CallFailed",
    "FileSystem",
    "Messaging",
    "ToolError",
    "ToolSuite",
    "Travel",
    "World",
    "read_only",
]
