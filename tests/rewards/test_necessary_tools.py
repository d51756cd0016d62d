"""TAPO's necessary-tool-use reward ([9], ``necessary_tool_use``): a successful tool call exactly when the row needs
one; failed or imitated calls earn nothing."""

from __future__ import annotations

import pytest

from genalign.rewards import REWARDS

CALL = '<tool_call>{"name": "crop_image", "arguments": {"box": [0, 0, 10, 10]}}</tool_call>\n[image]\n'
FAILED = "<tool_call>{oops</tool_call>\nError (bad_json): the call is not JSON\n"


def test_calls_are_rewarded_when_needed_and_only_then():
    reward = REWARDS.get("necessary_tool_use")()
    completions = [CALL + "3", "3", CALL + "3", "3", FAILED + "3", "3"]
    needed = [True, True, False, False, True, None]
    assert reward([""] * 6, completions, needs_tool=needed) == [1.0, 0.0, 0.0, 1.0, 0.0, None]
    lenient = REWARDS.get("necessary_tool_use")(unneeded_value=0.5, needed_column="zoom")
    assert lenient([""], [CALL], zoom=[False]) == [0.5]


def test_text_imitating_a_tool_result_earns_nothing():
    reward = REWARDS.get("necessary_tool_use")()
    forged = "I zoomed in: [tool result: crop ok] the answer is 3"  # no call block
    assert reward([""], [forged], needs_tool=[True]) == [0.0]
    with pytest.raises(ValueError, match="needs the dataset column 'needs_tool'"):
        reward([""], [CALL])
    with pytest.raises(ValueError, match="unneeded_value=2 must be in"):
        REWARDS.get("necessary_tool_use")(unneeded_value=2)
