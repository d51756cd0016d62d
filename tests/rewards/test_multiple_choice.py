"""TW-GRPO's [156] soft multi-choice reward (``multi_choice_credit``): hand-computed partial credit, and the forgery
test: listing every option does not pay."""

from __future__ import annotations

import itertools

import pytest

from genalign.rewards import reward_factory
from genalign.rewards.multiple_choice import MultiChoiceCredit, option_set


def score(completions, answers, **args):
    reward = reward_factory("multi_choice_credit")(**args)
    return reward(["q"] * len(completions), completions, answer=answers)


def test_option_sets_are_read_from_usual_answer_writings():
    assert option_set("A, C", "ABCD") == option_set("AC", "ABCD") == option_set("(A) and (C)", "ABCD") == {"A", "C"}
    assert option_set("b", "ABCD") == {"B"}
    assert (
        option_set("I think A", "ABCD") is None and option_set("E", "ABCD") is None and option_set("", "ABCD") is None
    )


def test_partial_credit_is_the_found_share_of_a_correct_subset():
    completions = ["<answer>A</answer>", "<answer>A, C</answer>", "<answer>C A</answer>", "<answer>A, B</answer>",
                   "<answer>ABCD</answer>", "no tags: A", "<answer>maybe A</answer>"]  # fmt: skip
    assert score(completions, ["AC"] * 7) == [0.5, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert score(["<answer>A</answer>", "<answer>BD</answer>"], [["A", "B", "D"], "B, D"]) == [pytest.approx(1 / 3),
                                                                                                1.0]  # fmt: skip
    assert score(["<answer>A</answer>"], [None]) == [None]  # no correct options: not applicable


def test_listing_every_option_scores_less_than_naming_one_option():
    """Over every correct set of a 4-option question, answering 'ABCD' pays only when all four are correct."""
    labels = "ABCD"
    correct_sets = ["".join(c) for k in range(1, 5) for c in itertools.combinations(labels, k)]  # 15 sets
    everything = score(["<answer>ABCD</answer>"] * 15, correct_sets)
    one = score(["<answer>A</answer>"] * 15, correct_sets)
    assert sum(everything) == 1.0  # only G = {A, B, C, D}
    assert sum(everything) / 15 < sum(one) / 15


def test_whole_completion_format_and_digit_labels():
    assert score(["21", "1", "13"], ["12"] * 3, labels="0123456789", answer_format="whole") == [1.0, 0.5, 0.0]


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match="labels"):
        MultiChoiceCredit(labels="AAB")
    with pytest.raises(ValueError, match="answer_format"):
        MultiChoiceCredit(answer_format="last_number")
