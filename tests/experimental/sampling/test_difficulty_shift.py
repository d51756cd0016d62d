"""DeepVideo-R1's difficulty-aware augmentation [177] (``difficulty_shift``): hand-computed hint fractions after
all-wrong, all-right and mixed groups, the hotter temperature of solved prompts, and a state round trip."""

from __future__ import annotations

import pytest

from genalign.sampling import SAMPLE_SOURCES
from tests.experimental.sampling.test_guidance import GEN, SOLUTION, candidates, guidance_of, outcome, round_trip

ARGS = {"hint_step": 0.25, "max_fraction": 0.75, "hard_temperature": 1.5, "unit": "chars"}


def test_failed_prompts_get_a_growing_reference_prefix_and_solved_ones_a_hotter_temperature():
    rule = SAMPLE_SOURCES.get("difficulty_shift")(**ARGS)
    assert guidance_of(rule.choose(candidates(1, 2, 3), 3, GEN)) == [None, None, None]  # first visits: as they are
    decision = rule.after_rewards(outcome({1: [0.0, 0.0], 2: [1.0, 1.0], 3: [1.0, 0.0]}))
    assert rule.fractions == {101: 0.25, 102: 0.0, 103: 0.0} and rule.solved == {101: False, 102: True, 103: False}
    assert decision.stats["all_wrong"] == 1 and decision.stats["all_right"] == 1 and decision.stats["hinted"] == 0
    rule = round_trip(rule, "difficulty_shift", **ARGS)
    quarter = SOLUTION[: -(-len(SOLUTION) // 4)]  # ⌈0.25·L⌉ characters
    assert guidance_of(rule.choose(candidates(1, 2, 3), 3, GEN)) == [{"prefix": quarter}, {"temperature": 1.5}, None]
    rule.after_rewards(outcome({1: [0.0, 0.0], 2: [1.0, 0.0]}))  # still failing with the hint: more of it
    assert rule.fractions[101] == 0.5 and rule.solved[102] is False
    half = SOLUTION[: -(-len(SOLUTION) // 2)]
    assert guidance_of(rule.choose(candidates(1, 2), 2, GEN)) == [{"prefix": half}, None]  # 2 is solvable now
    rule.after_rewards(outcome({1: [0.0]}))
    rule.choose(candidates(1), 1, GEN)
    rule.after_rewards(outcome({1: [0.0]}))
    assert rule.fractions[101] == 0.75  # capped at max_fraction
    rule.choose(candidates(1), 1, GEN)
    rule.after_rewards(outcome({1: [1.0, 1.0]}))  # solved with the hint: the help shrinks
    assert rule.fractions[101] == 0.5 and guidance_of(rule.choose(candidates(1), 1, GEN)) == [
        {"prefix": SOLUTION[: -(-len(SOLUTION) // 2)]}
    ]


def test_without_hard_temperature_solved_prompts_stay_as_they_are():
    rule = SAMPLE_SOURCES.get("difficulty_shift")(hard_temperature=None)
    rule.after_rewards(outcome({1: [1.0, 1.0]}))
    assert guidance_of(rule.choose(candidates(1), 1, GEN)) == [None]


@pytest.mark.parametrize(
    ("args", "field"),
    [({"hint_step": 0.0}, "hint_step"), ({"max_fraction": 1.5}, "max_fraction"),
     ({"hard_temperature": 0.0}, "hard_temperature"), ({"unit": "tokens"}, "unit")],
)  # fmt: skip
def test_bad_arguments_name_the_field(args, field):
    with pytest.raises(ValueError, match=field):
        SAMPLE_SOURCES.get("difficulty_shift")(**args)
