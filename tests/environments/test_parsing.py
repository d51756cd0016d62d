"""Tool calls are read from Hermes/Qwen <tool_call> blocks as JSON with size and depth limits; whatever cannot be read
becomes a call with an error kind, never an exception."""

from __future__ import annotations

import json
import time

from genalign.environments import ToolLimits, parse_tool_calls


def block(payload) -> str:
    return "<tool_call>\n" + (payload if isinstance(payload, str) else json.dumps(payload)) + "\n</tool_call>"


def test_one_call_and_the_text_around_it():
    text = "I will add.\n" + block({"name": "add", "arguments": {"a": 1, "b": [2, {"c": None}]}}) + "\nDone."
    content, calls = parse_tool_calls(text)
    assert content == "I will add.\n\nDone."
    (call,) = calls
    assert (call.index, call.name, call.arguments, call.error) == (0, "add", {"a": 1, "b": [2, {"c": None}]}, None)
    assert call.as_message_call() == {"type": "function", "function": {"name": "add", "arguments": call.arguments}}


def test_several_calls_keep_their_order():
    text = "".join(block({"name": f"t{i}", "arguments": {"i": i}}) for i in range(3))
    content, calls = parse_tool_calls(text)
    assert content == "" and [(c.index, c.name, c.arguments["i"]) for c in calls] == [
        (0, "t0", 0),
        (1, "t1", 1),
        (2, "t2", 2),
    ]


def test_a_turn_without_blocks_has_no_calls():
    assert parse_tool_calls("The answer is 4.") == ("The answer is 4.", [])


def test_accepted_variants_string_arguments_alias_missing_arguments_and_an_unclosed_last_block():
    text = (
        block({"name": "a", "arguments": json.dumps({"x": 1})})
        + block({"name": "b", "parameters": {"y": 2}})
        + block({"name": "c", "id": "ignored"})
        + '<tool_call>{"name": "d", "arguments": {"z": 3}}'
    )
    _, calls = parse_tool_calls(text)
    assert [(c.name, dict(c.arguments), c.error) for c in calls] == [
        ("a", {"x": 1}, None), ("b", {"y": 2}, None), ("c", {}, None), ("d", {"z": 3}, None),
    ]  # fmt: skip


def test_malformed_calls_are_bad_json_with_a_message():
    cases = [
        "{'name': 'a', 'arguments': {}}",  # Python, not JSON
        '{"name": "a", "arguments": {"x": 1}',  # unbalanced
        "[1, 2]",  # not an object
        '{"arguments": {}}',  # no name
        '{"name": "", "arguments": {}}',
        '{"name": "a", "arguments": [1]}',  # arguments not an object
        '{"name": "a", "arguments": "{not json"}',
        '{"name": "a", "arguments": {"x": NaN}}',  # not JSON we accept
        '{"name": "a", "arguments": {"x": ' + "9" * 5000 + "}}",  # beyond Python's int-string limit
        "",
    ]
    _, calls = parse_tool_calls("".join(block(c) for c in cases), ToolLimits(max_calls=20))
    assert len(calls) == len(cases)
    for call in calls:
        assert call.error == "bad_json" and call.message and call.arguments == {}, call
    assert calls[5].name == "a" and calls[6].name == "a"  # a readable name is kept for the error message


def test_200000_nested_brackets_are_refused_quickly_without_recursion():
    deep = "[" * 200_000 + "]" * 200_000
    started = time.perf_counter()
    _, calls = parse_tool_calls(block(deep) + block('{"name": "a", "arguments": {"x": ' + deep + "}}"))
    assert [c.error for c in calls] == ["too_large", "too_large"]  # over max_call_chars
    generous = ToolLimits(max_call_chars=10**7, max_depth=32)
    _, calls = parse_tool_calls(block(deep) + block('{"name": "a", "arguments": {"x": ' + deep + "}}"), generous)
    assert [c.error for c in calls] == ["too_large", "too_large"]  # over max_depth, found by the linear scan
    assert "deeper than 32" in calls[0].message
    nested_string = '{"name": "a", "arguments": ' + json.dumps(json.dumps({"x": json.loads("[" * 40 + "]" * 40)})) + "}"
    _, calls = parse_tool_calls(block(nested_string), generous)
    assert calls[0].error == "too_large"  # arguments given as a JSON string are limited too
    assert time.perf_counter() - started < 2.0


def test_brackets_inside_strings_do_not_count_towards_the_depth():
    text = block({"name": "echo", "arguments": {"text": '[[[[[[[[[[{{{{{{{{\\"]]]'}})
    _, calls = parse_tool_calls(text, ToolLimits(max_depth=2))
    assert calls[0].error is None and calls[0].arguments["text"].startswith("[[[[")


def test_calls_past_the_limit_become_one_too_many_calls_record():
    text = "".join(block({"name": "t", "arguments": {"i": i}}) for i in range(50))
    _, calls = parse_tool_calls(text, ToolLimits(max_calls=3))
    assert [c.error for c in calls] == [None, None, None, "too_many_calls"]
    assert "47 more" in calls[3].message
