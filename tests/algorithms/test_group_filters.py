"""Group filters: zero-variance detection, frac_reward_zero_std, DAPO dynamic sampling."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import frac_reward_zero_std, group_reward_std, informative_groups, zero_std_mask

F64 = torch.float64
REWARDS = torch.tensor([1, 0, 1, 0, 2, 2, 5, float("nan")], dtype=F64)
GROUPS = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2])


def test_group_reward_std_hand_computed():
    std = group_reward_std(REWARDS, GROUPS)
    s = math.sqrt(1 / 3)
    torch.testing.assert_close(std, torch.tensor([s, s, s, s, 0, 0, 0, 0], dtype=F64))
    population = group_reward_std(REWARDS, GROUPS, unbiased=False)
    torch.testing.assert_close(population[:4], torch.full((4,), 0.5, dtype=F64))


def test_zero_std_mask_and_fraction_with_tolerance():
    assert zero_std_mask(REWARDS, GROUPS).tolist() == [False] * 4 + [True] * 4
    assert frac_reward_zero_std(REWARDS, GROUPS) == pytest.approx(2 / 3)
    assert zero_std_mask(REWARDS, GROUPS, tol=0.6).all()
    assert frac_reward_zero_std(REWARDS, GROUPS, tol=0.6) == 1.0
    nearly = torch.tensor([0.1, 0.1, 0.1, 0.3, 0.1 + 1e-9, 0.3], dtype=F64)
    assert zero_std_mask(nearly, torch.tensor([0, 0, 0, 1, 1, 1])).tolist() == [True] * 3 + [False] * 3
    with pytest.raises(ValueError, match="tol must be >= 0"):
        zero_std_mask(REWARDS, GROUPS, tol=-1.0)


def test_informative_groups_drop_zero_std_groups_and_cap_the_count():
    groups = torch.tensor([3, 3, 5, 5, 7, 7, 9, 9])
    zero_std = torch.tensor([False, False, True, True, False, False, False, False])
    keep = informative_groups(groups, zero_std, drop_zero_std=True)
    assert keep.tolist() == [0, 1, 4, 5, 6, 7]
    # DAPO dynamic sampling from an over-sampled rollout: the first informative groups up to the step's count
    assert informative_groups(groups, zero_std, drop_zero_std=True, max_groups=2).tolist() == [0, 1, 4, 5]
    assert informative_groups(groups, zero_std, drop_zero_std=False).tolist() == list(range(8))


def test_filters_reject_per_step_rewards():
    with pytest.raises(ValueError, match=r"rewards must have shape \[N\]"):
        group_reward_std(REWARDS[:, None].expand(8, 2), GROUPS)
