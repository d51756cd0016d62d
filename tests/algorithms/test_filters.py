"""Group filters: zero-variance detection, frac_reward_zero_std, DAPO dynamic sampling."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import dynamic_sampling, frac_reward_zero_std, group_reward_std, zero_std_mask

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


def test_dynamic_sampling_keeps_informative_groups_over_rounds():
    batches = [
        (torch.tensor([1, 0, 1, 1, 0, 1], dtype=F64), torch.tensor([0, 0, 1, 1, 2, 2]), "round-1"),
        (torch.tensor([0, 1, 1, 0], dtype=F64), torch.tensor([5, 5, 6, 6]), "round-2"),
    ]
    asked = []

    def resample(num_groups):
        asked.append(num_groups)
        return batches[len(asked) - 1]

    result = dynamic_sampling(resample, num_groups=3, max_rounds=5)
    assert asked == [3, 1]
    assert (result.num_kept, result.num_dropped, result.rounds) == (3, 2, 2)
    assert result.rewards.tolist() == [1, 0, 0, 1, 0, 1]
    assert result.group_ids.tolist() == [0, 0, 1, 1, 2, 2]
    assert [(payload, rows.tolist()) for payload, rows in result.parts] == [
        ("round-1", [0, 1, 4, 5]),
        ("round-2", [0, 1]),
    ]


def test_dynamic_sampling_stops_after_max_rounds():
    calls = []

    def resample(num_groups):
        calls.append(num_groups)
        return torch.ones(4, dtype=F64), torch.tensor([0, 0, 1, 1]), None

    result = dynamic_sampling(resample, num_groups=2, max_rounds=3)
    assert calls == [2, 2, 2]
    assert (result.num_kept, result.num_dropped, result.rounds) == (0, 6, 3)
    assert result.rewards.numel() == 0 and result.parts == []
    with pytest.raises(ValueError, match="max_rounds must be >= 1"):
        dynamic_sampling(resample, num_groups=2, max_rounds=0)


def test_filters_reject_per_step_rewards():
    with pytest.raises(ValueError, match=r"rewards must have shape \[N\]"):
        group_reward_std(REWARDS[:, None].expand(8, 2), GROUPS)
