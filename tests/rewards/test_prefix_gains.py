"""RED's reward redistribution as a token judge (``prefix_reward_gains``, [247]): a sequence reward scored on every
word prefix, each word valued by its gain, against hand-computed values."""

from __future__ import annotations

import pytest

from genalign.rewards.prefix_gains import prefix_reward_gains, redistributed_gains, word_prefixes
from genalign.rewards.token_judges import token_judge


def reference_coverage(prompts, completions, answer, **_):
    """A graded sequence reward: the share of the reference's words that the completion holds."""
    return [len(set(c.split()) & set(a.split())) / len(a.split()) for c, a in zip(completions, answer, strict=True)]


def test_word_prefixes_cut_after_each_word():
    words, prefixes = word_prefixes("ab  cd e ")
    assert words == [(0, 2), (4, 6), (7, 8)]
    assert prefixes == ["", "ab", "ab  cd", "ab  cd e "]  # the last prefix is the whole text
    assert word_prefixes("") == ([], [""])


def test_each_word_gets_its_reward_gain():
    judge = prefix_reward_gains(reward=reference_coverage, scale=2.0)
    [spans] = judge(["the cat sat down"], [{"prompt": "q", "answer": "cat sat on mat"}])
    # R: "" 0, "the" 0, "the cat" 1/4, "the cat sat" 2/4, "the cat sat down" 2/4 -> gains (0, ¼, ¼, 0), ×2
    assert spans == [(4, 7, 0.5), (8, 11, 0.5)]
    assert sum(value for _, _, value in spans) == pytest.approx(2.0 * 0.5)  # = scale·(R(completion) − R(""))
    assert redistributed_gains([0.0, float("nan"), 1.0], [(0, 1), (2, 3)]) == []  # NaN gains are left out


def test_a_registered_reward_by_name():
    judge = token_judge("prefix_reward_gains", {"reward": "exact_match"})
    assert judge(["42", "x 42"], [{"prompt": "q", "answer": "42"}] * 2) == [[(0, 2, 1.0)], []]
    with pytest.raises(ValueError, match="scale=0 must be > 0"):
        token_judge("prefix_reward_gains", {"reward": "exact_match", "scale": 0})
