"""One sample per prompt (``algorithm.group_size: 1``, for options that declare they need no group, e.g. POISE [257]):
the ``reinforce`` estimator keeps a lone sample's reward as its advantage, and the group statistics of a group of one
are a zero spread, not an error."""

from __future__ import annotations

import torch

from genalign.algorithms import ADVANTAGE_ESTIMATORS
from genalign.algorithms.group_filters import frac_reward_zero_std, group_reward_std

F64 = torch.float64
NAN = float("nan")


def test_reinforce_keeps_the_reward_of_a_group_of_one_and_zeroes_a_group_with_one_valid_reward():
    rewards = torch.tensor([0.7, -0.2, 1.0, NAN, NAN], dtype=F64)
    group_ids = torch.tensor([0, 1, 2, 2, 3])  # 0, 1 and 3 alone; 2 has two members, one reward missing
    advantages = ADVANTAGE_ESTIMATORS.get("reinforce")(rewards, group_ids)
    torch.testing.assert_close(advantages, torch.tensor([0.7, -0.2, 0.0, 0.0, 0.0], dtype=F64))


def test_a_group_of_one_has_zero_spread():
    rewards, group_ids = torch.tensor([0.7, -0.2, 1.0, 0.0], dtype=F64), torch.tensor([0, 1, 2, 2])
    torch.testing.assert_close(group_reward_std(rewards, group_ids), torch.tensor([0.0, 0.0, 0.5**0.5, 0.5**0.5],
                                                                                  dtype=F64))  # fmt: skip
    assert abs(frac_reward_zero_std(rewards, group_ids) - 2 / 3) < 1e-6
