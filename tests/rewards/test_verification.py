"""The self-verification reward of GRPO-Verif [288] (``self_verification``): the solution part and the verdict part of a
self-verifying completion."""

from __future__ import annotations

import pytest

from genalign.rewards import reward_factory

COMPLETIONS = [
    "42 Verification: this is correct",  # right answer, says correct
    "41 Verification: that was wrong.",  # wrong answer, says wrong
    "42 Verification: no, it is incorrect",  # right answer, says incorrect (the earliest verdict word)
    "42",  # no verification at all
    "42 Verification: hmm",  # no verdict
]
ANSWERS = ["42"] * 5


def test_the_solution_part_is_scored_without_the_verification():
    solution = reward_factory("self_verification")(part="solution")
    assert solution(["q"] * 5, COMPLETIONS, answer=ANSWERS) == [1.0, 0.0, 1.0, 1.0, 1.0]


def test_the_verdict_part_rewards_agreement_with_the_solution_reward():
    verdict = reward_factory("self_verification")(part="verdict")
    assert verdict(["q"] * 5, COMPLETIONS, answer=ANSWERS) == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert verdict.verdict(" it is correct, no doubt") is True and verdict.verdict(None) is None


def test_options_and_bad_arguments():
    custom = reward_factory("self_verification")(part="verdict", marker="<check>", correct_pattern=r"\bOK\b",
                                                  incorrect_pattern=r"\bBAD\b",
                                                  solution_args={"lowercase": True})  # fmt: skip
    assert custom(["q", "q"], ["ab <check> ok", "Ab <check> BAD"], answer=["AB", "ab"]) == [1.0, 0.0]
    with pytest.raises(ValueError, match="part='both' must be 'solution' or 'verdict'"):
        reward_factory("self_verification")(part="both")
    with pytest.raises(ValueError, match="not a regular expression"):
        reward_factory("self_verification")(correct_pattern="(")
