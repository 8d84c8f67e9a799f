"""The tool-call parser: well-formed, several-call and malformed assistant messages."""

from envs.text.parsing import CallParseError, ToolCall, format_calls, has_tool_call, parse_tool_calls


def test_single_well_formed_call_is_decoded():
    message = 'Sure.\n<tool_call>{"name": "get_balance", "arguments": {"account": "checking"}}</tool_call>'
    assert parse_tool_calls(message) == [ToolCall("get_balance", {"account": "checking"})]


def test_several_calls_in_one_message_keep_their_order():
    message = (
        '<tool_call>{"name": "a", "arguments": {}}</tool_call> text '
        '<tool_call>\n{"name": "b", "arguments": {"x": 1}}\n</tool_call>'
    )
    assert [c.name for c in parse_tool_calls(message)] == ["a", "b"]


def test_plain_reply_has_no_calls_and_ends_the_turn():
    assert parse_tool_calls("All done, your balance is 12.") == []
    assert not has_tool_call("All done.")


def test_invalid_json_becomes_a_parse_error_not_an_exception():
    (item,) = parse_tool_calls('<tool_call>{"name": "a", "arguments": {</tool_call>')
    assert isinstance(item, CallParseError) and "JSON" in item.reason


def test_missing_name_and_non_object_arguments_are_errors():
    items = parse_tool_calls(
        '<tool_call>{"arguments": {}}</tool_call><tool_call>{"name": "a", "arguments": [1]}</tool_call>'
        "<tool_call>[1, 2]</tool_call>"
    )
    assert all(isinstance(i, CallParseError) for i in items) and len(items) == 3


def test_well_formed_calls_survive_next_to_a_malformed_one():
    items = parse_tool_calls('<tool_call>oops</tool_call><tool_call>{"name": "pwd", "arguments": {}}</tool_call>')
    assert isinstance(items[0], CallParseError) and items[1] == ToolCall("pwd", {})


def test_unclosed_last_tag_is_still_read():
    assert parse_tool_calls('<tool_call>{"name": "pwd", "arguments": {}}') == [ToolCall("pwd", {})]


def test_arguments_given_as_json_string_are_accepted():
    assert parse_tool_calls('<tool_call>{"name": "f", "arguments": "{\\"x\\": 2}"}</tool_call>') == [ToolCall("f", {"x": 2})]


def test_a_flood_of_calls_is_capped():
    items = parse_tool_calls('<tool_call>{"name": "pwd", "arguments": {}}</tool_call>' * 1000)
    assert len(items) == 33 and isinstance(items[-1], CallParseError)


def test_format_calls_round_trips():
    calls = [ToolCall("transfer", {"source": "a", "target": "b", "amount": 1.5}), ToolCall("pwd", {})]
    assert parse_tool_calls(format_calls(calls, "Working on it.")) == calls
