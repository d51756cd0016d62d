"""Reading tool calls from a model turn: Hermes / Qwen-style blocks
``<tool_call>{"name": "...", "arguments": {...}}</tool_call>`` (several per turn).

The arguments are parsed as JSON (``json.loads``, standard library), never evaluated. Before parsing, a block is
refused (kind ``too_large``) when it is longer than ``ToolLimits.max_call_chars`` or nests arrays/objects deeper than
``ToolLimits.max_depth`` (a linear scan, so 200,000 opening brackets cost microseconds and never reach the recursive
parser). ``NaN``/``Infinity`` and numbers of more than 4,300 digits are not JSON we accept (``bad_json``).

Accepted forms of one block, after stripping whitespace: a JSON object with ``"name"`` (a string) and
``"arguments"`` (an object; or a string holding a JSON object, as OpenAI-style APIs write it; or absent, meaning no
arguments). ``"parameters"`` is read as an alias of ``"arguments"`` (Llama-style); other keys are ignored. A last block
without its closing tag (generation stopped at ``</tool_call>`` as a stop string) is read the same way. Anything else
is a ``bad_json`` call with a message for the model.
"""

from __future__ import annotations

import json
import re
from typing import Any

from genalign.environments.types import ToolCall, ToolLimits

OPEN_TAG, CLOSE_TAG = "<tool_call>", "</tool_call>"
_BLOCK_RE = re.compile(re.escape(OPEN_TAG) + r"(.*?)(?:" + re.escape(CLOSE_TAG) + r"|\Z)", re.DOTALL)


def parse_tool_calls(text: str, limits: ToolLimits | None = None) -> tuple[str, list[ToolCall]]:
    """The turn's text outside the blocks, and its tool calls in order.

    At most ``limits.max_calls`` calls are read; when there are more blocks, one extra record with error
    ``too_many_calls`` stands for all of them (nothing past the limit is parsed).
    """
    limits = limits or ToolLimits()
    calls: list[ToolCall] = []
    content_parts: list[str] = []
    position = 0
    for match in _BLOCK_RE.finditer(text):
        content_parts.append(text[position : match.start()])
        position = match.end()
        if len(calls) == limits.max_calls:
            extra = 1 + text.count(OPEN_TAG, position)
            calls.append(
                ToolCall(
                    index=len(calls),
                    name=None,
                    error="too_many_calls",
                    message=f"{extra} more tool call(s) were not run: at most {limits.max_calls} calls per turn.",
                )
            )
            position = len(text)
            break
        calls.append(parse_block(match.group(1), index=len(calls), limits=limits))
    content_parts.append(text[position:])
    return "".join(content_parts).strip(), calls


def parse_block(raw: str, *, index: int, limits: ToolLimits) -> ToolCall:
    """One block's text (between the tags) as a :class:`ToolCall` (with ``error`` set when it cannot be read)."""
    body = raw.strip()
    if len(body) > limits.max_call_chars:
        return _refused(index, body, "too_large", f"the tool call has {len(body)} characters; at most "
                        f"{limits.max_call_chars} are read.")  # fmt: skip
    try:
        data = loads_limited(body, max_depth=limits.max_depth)
    except _TooDeep:
        return _refused(index, body, "too_large", f"the tool call nests deeper than {limits.max_depth} levels.")
    except ValueError as err:
        return _refused(index, body, "bad_json", f"the tool call is not valid JSON ({_reason(err)}).")
    if not isinstance(data, dict):
        return _refused(index, body, "bad_json", 'a tool call must be a JSON object {"name": ..., "arguments": {...}}.')
    name = data.get("name")
    if not isinstance(name, str) or not name:
        return _refused(index, body, "bad_json", 'the tool call has no "name" string.')
    arguments = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = loads_limited(arguments, max_depth=limits.max_depth) if arguments.strip() else {}
        except _TooDeep:
            return _refused(
                index, body, "too_large", f"the arguments nest deeper than {limits.max_depth} levels.", name
            )
        except ValueError as err:
            return _refused(index, body, "bad_json", f"the arguments string is not valid JSON ({_reason(err)}).", name)
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return _refused(index, body, "bad_json", '"arguments" must be a JSON object of argument names to values.', name)
    return ToolCall(index=index, name=name, arguments=arguments, raw=body)


def _refused(index: int, raw: str, kind: Any, message: str, name: str | None = None) -> ToolCall:
    return ToolCall(index=index, name=name, raw=raw, error=kind, message=message)


def _reason(err: ValueError) -> str:
    text = err.msg if isinstance(err, json.JSONDecodeError) else str(err)
    return text if len(text) <= 120 else text[:117] + "..."


class _TooDeep(Exception):
    pass


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def loads_limited(text: str, *, max_depth: int) -> Any:
    """``json.loads`` after checking, in one pass outside strings, that arrays/objects nest at most ``max_depth``
    deep. ``NaN``/``Infinity`` are refused. Raises ``ValueError`` (``json.JSONDecodeError``) for invalid JSON."""
    if nesting_depth(text, stop_above=max_depth) > max_depth:
        raise _TooDeep
    return json.loads(text, parse_constant=_reject_constant)


def nesting_depth(text: str, *, stop_above: int | None = None) -> int:
    """The deepest nesting of ``[``/``{`` outside JSON strings (backslash escapes honoured); linear time. With
    ``stop_above``, the scan stops as soon as the depth exceeds it."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop_above is not None and deepest > stop_above:
                    return deepest
        elif char in "]}":
            depth -= 1
    return deepest
