"""JSON schemas for tool methods, generated from their signatures and docstrings.

A tool is a public method with type hints and a Google-style docstring::

    def transfer(self, source: str, target: str, amount: float) -> dict:
        \"\"\"Move money between two accounts.

        Args:
            source: Account to take the money from.
            target: Account to put the money into.
            amount: Positive amount, in the account currency.
        \"\"\"

becomes the function schema chat templates expect (the OpenAI "function" layout)::

    {"name": "transfer", "description": "Move money between two accounts.",
     "parameters": {"type": "object",
                    "properties": {"source": {"type": "string", "description": "..."}, ...},
                    "required": ["source", "target", "amount"]}}

The same type hints drive :func:`validate_arguments`, so what the schema promises is what the
executor checks.
"""

from __future__ import annotations

import functools
import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Union

JsonDict = dict[str, Any]

_PRIMITIVE_JSON_TYPES: dict[type, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


@functools.cache
def _signature_info(function: Callable[..., Any]) -> tuple[dict[str, Any], dict[str, inspect.Parameter]]:
    """(type hints, parameters without self) of a plain function; cached, as tools never change."""
    params = {p.name: p for p in inspect.signature(function).parameters.values() if p.name != "self"}
    return typing.get_type_hints(function), params


def signature_info(method: Callable[..., Any]) -> tuple[dict[str, Any], dict[str, inspect.Parameter]]:
    """Type hints and parameters of a function or bound method (``self`` excluded)."""
    return _signature_info(getattr(method, "__func__", method))


class SchemaError(ValueError):
    """A tool method cannot be described by a schema (missing hints or docs): a bug in a suite."""


def json_type(annotation: Any) -> JsonDict:
    """JSON-schema fragment for one Python annotation (str, int, float, bool, list[T], dict, Optional)."""
    if annotation in _PRIMITIVE_JSON_TYPES:
        return {"type": _PRIMITIVE_JSON_TYPES[annotation]}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (list, tuple):
        item = json_type(args[0]) if args else {}
        return {"type": "array", "items": item} if item else {"type": "array"}
    if origin is dict or annotation is dict:
        return {"type": "object"}
    if origin in (Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        if len(non_null) == 1:  # Optional[T]: the null case is the parameter's default
            return json_type(non_null[0])
        return {"anyOf": [json_type(a) for a in non_null]}
    if annotation is list:
        return {"type": "array"}
    if annotation is typing.Any:
        return {}
    raise SchemaError(f"no JSON type for annotation {annotation!r}")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (summary paragraph, {argument name: description})."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary_lines: list[str] = []
    arg_docs: dict[str, str] = {}
    section = "summary"
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        if re.fullmatch(r"(Args|Arguments|Parameters):", stripped):
            section, current = "args", None
            continue
        if re.fullmatch(r"[A-Z][A-Za-z ]*:", stripped):  # Returns:, Raises:, Example: ...
            section, current = "other", None
            continue
        if section == "summary":
            if not stripped and summary_lines:
                section = "body"  # only the first paragraph is the description
            elif stripped:
                summary_lines.append(stripped)
        elif section == "args" and stripped:
            match = re.match(r"(\w+)\s*(\([^)]*\))?\s*:\s*(.*)", stripped)
            if match and not line.startswith(" " * 8):
                current = match.group(1)
                arg_docs[current] = match.group(3).strip()
            elif current is not None:  # continuation line of the previous argument
                arg_docs[current] = f"{arg_docs[current]} {stripped}".strip()
    return " ".join(summary_lines), arg_docs


def function_schema(method: Callable[..., Any], name: str | None = None) -> JsonDict:
    """Schema of one tool method (bound or unbound); ``self`` is skipped.

    Raises:
        SchemaError: a parameter lacks a type hint or a docstring line, or the method lacks a summary.
    """
    name = name or method.__name__
    summary, arg_docs = parse_docstring(method.__doc__)
    if not summary:
        raise SchemaError(f"tool {name!r} has no docstring summary")
    hints, params = signature_info(method)
    properties: JsonDict = {}
    required: list[str] = []
    for param in params.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise SchemaError(f"tool {name!r}: *args/**kwargs cannot be described")
        if param.name not in hints:
            raise SchemaError(f"tool {name!r}: parameter {param.name!r} has no type hint")
        if param.name not in arg_docs:
            raise SchemaError(f"tool {name!r}: parameter {param.name!r} is not documented under Args:")
        prop = json_type(hints[param.name])
        prop["description"] = arg_docs[param.name]
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
        else:
            prop["default"] = param.default
        properties[param.name] = prop
    return {
        "name": name,
        "description": summary,
        "parameters": {"type": "object", "properties": properties, "required": required},
    }


def _matches(value: Any, annotation: Any) -> bool:
    """Whether a JSON-decoded value fits a type hint (ints are accepted where floats are)."""
    if annotation is typing.Any:
        return True
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation in (str, bool, type(None)):
        return type(value) is annotation
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if origin in (list, tuple) or annotation is list:
        return isinstance(value, list) and all(_matches(v, args[0]) for v in value) if args else isinstance(value, list)
    if origin is dict or annotation is dict:
        return isinstance(value, dict)
    return isinstance(value, annotation)


def validate_arguments(method: Callable[..., Any], arguments: Any) -> str | None:
    """Check decoded call arguments against the method's signature.

    Returns:
        None when the call is valid, else a one-line explanation meant for the model.
    """
    if not isinstance(arguments, dict):
        return f"arguments must be a JSON object, got {type(arguments).__name__}"
    hints, params = signature_info(method)
    unknown = sorted(set(arguments) - set(params))
    if unknown:
        return f"unexpected argument(s) {unknown}; expected some of {sorted(params)}"
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty and n not in arguments]
    if missing:
        return f"missing required argument(s) {missing}"
    for arg_name, value in arguments.items():
        if not _matches(value, hints[arg_name]):
            expected = json_type(hints[arg_name]).get("type", "value")
            return f"argument {arg_name!r} must be of type {expected}, got {type(value).__name__}"
    return None
