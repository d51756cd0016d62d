"""The ``reinforce`` estimator (no baseline): the reward is the advantage, optionally whitened over the batch; missing
rewards and groups without two valid rewards get 0."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import compute_advantages

F64 = torch.float64


def test_the_reward_is_the_advantage_and_whitening_is_over_the_batch():
    rewards = torch.tensor([1.0, 1.0, 0.0, 2.0], dtype=F64)
    groups = torch.tensor([0, 0, 1, 1])
    torch.testing.assert_close(compute_advantages("reinforce", rewards, groups), rewards)  # group 0 constant: kept
    # batch mean 1, unbiased std √(2/3)
    whitened = compute_advantages("reinforce", rewards, groups, whiten=True, eps=0.0)
    torch.testing.assert_close(whitened, (rewards - 1.0) / math.sqrt(2 / 3))


def test_missing_rewards_and_groups_without_a_pair_get_zero():
    rewards = torch.tensor([1.0, float("nan"), 0.5, 0.7, 0.3], dtype=F64)
    groups = torch.tensor([0, 0, 1, 1, 1])
    torch.testing.assert_close(compute_advantages("reinforce", rewards, groups),
                               torch.tensor([0.0, 0.0, 0.5, 0.7, 0.3], dtype=F64))  # fmt: skip
    with pytest.raises(ValueError, match="eps must be >= 0"):
        compute_advantages("reinforce", rewards, groups, eps=-1.0)
