"""The tool-suite contract and the world that holds several suites.

A suite is a class whose public methods are the tools a model may call and whose public
attributes are its state. Subclasses declare ``name``, implement ``_load(config)`` and
``default_config()``, and mark methods that never change state with :func:`read_only`
(the scripted noisy policy and the tests use this to know which check should catch a mistake).

Instances are built from a plain-data initial-state config (JSON-like dicts and lists), are
deep-copyable, and compare equal exactly when all public state is equal.
"""

from __future__ import annotations

import inspect
import pickle
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from envs.text.parsing import ToolCall
from envs.text.schema import JsonDict, function_schema, signature_info, validate_arguments


def copy_plain_data(value: Any) -> Any:
    """Deep copy of plain data (dicts, lists, sets, numbers, strings).

    A pickle round trip runs in C and is several times faster than ``copy.deepcopy`` on the
    large states of long-context tasks.
    """
    return pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


class ToolError(Exception):
    """A tool refused a call (unknown file, insufficient funds...): its message goes to the model."""


def read_only(method: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a tool as never changing state (a query)."""
    method._read_only = True  # type: ignore[attr-defined]
    return method


class ToolSuite:
    """Base class: public methods are tools, public attributes are state."""

    name: ClassVar[str] = "suite"
    description: ClassVar[str] = ""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        merged = self.default_config()
        if config:
            unknown = set(config) - set(merged)
            if unknown:
                raise ValueError(f"{type(self).__name__}: unknown config key(s) {sorted(unknown)}; known: {sorted(merged)}")
            merged.update(config)
        self._load(copy_plain_data(merged))  # the instance never shares data with its config

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """The initial state used when a config omits a key."""
        return {}

    def _load(self, config: dict[str, Any]) -> None:
        raise NotImplementedError

    @classmethod
    def tool_names(cls) -> list[str]:
        """Names of the public methods that are tools, in definition order (base classes first)."""
        if cls in _TOOL_NAMES_CACHE:
            return list(_TOOL_NAMES_CACHE[cls])
        names: list[str] = []
        for klass in reversed(cls.__mro__):
            if not (isinstance(klass, type) and issubclass(klass, ToolSuite)) or klass is ToolSuite:
                continue
            for n, member in vars(klass).items():
                if not n.startswith("_") and inspect.isfunction(member) and n not in _NOT_TOOLS and n not in names:
                    names.append(n)
        _TOOL_NAMES_CACHE[cls] = tuple(names)
        return names

    @classmethod
    def tool_schemas(cls) -> list[JsonDict]:
        """One JSON function schema per tool (see :mod:`envs.text.schema`); a fresh copy each call."""
        if cls not in _SCHEMA_CACHE:
            _SCHEMA_CACHE[cls] = [function_schema(getattr(cls, n)) for n in cls.tool_names()]
        return copy_plain_data(_SCHEMA_CACHE[cls])

    @classmethod
    def is_read_only(cls, tool_name: str) -> bool:
        return bool(getattr(getattr(cls, tool_name), "_read_only", False))

    def public_state(self) -> dict[str, Any]:
        """All public attributes, by reference (no copy): what the state check compares."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def state(self) -> dict[str, Any]:
        """A deep copy of all public attributes, safe to keep or serialise."""
        return copy_plain_data(self.public_state())

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.public_state() == other.public_state()

    def __deepcopy__(self, memo: dict[int, Any]) -> ToolSuite:
        return copy_plain_data(self)

    __hash__ = None  # type: ignore[assignment]  # mutable state

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.state()!r})"


_SCHEMA_CACHE: dict[type, list[JsonDict]] = {}  # tools never change after class creation
_TOOL_NAMES_CACHE: dict[type, tuple[str, ...]] = {}
_NOT_TOOLS = {"default_config", "tool_names", "tool_schemas", "is_read_only", "state", "public_state"}


