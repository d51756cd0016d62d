"""VGPO [67] value-anchored group normalisation, hand-computed."""

import math

import torch

from genalign.algorithms import ADVANTAGE_ESTIMATORS

ESTIMATOR = ADVANTAGE_ESTIMATORS.get("value_anchored")


def test_relative_plus_absolute_term_hand_computed():
    rewards, groups = torch.tensor([1.0, 0.0, 0.8, 0.8], dtype=torch.float64), torch.tensor([0, 0, 1, 1])
    out = ESTIMATOR(rewards, groups, anchor=0.5, alpha=1.0, tau=1.0, eps=0.0)
    std = math.sqrt(0.5)  # unbiased std of [1, 0]
    weight = math.exp(-std)
    expected = [0.5 / std + weight * 0.5, -0.5 / std - weight * 0.5, 0.3, 0.3]  # constant group: alpha * (0.8 - 0.5)
    torch.testing.assert_close(out, torch.tensor(expected, dtype=torch.float64))


def test_constant_group_keeps_a_signal_that_grpo_loses():
    rewards, groups = torch.tensor([0.2, 0.2, 0.9, 0.9]), torch.tensor([0, 0, 1, 1])
    assert torch.equal(ADVANTAGE_ESTIMATORS.get("grpo")(rewards, groups), torch.zeros(4))
    out = ESTIMATOR(rewards, groups, alpha=2.0)
    torch.testing.assert_close(out, torch.tensor([-0.6, -0.6, 0.8, 0.8]))


def test_tau_zero_and_missing_rewards():
    rewards = torch.tensor([1.0, 0.0, float("nan"), 0.7, 0.7])
    out = ESTIMATOR(rewards, torch.tensor([0, 0, 0, 1, 1]), tau=0.0, eps=0.0)
    torch.testing.assert_close(out, torch.tensor([math.sqrt(0.5), -math.sqrt(0.5), 0.0, 0.2, 0.2]))
