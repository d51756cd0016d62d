"""The tool-use counting rewards (``tool_calls``, ``tool_errors``) count a multi-turn transcript's blocks and error
observations, by hand-counted examples."""

from __future__ import annotations

import pytest

from genalign.environments.parsing import OPEN_TAG
from genalign.environments.types import ERROR_KINDS
from genalign.rewards import reward_factory, tool_use

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "2 * 3"}}</tool_call>'
TRANSCRIPT = (  # a call with bad JSON, an error, a good call, its answer, a final answer (template text skipped)
    '<tool_call>{"name": "calculator", "arguments": {"expression": "2 * 3"}</tool_call>\n'
    "tool\nError (bad_json): the tool call is not valid JSON (Expecting ',' delimiter).\n"
    f"{CALL}\ntool\n6\nAnswer: 6"
)


def test_tool_calls_counts_every_block_the_model_opened():
    reward = reward_factory("tool_calls")()
    assert reward(["p"] * 4, [TRANSCRIPT, "Answer: 6", CALL * 3, [{"role": "assistant", "content": CALL}]]) == [
        2.0, 0.0, 3.0, 1.0,
    ]  # fmt: skip


def test_tool_errors_counts_error_lines_by_kind():
    transcript = TRANSCRIPT + "\ntool\nError (tool_error): CalculatorError: division by zero.\nsaid Error (timeout): no"
    assert reward_factory("tool_errors")()(["p"] * 2, [transcript, "Answer: 6"]) == [2.0, 0.0]  # not mid-line
    assert reward_factory("tool_errors")(kinds=["tool_error"])(["p"], [transcript]) == [1.0]
    assert reward_factory("tool_errors")(kinds=["tool_error", "bad_json"])(["p"], [transcript]) == [2.0]
    with pytest.raises(ValueError, match=r"kinds=\['bad_jsn'\] are not error kinds.*bad_json"):
        reward_factory("tool_errors")(kinds=["bad_jsn"])  # when the reward is built, before any scoring


def test_the_markers_are_the_environments_own():
    assert tool_use.OPEN_TAG == OPEN_TAG and tool_use.ERROR_KINDS == ERROR_KINDS
