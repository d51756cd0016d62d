"""GRPO-λ [291] (reward shaper ``correctness_gated_length``), hand-computed: a group's correctness ratio decides whether
it keeps the length-penalised reward or falls back to the 0/1 reward."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import REWARD_SHAPERS, StepBatch, apply_reward_shaping

F64 = torch.float64
NAN = math.nan


def joined(*groups: list[float]) -> list[float]:
    """The samples of consecutive groups as one list."""
    return [value for group in groups for value in group]


#: three groups of 4: correctness (reward column 0) and the combined reward (accuracy + a length term)
CORRECT = joined([1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0])
COMBINED = joined([0.9, 0.8, 0.7, -0.1], [0.6, -0.2, -0.3, -0.1], [0.95, 0.5, -0.2, -0.4])
GROUPS = [0] * 4 + [1] * 4 + [2] * 4


def shaped(combined=COMBINED, correct=CORRECT, groups=GROUPS, **hp):
    batch = StepBatch(group_ids=torch.tensor(groups), rewards=torch.tensor([[float(c)] for c in correct], dtype=F64))
    return apply_reward_shaping([("correctness_gated_length", hp)], torch.tensor(combined, dtype=F64), batch)


def close(actual, expected):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=F64), rtol=0, atol=1e-12, equal_nan=True)


def test_groups_with_a_low_correctness_ratio_get_the_length_agnostic_reward():
    # ratios 0.75, 0.25, 0.5: at threshold 0.5 groups 0 and 2 keep the length penalty, group 1 gets 1[correct]
    rewards, stats = shaped()
    close(rewards, joined([0.9, 0.8, 0.7, -0.1], [1.0, 0.0, 0.0, 0.0], [0.95, 0.5, -0.2, -0.4]))
    assert stats["reward_shaping/length_penalty_group_frac"] == pytest.approx(2 / 3)
    strict, _ = shaped(level=0.6)  # only group 0 keeps it
    close(strict, joined([0.9, 0.8, 0.7, -0.1], [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]))
    everywhere, _ = shaped(level=0.0)  # every group keeps the penalty: the shaper does nothing
    close(everywhere, COMBINED)


def test_top_fraction_keeps_the_most_correct_groups_of_the_batch():
    # ⌈0.3·3⌉ = 1 group: the most correct one (group 0); ⌈0.5·3⌉ = 2: groups 0 and 2
    one, _ = shaped(level=0.3, selection="top_fraction")
    close(one, joined([0.9, 0.8, 0.7, -0.1], [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]))
    two, _ = shaped(level=0.5, selection="top_fraction")
    close(two, joined([0.9, 0.8, 0.7, -0.1], [1.0, 0.0, 0.0, 0.0], [0.95, 0.5, -0.2, -0.4]))
    # a tie at the cut goes to the earlier group
    tied, _ = shaped([0.5, -0.5, 0.4, -0.6], [1, 0, 1, 0], [0, 0, 1, 1], level=0.5, selection="top_fraction")
    close(tied, [0.5, -0.5, 1.0, 0.0])


def test_a_missing_reward_stays_missing_and_is_not_counted():
    # group 0: [correct, correct, missing, wrong] -> ratio 2/3 over the present samples
    rewards, _ = shaped([0.8, 0.7, NAN, -0.1], [1, 1, 0, 0], [0, 0, 0, 0], level=0.6)
    close(rewards, [0.8, 0.7, NAN, -0.1])
    rewards, _ = shaped([0.8, 0.7, NAN, -0.1], [1, 1, 0, 0], [0, 0, 0, 0], level=0.7)
    close(rewards, [1.0, 1.0, NAN, 0.0])


def test_bad_arguments_are_named():
    assert REWARD_SHAPERS.meta("correctness_gated_length")["needs"] == ("rewards",)
    with pytest.raises(ValueError, match="selection='top'"):
        shaped(selection="top")
    with pytest.raises(ValueError, match=r"level=1.5 must be in \[0, 1\]"):
        shaped(level=1.5)
    with pytest.raises(ValueError, match="success_column=2 is not one of the 1 rewards"):
        shaped(success_column=2)
