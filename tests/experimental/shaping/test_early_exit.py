"""S-GRPO's decaying reward over a serial group [14] (``exit_decay``) and Step-GRPO's step-aware relative reward
[114] (``step_redundancy``) on hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import REWARD_SHAPERS, StepBatch
from genalign.experimental.shaping.early_exit import exit_decay, rank_in_group, step_redundancy, steps_per_sample


def test_rank_in_group_counts_flagged_members_at_or_before_each_exit():
    flags = torch.tensor([True, False, True, True, True, True])
    order = torch.tensor([2, 0, 1, 3, 1, 0])
    groups = torch.tensor([7, 7, 7, 7, 9, 9])
    # group 7 in exit order: 0 (not flagged), 1, 2, 3 -> ranks 1, 2, 3; group 9: order 0 -> 1, order 1 -> 2
    assert rank_in_group(flags, order, groups).tolist() == [2, 0, 1, 3, 2, 1]


def test_exit_decay_halves_each_later_correct_exit_of_a_serial_group():
    assert REWARD_SHAPERS.get("exit_decay") is exit_decay
    # group 0: exits 0..2 and the full path (order 3), shuffled; group 1: a serial group plus a sample outside it
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.8, 1.0, 1.0, math.nan])
    order = torch.tensor([3, 0, 1, 2, 0, 1, -1, 2])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    shaped, stats = exit_decay(rewards, StepBatch(group_ids=groups, exit_order=order))
    # group 0: exit 0 wrong (stays 0); exits 1, 2 and the path are the 1st, 2nd, 3rd correct: 1, 1/2, 1/4
    # group 1: exit 0 (0.8) is the 1st correct, exit 1 the 2nd (1/2); outside the group 1 stays; NaN stays NaN
    expected = [0.25, 0.0, 1.0, 0.5, 0.8, 0.5, 1.0, math.nan]
    torch.testing.assert_close(shaped, torch.tensor(expected), equal_nan=True)
    assert stats["reward_shaping/exit_decay_factor_mean"] == pytest.approx((0.25 + 1 + 0.5 + 1 + 0.5) / 5)
    slower, _ = exit_decay(rewards, StepBatch(group_ids=groups, exit_order=order), decay=0.8, threshold=0.9)
    # threshold 0.9: the 0.8 sample is wrong, so exit 1 of group 1 becomes its first correct one
    torch.testing.assert_close(slower, torch.tensor([0.64, 0.0, 1.0, 0.8, 0.8, 1.0, 1.0, math.nan]), equal_nan=True)
    with pytest.raises(ValueError, match="decay = 0"):
        exit_decay(rewards, StepBatch(group_ids=groups, exit_order=order), decay=0.0)


def test_step_redundancy_penalises_correct_answers_with_more_steps_than_the_groups_correct_mean():
    assert REWARD_SHAPERS.get("step_redundancy") is step_redundancy
    # steps: 2, 4, 3, 5 in group 0 (the third wrong); group 1: one correct sample of 6 steps, one wrong of 1
    segment_ids = torch.tensor([
        [0, 0, 1, 1, 1, 1], [0, 1, 2, 3, 3, 3], [0, 1, 2, 2, 2, 2], [0, 1, 2, 3, 4, 4],
        [0, 1, 2, 3, 4, 5], [0, 0, 0, 0, 0, 0],
    ])  # fmt: skip
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1] * 5 + [0], [1] * 6, [1] * 6, [1] * 6, [1, 1, 0, 0, 0, 0]]).float()
    assert steps_per_sample(segment_ids, mask).tolist() == [2.0, 4.0, 3.0, 5.0, 6.0, 1.0]
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    batch = StepBatch(mask=mask, group_ids=torch.tensor([0, 0, 0, 0, 1, 1]), segment_ids=segment_ids)
    shaped, stats = step_redundancy(rewards, batch, penalty=0.5)
    baseline = (2 + 4 + 5) / 3  # the mean steps of group 0's correct samples
    penalties = [0.0, 0.5 * (4 / baseline - 1), 0.0, 0.5 * (5 / baseline - 1), 0.0, 0.0]
    torch.testing.assert_close(shaped, rewards - torch.tensor(penalties))
    assert stats["reward_shaping/step_redundancy_penalty_mean"] == pytest.approx(sum(penalties) / 4)
    long = StepBatch(mask=torch.ones(3, 10), group_ids=torch.tensor([0, 0, 0]),
                     segment_ids=torch.tensor([[0] * 10, [0] * 10, list(range(10))]))  # fmt: skip
    capped, _ = step_redundancy(torch.ones(3), long, penalty=0.3)
    # steps 1, 1 and 10: baseline 4, 10/4 - 1 = 1.5 > 1, so the penalty is capped at 0.3
    torch.testing.assert_close(capped, torch.tensor([1.0, 1.0, 0.7]))
