"""Reward combiners: hand-computed sums, GDPO composition, missing rewards, statistics, bad input."""

from __future__ import annotations

import math

import pytest
import torch

from genalign.algorithms import ADVANTAGE_ESTIMATORS, REWARD_COMBINERS, HyperparameterError, check_hyperparameters
from genalign.registry import UnknownOptionError

F64 = torch.float64
NAN = float("nan")
REWARDS = torch.tensor([[1, 0], [0, 2], [1, 4], [0, 4]], dtype=F64)  # [N=4, K=2]
GROUPS = torch.tensor([0, 0, 1, 1])
WEIGHTS = torch.tensor([1.0, 0.5], dtype=F64)


def test_weighted_sum():
    combined, stats = REWARD_COMBINERS.get("weighted_sum")(REWARDS, GROUPS, WEIGHTS)
    torch.testing.assert_close(combined, torch.tensor([1.0, 1.0, 3.0, 2.0], dtype=F64))
    assert stats["reward_0/mean"] == 0.5 and stats["reward_0/std"] == 0.5
    assert stats["reward_1/mean"] == 2.5 and stats["reward_1/frac_missing"] == 0.0


def test_normalize_then_sum_hand_computed():
    combined, _ = REWARD_COMBINERS.get("normalize_then_sum")(REWARDS, GROUPS, WEIGHTS, eps=0.0)
    z = 1 / math.sqrt(2)  # (1 − 0.5) / std([1, 0]) with the unbiased std sqrt(0.5)
    # reward 0: [z, −z, z, −z]; reward 1: group 0 [−z, z], group 1 constant -> [0, 0]
    expected = torch.tensor([z - 0.5 * z, -z + 0.5 * z, z, -z], dtype=F64)
    torch.testing.assert_close(combined, expected)


def test_gdpo_is_normalize_then_sum_followed_by_reinforce_pp_baseline():
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 3, (12, 3), generator=gen).to(F64)
    groups = torch.arange(4).repeat_interleave(3)
    weights = torch.tensor([1.0, 0.3, 2.0], dtype=F64)
    combined, _ = REWARD_COMBINERS.get("normalize_then_sum")(rewards, groups, weights, eps=0.0)
    advantages = ADVANTAGE_ESTIMATORS.get("reinforce_pp_baseline")(combined, groups, eps=0.0)
    # reference: z-score each reward within its group (constant group -> 0), weighted sum, batch z-score
    total = torch.zeros(12, dtype=F64)
    for k in range(3):
        for g in range(4):
            rows = groups == g
            values = rewards[rows, k]
            std = values.std()
            total[rows] += weights[k] * (torch.zeros_like(values) if std == 0 else (values - values.mean()) / std)
    expected = (total - total.mean()) / total.std()
    torch.testing.assert_close(advantages, expected, rtol=1e-10, atol=1e-10)


def test_missing_rewards_are_skipped_and_all_missing_is_nan():
    rewards = torch.tensor([[1, NAN], [NAN, NAN], [0, 2], [1, 4]], dtype=F64)
    combined, stats = REWARD_COMBINERS.get("weighted_sum")(rewards, GROUPS, WEIGHTS, names=["acc", "fmt"])
    assert combined[0] == 1.0 and math.isnan(combined[1]) and combined[2] == 1.0 and combined[3] == 3.0
    assert stats["fmt/frac_missing"] == 0.5 and stats["fmt/mean"] == 3.0 and stats["acc/mean"] == pytest.approx(2 / 3)
    combined, _ = REWARD_COMBINERS.get("normalize_then_sum")(rewards, GROUPS, WEIGHTS)
    assert math.isnan(combined[1]) and combined[0] == 0.0  # the group of sample 0 has one valid reward 0
    assert ADVANTAGE_ESTIMATORS.get("grpo")(combined, GROUPS)[1] == 0.0


def test_weights_as_a_list_are_accepted():
    combined, _ = REWARD_COMBINERS.get("weighted_sum")(REWARDS, GROUPS, [1.0, 0.5])
    torch.testing.assert_close(combined, torch.tensor([1.0, 1.0, 3.0, 2.0], dtype=F64))


@pytest.mark.parametrize(
    ("rewards", "weights", "kwargs", "match"),
    [
        (REWARDS[:, 0], WEIGHTS[:1], {}, r"rewards must have shape \[N, K\]"),
        (REWARDS, WEIGHTS[:1], {}, r"weights must have shape \[K\]=\[2\]"),
        (REWARDS, torch.tensor([1.0, math.inf], dtype=F64), {}, "weights must be finite"),
        (REWARDS, WEIGHTS, {"names": ["only_one"]}, "names must hold one name per reward column"),
    ],
)
def test_bad_input(rewards, weights, kwargs, match):
    with pytest.raises(ValueError, match=match):
        REWARD_COMBINERS.get("weighted_sum")(rewards, GROUPS, weights, **kwargs)


def test_unknown_combiner_and_hyperparameter():
    with pytest.raises(UnknownOptionError, match=r"Valid names: .*normalize_then_sum, .*weighted_sum"):
        REWARD_COMBINERS.get("sum")
    with pytest.raises(HyperparameterError, match=r"'weighted_sum'.*'eps'.*Accepted keywords: names"):
        check_hyperparameters(REWARD_COMBINERS, "weighted_sum", {"eps": 1e-6})


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