def _coerce_floats(method: Callable[..., Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """JSON writes 100 for 100.0; turn ints into floats where a float is declared, so a state
    or result reached through ``100`` is identical (also as JSON) to one reached through ``100.0``."""
    hints, _ = signature_info(method)
    out = dict(arguments)
    for k, v in arguments.items():
        hint = hints.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and (hint is float or hint == float | None):
            out[k] = float(v)
        elif isinstance(v, list) and hint == list[float]:
            out[k] = [float(x) if isinstance(x, int) and not isinstance(x, bool) else x for x in v]
    return out


class CallFailed(Exception):
    """A call could not be executed; ``kind`` is one of unknown_tool, bad_arguments, tool_error."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class World:
    """Several suite instances acting as one tool environment.

    Tool names must be unique across the suites; ``available`` optionally restricts which tools
    may be called (the missing-function variant withholds one until a later turn).
    """

    def __init__(self, suites: Mapping[str, ToolSuite]) -> None:
        self.suites: dict[str, ToolSuite] = dict(suites)
        self._owner: dict[str, str] = {}
        for suite_name, suite in self.suites.items():
            for tool in type(suite).tool_names():
                if tool in self._owner:
                    raise ValueError(f"tool {tool!r} defined by both {self._owner[tool]!r} and {suite_name!r}")
                self._owner[tool] = suite_name

    @classmethod
    def from_configs(cls, configs: Mapping[str, Mapping[str, Any]], registry: Mapping[str, type[ToolSuite]]) -> World:
        """Build fresh instances: ``configs`` maps suite name -> initial-state config."""
        unknown = set(configs) - set(registry)
        if unknown:
            raise ValueError(f"unknown suite(s) {sorted(unknown)}; known: {sorted(registry)}")
        return cls({name: registry[name](config) for name, config in configs.items()})

    def tool_names(self) -> list[str]:
        return list(self._owner)

    def suite_of(self, tool_name: str) -> ToolSuite:
        return self.suites[self._owner[tool_name]]

    def is_read_only(self, tool_name: str) -> bool:
        return type(self.suite_of(tool_name)).is_read_only(tool_name)

    def schemas(self, available: set[str] | None = None) -> list[JsonDict]:
        """Schemas of the (available) tools, grouped by suite in definition order."""
        out = []
        for suite in self.suites.values():
            out += [s for s in type(suite).tool_schemas() if available is None or s["name"] in available]
        return out

    def execute(self, call: ToolCall, available: set[str] | None = None) -> Any:
        """Run one call and return its JSON-serialisable result.

        Raises:
            CallFailed: unknown or unavailable tool, invalid arguments, or the tool raised.
        """
        if call.name not in self._owner or (available is not None and call.name not in available):
            names = sorted(available if available is not None else self._owner)
            raise CallFailed("unknown_tool", f"unknown tool {call.name!r}; available tools: {names}")
        method = getattr(self.suite_of(call.name), call.name)
        problem = validate_arguments(method, call.arguments)
        if problem:
            raise CallFailed("bad_arguments", f"{call.name}: {problem}")
        try:
            return method(**_coerce_floats(method, call.arguments))
        except ToolError as exc:
            raise CallFailed("tool_error", f"{call.name}: {exc}") from None
        except Exception as exc:  # a tool bug or an absurd input must not end the episode
            raise CallFailed("tool_error", f"{call.name}: {type(exc).__name__}: {exc}") from None

    def state(self) -> dict[str, dict[str, Any]]:
        """A deep copy of every suite's public state, keyed by suite name."""
        return {name: suite.state() for name, suite in self.suites.items()}

    def public_state(self) -> dict[str, dict[str, Any]]:
        """Like :meth:`state` but by reference: for comparisons only."""
        return {name: suite.public_state() for name, suite in self.suites.items()}

    def __deepcopy__(self, memo: dict[int, Any]) -> World:
        return World({k: copy_plain_data(v) for k, v in self.suites.items()})


# ---- what a suite module declares for the task generator and the scripted policies -----------------


@dataclass
class Draft:
    """A turn as a template writes it; ``vague``/``clarification`` allow the missing-parameter variant."""

    user: str
    calls: list[ToolCall]
    vague: str | None = None
    clarification: str | None = None
    long_output: bool = False


def C(tool: str, /, **arguments: Any) -> ToolCall:  # noqa: N802  (short: templates read like call lists)
    return ToolCall(tool, arguments)


Template = Callable[[random.Random, World], "Draft | None"]
"""(rng, scratch world) -> the turn, or None when the template does not apply in this state."""


@dataclass(frozen=True)
class SuiteDefinition:
    """One suite as ``envs.text.tasks`` and ``envs.text.policies`` use it.

    Attributes:
        tools: The ``ToolSuite`` class (its methods are the tools, its attributes the state).
        initial_config: ``(rng, long) -> config`` of a task's initial state (``long``: the
            long-context variant's much larger state).
        templates: Turn templates for ordinary turns.
        long_templates: Templates with long outputs, for the first turn of a long-context task.
        distractor: ``initial config -> call`` that always succeeds and always changes the state
            (the noisy policy's "extra call" mistake).
    """

    tools: type[ToolSuite]
    initial_config: Callable[[random.Random, bool], dict[str, Any]]
    templates: tuple[Template, ...]
    long_templates: tuple[Template, ...]
    distractor: Callable[[dict[str, Any]], ToolCall]

    @property
    def name(self) -> str:
        return self.tools.name
