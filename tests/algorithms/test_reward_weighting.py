"""Reward combiners of the method catalogue and the entropy-driven credit weight: hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import CREDIT_WEIGHTS, REWARD_COMBINERS

F64 = torch.float64


def combine(name, columns, groups, weights, **hp):
    rewards = torch.tensor(columns, dtype=F64).T.contiguous()  # [N, K]
    return REWARD_COMBINERS.get(name)(rewards, torch.tensor(groups), torch.tensor(weights, dtype=F64), **hp)


def test_variance_normalized_divides_by_the_batch_std():
    combined, _ = combine("variance_normalized", [[1, 0, 1, 0], [10, 20, 30, 40]], [0, 0, 1, 1], [1.0, 2.0], eps=0.0)
    s0, s1 = math.sqrt(1 / 3), math.sqrt(500 / 3)
    expected = [a / s0 + 2 * b / s1 for a, b in zip([1, 0, 1, 0], [10, 20, 30, 40])]
    torch.testing.assert_close(combined, torch.tensor(expected, dtype=F64))


def test_variance_adaptive_weights_each_group_by_reward_variance():
    columns = [[1, 0, 1, 0, 1, 1], [1, 1, 1, 0, 0, 0]]
    combined, _ = combine("variance_adaptive", columns, [0, 0, 0, 0, 1, 1], [1.0, 1.0], eps=0.0)
    w0, w1 = 0.25 / 0.4375, 0.1875 / 0.4375  # population variances 0.25 and 0.1875
    z0 = 0.5 / math.sqrt(1 / 3)
    z1 = [0.5, 0.5, 0.5, -1.5]  # mean 0.75, unbiased std 0.5
    expected = [w0 * z0 + w1 * z1[0], -w0 * z0 + w1 * z1[1], w0 * z0 + w1 * z1[2], -w0 * z0 + w1 * z1[3], 0.0, 0.0]
    torch.testing.assert_close(combined, torch.tensor(expected, dtype=F64))
    with pytest.raises(ValueError, match="weights must be >= 0"):
        combine("variance_adaptive", columns, [0, 0, 0, 0, 1, 1], [1.0, -1.0])


def test_saturation_aware_discounts_saturated_rewards():
    columns = [[1, 1, 1, 0], [1, 0, 1, 0]]
    combined, stats = combine("saturation_aware", columns, [0, 0, 0, 0], [1.0, 1.0], eps=0.0)
    z0 = [0.5, 0.5, 0.5, -1.5]
    z1 = [0.5 / math.sqrt(1 / 3) * s for s in (1, -1, 1, -1)]
    expected = [0.25 * a + 0.5 * b for a, b in zip(z0, z1)]  # saturations 0.75 and 0.5
    torch.testing.assert_close(combined, torch.tensor(expected, dtype=F64))
    assert stats["reward_0/saturation"] == pytest.approx(0.75) and stats["reward_1/saturation"] == pytest.approx(0.5)


def test_entropy_driven_credit():
    entropy = torch.tensor([[1.0, 3.0], [0.5, 9.0]], dtype=F64)
    mask = torch.tensor([[1, 1], [1, 0]])
    weights = CREDIT_WEIGHTS.get("entropy_driven")(torch.tensor([1.0, -1.0], dtype=F64), mask, entropy)
    # sequence means 2 and 0.5, batch mean 1.25 -> 0.625 and 2.5 (clamped to 2)
    torch.testing.assert_close(weights, torch.tensor([[0.625, 0.625], [2.0, 2.0]], dtype=F64))
