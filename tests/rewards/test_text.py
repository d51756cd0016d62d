"""Text rewards against hand-computed values, including None, empty completions and malformed answers."""

from __future__ import annotations

import time

import pytest

from genalign.rewards import REWARDS
from genalign.rewards.answers import extract_answer
from genalign.rewards.math_answers.equivalence import math_answers_equal, math_equivalence
from genalign.rewards.math_answers.sympy_worker import symbolic_equal
from genalign.rewards.text import exact_match, format_regex, length_penalty, reasoning_gym_score, soft_overlong_penalty


def test_all_text_rewards_are_registered_as_factories():
    for name in ["exact_match", "math_equivalence", "format_regex", "length_penalty", "soft_overlong_penalty"]:
        assert name in REWARDS
    bound = REWARDS.get("length_penalty")(max_length=4, unit="chars")
    assert bound(["p"], ["ab"]) == [-0.5]


def test_exact_match():
    completions = ["42", " 42\n", "41", "", "Paris", "a  b"]
    answers = ["42", "42", "42", "42", "paris", "a b"]
    assert exact_match([""] * 6, completions, answer=answers) == [1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    assert exact_match([""], ["Paris"], answer=["paris"], lowercase=True) == [1.0]
    assert exact_match([""], [" 42"], answer=["42"], strip=False, collapse_whitespace=False) == [0.0]


def test_exact_match_none_answer_is_not_applicable_and_chat_completions_work():
    chat = [{"role": "assistant", "content": "7"}]
    assert exact_match(["", ""], [chat, "7"], answer=["7", None]) == [1.0, None]


def test_exact_match_without_answer_column_names_it():
    with pytest.raises(ValueError, match=r"column 'answer'.*data\.columns\.answer"):
        exact_match(["p"], ["c"])


@pytest.mark.parametrize(
    ("text", "answer_format", "expected"),
    [
        ("so \\boxed{\\frac{1}{2}} and \\boxed{3}", "auto", "3"),
        ("x = \\boxed{\\frac{1}{2}}", "boxed", "\\frac{1}{2}"),
        ("\\boxed{unclosed", "boxed", None),
        ("the sum is \\boxed{12", "auto", None),  # truncated: no credit from the last-number fallback
        ("<think>2+2</think><answer> 4 </answer>", "auto", "4"),
        ("no tags here 5", "answer_tags", None),
        ("Natalia sold 48 clips ... #### 72", "auto", "72"),
        ("I got 3, then 1,234.5 in total", "auto", "1,234.5"),
        ("minus -7/2 remains", "last_number", "-7/2"),
        ("no numbers at all", "auto", None),
        ("", "auto", None),
    ],
)
def test_extract_answer(text, answer_format, expected):
    assert extract_answer(text, answer_format=answer_format) == expected


@pytest.mark.parametrize(
    ("predicted", "reference", "equal"),
    [
        ("72", "72", True),
        ("72.0", "72", True),
        ("1,234", "1234", True),
        ("\\frac{1}{2}", "0.5", True),
        ("$\\dfrac{3}{4}$", "3/4", True),
        ("50\\%", "50", True),
        ("0.3333", "1/3", False),  # off by 3.3e-5 > relative tolerance 1e-6
        ("0.33333333", "1/3", True),  # off by 3.3e-9
        ("73", "72", False),
        ("", "72", False),
        ("abc", "72", False),
    ],
)
def test_math_answers_equal_numeric(predicted, reference, equal):
    assert math_answers_equal(predicted, reference) is equal


def test_math_answers_equal_symbolic():
    assert math_answers_equal("2\\sqrt{2}", "\\sqrt{8}")
    assert math_answers_equal("(x+1)^2", "x^2+2x+1")
    assert not math_answers_equal("x^2", "x^3")


def test_symbolic_comparison_times_out_safely_and_recovers():
    # ``factorial(...)`` is outside the restricted grammar now (an instant parse failure), so the slow case is a
    # power that simplify expands for minutes
    started = time.perf_counter()
    assert symbolic_equal("(x+y+z+w)^{40}-(x+y)^{40}", "1", timeout_s=1.0) is False  # cut off after 1 s
    assert time.perf_counter() - started < 5.0
    assert symbolic_equal("x + x", "2*x", timeout_s=60.0) is True  # a fresh worker answers the next call


def test_math_equivalence_reward():
    completions = ["The answer is \\boxed{12}", "<answer>0.5</answer>", "it is 13", "", "\\boxed{12"]
    answers = ["12", "\\frac{1}{2}", "#### 12", "12", "12"]
    assert math_equivalence([""] * 5, completions, answer=answers) == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert math_equivalence([""], ["x"], answer=[None]) == [None]


def test_format_regex():
    completions = ["<think>a\nb</think> <answer>4</answer>", "<answer>4</answer>", "", "x <answer>1</answer> y"]
    assert format_regex([""] * 4, completions) == [1.0, 0.0, 0.0, 0.0]
    assert format_regex([""] * 4, completions, pattern=r"<answer>\d+</answer>", mode="search") == [1.0, 1.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="not a valid regular expression"):
        format_regex([""], ["x"], pattern="(")


def test_length_penalty_units():
    assert length_penalty([""] * 3, ["", "abcd", "abcdefgh"], max_length=4, unit="chars", coef=0.5) == [0.0, -0.5, -0.5]
    assert length_penalty([""], ["one two three"], max_length=6, unit="words") == [-0.5]
    assert length_penalty([""] * 2, ["?", "?"], max_length=10, completion_ids=[[1, 2], [1, 2, 3, 4, 5]]) == [-0.2, -0.5]


def test_soft_overlong_penalty_hand_computed():
    # L_max = 10, L_cache = 4: 0 up to 6 tokens, (6 - L) / 4 from 7 to 10, -1 beyond.
    lengths = [0, 6, 7, 8, 10, 11]
    rewards = soft_overlong_penalty([""] * 6, [""] * 6, max_length=10, cache_length=4, completion_length=lengths)
    assert rewards == [0.0, 0.0, -0.25, -0.5, -1.0, -1.0]


def test_soft_overlong_penalty_needs_token_lengths_or_another_unit():
    with pytest.raises(ValueError, match=r"completion_ids.*unit='chars'"):
        soft_overlong_penalty([""], ["abc"], max_length=10, cache_length=4)
    with pytest.raises(ValueError, match="cache_length=20"):
        soft_overlong_penalty([""], ["abc"], max_length=10, cache_length=20, unit="chars")


def test_reasoning_gym_score_uses_the_package_checker():
    pytest.importorskip("reasoning_gym")
    from genalign.data.procedural import reasoning_gym_task

    rows = reasoning_gym_task(2, 0, task="basic_arithmetic")
    completions = [f"<answer>{rows[0]['answer']}</answer>", "<answer>definitely wrong</answer>", "whatever"]
    rewards = reasoning_gym_score(
        [""] * 3,
        completions,
        reasoning_gym_task=[rows[0]["reasoning_gym_task"], rows[1]["reasoning_gym_task"], None],
        reasoning_gym_entry=[rows[0]["reasoning_gym_entry"], rows[1]["reasoning_gym_entry"], None],
    )
    assert rewards == [1.0, 0.0, None]


def test_answers_of_the_wrong_type_are_not_scored_but_counted_and_named_once(capsys):
    reward = REWARDS.get("exact_match")()
    answers = ["4", None, ["4"], {"value": 4}, True, float("nan"), 4, 2.5]
    completions = ["4"] * 6 + ["4", "2.5"]
    locations = [f"train.jsonl, line {i + 1}" for i in range(8)]
    scores = reward([""] * 8, completions, answer=answers, _location=locations)
    assert scores == [1.0, None, None, None, None, None, 1.0, 1.0]  # numbers are answers, written out
    assert reward.pop_metrics() == {"bad_answer": 5.0} and reward.pop_metrics() == {"bad_answer": 0.0}
    err = capsys.readouterr().err
    assert err.count("warning") == 1 and "reward 'exact_match': train.jsonl, line 2: column 'answer' holds None" in err
    assert reward([""], ["x"], answer=[[1]]) == [None]  # counted again, not warned again
    assert reward.pop_metrics() == {"bad_answer": 1.0} and "warning" not in capsys.readouterr().err


@pytest.mark.parametrize(("name", "args"), [("math_equivalence", {}), ("answer_accuracy", {"mode": "exact"})])
def test_math_and_vlm_answer_rewards_count_bad_answers_too(capsys, name, args):
    reward = REWARDS.get(name)(**args)
    assert reward(["", ""], ["\\boxed{4} <answer>4</answer>"] * 2, answer=["4", [1, 2]]) == [1.0, None]
    assert reward.pop_metrics()["bad_answer"] == 1.0
    assert f"reward {name!r}: row 1 of the batch: column 'answer' holds [1, 2]" in capsys.readouterr().err


def test_the_trainer_reports_bad_answers_as_a_metric_naming_the_file_line(capsys):
    from genalign.config.schema import RewardSpec
    from genalign.data.errors import LOCATION_KEY
    from genalign.trainer.rewards import RewardSet

    rewards = RewardSet([RewardSpec(fn="exact_match", name="accuracy")])
    rows = [{"prompt": "1+1=", "answer": "2", LOCATION_KEY: "d.jsonl, line 1"},
            {"prompt": "2+2=", "answer": None, LOCATION_KEY: "d.jsonl, line 2"}]  # fmt: skip
    table, _ = rewards(rows, ["2", "4"])
    assert table[0, 0] == 1.0 and table[1, 0].isnan()
    assert rewards.take_metrics() == {"reward/accuracy/bad_answer": 1.0}
    assert "d.jsonl, line 2: column 'answer' holds None" in capsys.readouterr().err
