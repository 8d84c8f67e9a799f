"""JSON schemas generated from signatures and docstrings, and argument validation."""

import pytest

from envs.text.schema import SchemaError, function_schema, parse_docstring, validate_arguments
from envs.text.suites import SUITES


def example(path: str, count: int, ratio: float = 0.5, tags: list[str] | None = None, strict: bool = False) -> str:
    """Do an example thing.

    More details that are not part of the description.

    Args:
        path: The path to use,
            continued on a second line.
        count: How many.
        ratio: A ratio.
        tags: Optional labels.
        strict: Be strict.

    Returns:
        Something.
    """
    return path


def test_schema_has_name_summary_types_and_required_params():
    schema = function_schema(example)
    assert schema["name"] == "example"
    assert schema["description"] == "Do an example thing."
    props = schema["parameters"]["properties"]
    assert {k: v["type"] for k, v in props.items()} == {
        "path": "string",
        "count": "integer",
        "ratio": "number",
        "tags": "array",
        "strict": "boolean",
    }
    assert props["tags"]["items"] == {"type": "string"}
    assert props["path"]["description"] == "The path to use, continued on a second line."
    assert props["ratio"]["default"] == 0.5
    assert schema["parameters"]["required"] == ["path", "count"]


def test_undocumented_or_unhinted_parameters_are_rejected():
    def no_doc(x: int) -> int:
        """Summary only."""
        return x

    def no_hint(x):  # type: ignore[no-untyped-def]
        """Summary.

        Args:
            x: A value.
        """
        return x

    with pytest.raises(SchemaError):
        function_schema(no_doc)
    with pytest.raises(SchemaError):
        function_schema(no_hint)


def test_docstring_parser_stops_args_at_next_section():
    summary, args = parse_docstring(example.__doc__)
    assert summary == "Do an example thing." and set(args) == {"path", "count", "ratio", "tags", "strict"}


def test_every_suite_tool_has_a_complete_schema():
    for suite in SUITES.values():
        for schema in suite.tool_schemas():
            assert schema["description"]
            for prop in schema["parameters"]["properties"].values():
                assert prop["description"] and ("type" in prop or "anyOf" in prop)


def test_self_is_not_a_parameter_of_method_schemas():
    schema = {s["name"]: s for s in SUITES["bank"].tool_schemas()}["transfer"]
    assert list(schema["parameters"]["properties"]) == ["source", "target", "amount"]


@pytest.mark.parametrize(
    "arguments, problem",
    [
        ({"path": "a", "count": 1}, None),
        ({"path": "a", "count": 1, "ratio": 2}, None),  # an int is a valid number
        ({"path": "a"}, "missing"),
        ({"path": "a", "count": "1"}, "type integer"),
        ({"path": "a", "count": True}, "type integer"),  # bool is not an int in JSON
        ({"path": "a", "count": 1, "colour": "red"}, "unexpected"),
        ({"path": "a", "count": 1, "tags": ["x", 2]}, "type array"),
        (["a", 1], "JSON object"),
    ],
)
def test_argument_validation(arguments, problem):
    result = validate_arguments(example, arguments)
    assert (result is None) if problem is None else (problem in result)
