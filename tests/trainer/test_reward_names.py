"""Rewards are logged under short, distinct names (genalign.trainer.rewards.metric_names), and a reward that cannot be
loaded is an error naming it."""

from __future__ import annotations

import pytest

from genalign.config import RewardSpec
from genalign.errors import UserError
from genalign.trainer.rewards import RewardLoadError, RewardSet, metric_names


def names(*specs: dict) -> list[str]:
    return metric_names([RewardSpec(**spec) for spec in specs])


def brightness(prompts, completions, **columns):
    return [0.0] * len(completions)


def test_a_reward_is_named_by_its_name_else_its_function():
    assert names({"fn": "/abs/path/to/file.py:brightness"}) == ["brightness"]
    assert names({"fn": "pkg.mod:score"}, {"fn": "pkg.other.length"}) == ["score", "length"]
    assert names({"fn": "exact_match"}, {"fn": "/x/y.py:f", "name": "mine"}) == ["exact_match", "mine"]
    assert names({"fn": brightness}) == ["brightness"]


def test_equal_function_names_are_told_apart_by_module_then_position():
    assert names({"fn": "/a/clip.py:score"}, {"fn": "/b/aesthetic.py:score"}) == ["clip.score", "aesthetic.score"]
    assert names({"fn": "/a/rewards.py:score"}, {"fn": "/b/rewards.py:score"}) == ["score_0", "score_1"]
    # a chosen name is never changed: the derived one that equals it is qualified instead
    assert names({"fn": "exact_match", "name": "score"}, {"fn": "/a/clip.py:score"}) == ["score", "clip.score"]
    assert names({"fn": "exact_match"}, {"fn": "/a/b.py:f", "name": "exact_match"}) == ["exact_match_0", "exact_match"]


def test_reward_set_reports_metric_names_and_resolves_the_accuracy_reward():
    rewards = RewardSet([RewardSpec(fn="exact_match", name="accuracy"), RewardSpec(fn=brightness, weight=0.0)])
    assert rewards.labels == ["accuracy", "brightness"]
    assert rewards.name_of(None) == "accuracy" and rewards.name_of("brightness") == "brightness"
    with pytest.raises(ValueError, match="'nope' is not one of the rewards"):
        rewards.name_of("nope")


def test_a_reward_that_cannot_be_loaded_is_a_user_error_naming_it(tmp_path):
    spec = RewardSpec(fn=f"{tmp_path / 'gone.py'}:brightness")
    with pytest.raises(RewardLoadError, match=r"rewards\[1\] 'brightness' .*gone\.py") as caught:
        RewardSet([RewardSpec(fn="exact_match"), spec])
    assert isinstance(caught.value, UserError)
    with pytest.raises(RewardLoadError, match="bad args"):
        RewardSet([RewardSpec(fn="exact_match", args={"no_such_argument": 1})])


def test_score_each_keeps_scoring_when_one_reward_fails():
    def needs_answer(prompts, completions, answer, **columns):
        return [float(c == a) for c, a in zip(completions, answer)]

    rewards = RewardSet([RewardSpec(fn=needs_answer), RewardSpec(fn=brightness)])
    table, failures = rewards.score_each([{"prompt": "1+1="}], ["2"])
    assert table[0, 0].isnan() and table[0, 1] == 0.0 and list(failures) == ["needs_answer"]
