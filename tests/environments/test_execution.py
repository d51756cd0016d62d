"""A turn's tool calls run in parallel threads with a timeout and an output cap; unknown tools, wrong arguments,
huge outputs, raising and hanging tools become error observations with counted kinds, never exceptions."""

from __future__ import annotations

import asyncio
import json
import threading
import time

from genalign.environments import (
    ERROR_KINDS,
    Environment,
    ModelTurn,
    Observation,
    Tool,
    ToolLimits,
    abandoned_calls,
    parse_tool_calls,
    run_tool_calls,
    tool,
)


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first
        b: the second
    """
    return a + b


def huge() -> str:
    """Return ten megabytes of text."""
    return "x" * 10_000_000


def explode(message: str) -> str:
    """Raise an error.

    Args:
        message: the error message
    """
    raise RuntimeError(message)


_release = threading.Event()


def hang() -> str:
    """Never answer (until the test releases it)."""
    _release.wait(30)
    return "late"


def nap(seconds: float) -> str:
    """Sleep a while.

    Args:
        seconds: how long
    """
    time.sleep(seconds)
    return f"slept {seconds}"


async def async_add(a: int, b: int) -> int:
    """Add two integers, asynchronously.

    Args:
        a: the first
        b: the second
    """
    await asyncio.sleep(0.01)
    return a + b


TOOLS = {t.__name__: Tool.from_function(t) for t in (add, huge, explode, hang, nap, async_add)}


def run(text: str, limits: ToolLimits | None = None):
    limits = limits or ToolLimits()
    _, calls = parse_tool_calls(text, limits)
    return run_tool_calls(calls, TOOLS, limits)


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_a_good_call_answers_with_the_tools_value():
    (result,) = run(call("add", a=2, b=3))
    assert result.ok and result.output == Observation(text="5") and result.message() == {
        "role": "tool", "name": "add", "content": "5"
    }  # fmt: skip


def test_unknown_tool_and_wrong_arguments_are_error_observations():
    results = run(call("ad", a=1, b=2) + call("add", a=1) + call("add", a=1, c=2) + call("add", a="1", b=2))
    assert [r.error for r in results] == ["unknown_tool", "bad_arguments", "bad_arguments", "bad_arguments"]
    assert results[0].output.text.startswith("Error (unknown_tool): no tool named 'ad'. Did you mean 'add'")
    assert "missing required argument 'b'" in results[1].output.text
    assert "unexpected argument 'c'" in results[2].output.text
    assert "'a' must be an integer, got a string" in results[3].output.text


def test_a_huge_output_is_truncated_and_counted():
    (result,) = run(call("huge"), ToolLimits(max_output_chars=1000))
    assert result.ok and result.truncated
    assert result.output.text.startswith("x" * 1000) and result.output.text.endswith(
        "[output truncated: 9999000 more characters]"
    )
    from genalign.environments import TurnRecord

    assert TurnRecord.count([result])["truncated"] == 1


def test_a_raising_tool_is_a_tool_error_observation():
    (result,) = run(call("explode", message="boom"))
    assert result.error == "tool_error" and result.output.text == "Error (tool_error): RuntimeError: boom"


def test_a_hanging_tool_is_abandoned_at_its_timeout_and_the_others_still_answer():
    before = abandoned_calls()
    started = time.monotonic()
    results = run(call("hang") + call("add", a=1, b=1), ToolLimits(timeout_s=0.5))
    elapsed = time.monotonic() - started
    assert [r.error for r in results] == ["timeout", None] and results[1].output.text == "2"
    assert "within 0.5 s" in results[0].output.text
    assert 0.45 < elapsed < 1.5
    assert abandoned_calls() == before + 1
    _release.set()  # let the abandoned thread finish; its late answer is ignored
    for _ in range(100):
        if abandoned_calls() == before:
            break
        time.sleep(0.01)
    assert abandoned_calls() == before
    _release.clear()


def test_calls_run_in_parallel_up_to_max_parallel():
    started = time.monotonic()
    results = run("".join(call("nap", seconds=0.3) for _ in range(4)), ToolLimits(max_parallel=4))
    assert all(r.ok for r in results) and time.monotonic() - started < 0.9
    started = time.monotonic()
    run("".join(call("nap", seconds=0.2) for _ in range(4)), ToolLimits(max_parallel=2))
    assert 0.38 < time.monotonic() - started < 1.2


def test_async_tools_are_awaited():
    (result,) = run(call("async_add", a=20, b=22))
    assert result.ok and result.output.text == "42"


def test_every_failure_kind_is_counted_in_one_turn():
    class Counting(Environment):
        @tool
        def add(self, a: int, b: int) -> int:
            """Add.

            Args:
                a: first
                b: second
            """
            return a + b

    env = Counting(tools=[explode, hang], tool_limits={"timeout_s": 0.3, "max_calls": 7, "max_call_chars": 200})
    text = (
        call("add", a=1, b=2) + "<tool_call>{oops</tool_call>" + call("nope") + call("add", a=1)
        + call("explode", message="x") + call("hang") + "<tool_call>" + "[" * 300 + "</tool_call>" + call("add", a=1, b=1)
    )  # fmt: skip
    record = env.step(ModelTurn(text)).record
    assert record.counts == {
        "calls": 8, "ok": 1, "truncated": 0, "bad_json": 1, "unknown_tool": 1, "bad_arguments": 1,
        "tool_error": 1, "timeout": 1, "too_large": 1, "too_many_calls": 1,
    }  # fmt: skip
    assert [r.error for r in record.results] == [None, "bad_json", "unknown_tool", "bad_arguments", "tool_error",
                                                 "timeout", "too_large", "too_many_calls"]  # fmt: skip
    assert set(record.counts) == {"calls", "ok", "truncated", *ERROR_KINDS}
    _release.set()
    _release.clear()


def test_an_environments_methods_run_one_after_the_other_in_call_order():
    class Log(Environment):
        def __init__(self):
            super().__init__()
            self.seen: list[int] = []

        @tool
        def note(self, i: int) -> str:
            """Append a number.

            Args:
                i: the number
            """
            time.sleep(0.02 * (5 - i))  # later calls are quicker: a race would reorder them
            self.seen.append(i)
            return str(len(self.seen))

    env = Log()
    results = env.step(ModelTurn("".join(call("note", i=i) for i in range(5)))).record.results
    assert env.seen == [0, 1, 2, 3, 4] and [r.output.text for r in results] == ["1", "2", "3", "4", "5"]


def test_a_timed_out_method_stops_the_rest_of_its_sequence():
    class Slow(Environment):
        tool_limits = ToolLimits(timeout_s=0.3)

        @tool
        def wait(self) -> str:
            """Wait for the release."""
            _release.wait(30)
            return "done"

        @tool
        def ping(self) -> str:
            """Answer at once."""
            return "pong"

    results = Slow().step(ModelTurn(call("wait") + call("ping"))).record.results
    assert [r.error for r in results] == ["timeout", "timeout"] and "not run" in results[1].output.text
    _release.set()
    _release.clear()
