"""Advantage estimators of the method catalogue: hand-computed values (float64)."""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest
import torch

from genalign.algorithms import ADVANTAGE_ESTIMATORS, compute_advantages

NAN = float("nan")


def t(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def ids(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long)


def adv(name: str, rewards: list[float], groups: list[int], **hp) -> torch.Tensor:
    return ADVANTAGE_ESTIMATORS.get(name)(t(rewards), ids(groups), **hp)


def close(actual: torch.Tensor, expected: list[float]) -> None:
    torch.testing.assert_close(actual, t(expected), rtol=1e-9, atol=1e-9)


def test_std_dial_interpolates_between_dr_grpo_and_grpo():
    rewards, groups = [1, 0, 1, 0, 3, 1], [0, 0, 0, 0, 1, 1]
    a = 0.5 / math.sqrt(math.sqrt(1 / 3))  # (r − mean) / std^0.5, unbiased std √(1/3)
    b = 1.0 / math.sqrt(math.sqrt(2.0))  # group 1: mean 2, std √2
    close(adv("std_dial", rewards, groups, std_exponent=0.5, eps=0.0), [a, -a, a, -a, b, -b])
    torch.testing.assert_close(adv("std_dial", rewards, groups, std_exponent=1.0), adv("grpo", rewards, groups))
    torch.testing.assert_close(
        adv("std_dial", rewards, groups, std_exponent=0.0, eps=0.0), adv("dr_grpo", rewards, groups)
    )
    with pytest.raises(ValueError, match="std_exponent"):
        adv("std_dial", rewards, groups, std_exponent=-1.0)


def test_positive_only_and_asymmetric_scaling():
    s = 0.5 / math.sqrt(1 / 3)
    close(adv("positive_only", [1, 0, 1, 0], [0] * 4, eps=0.0), [s, 0, s, 0])
    close(adv("asymmetric", [1, 0, 1, 0], [0] * 4, eps=0.0, positive_scale=2.0, negative_scale=0.5),
          [2 * s, -0.5 * s, 2 * s, -0.5 * s])  # fmt: skip


def test_gaussianized_maps_ranks_to_normal_quantiles():
    q = NormalDist().inv_cdf
    close(adv("gaussianized", [10, 30, 20], [0] * 3), [q(1 / 6), q(5 / 6), 0.0])
    # ties share the mean of the normal scores of the positions they span: positions 2, 3 -> (q(5/8) + q(7/8)) / 2
    tied = (q(5 / 8) + q(7 / 8)) / 2
    close(adv("gaussianized", [1, 1, 0, 0], [0] * 4), [tied, tied, -tied, -tied])
    close(adv("gaussianized", [1, 1, 0, 0], [0] * 4, standardize=True), [1, 1, -1, -1])
    close(adv("gaussianized", [2, 2, 2], [0] * 3), [0, 0, 0])


def test_gaussianized_is_zero_mean_under_uneven_ties():
    q = NormalDist().inv_cdf
    # n = 8, scores q((k + 0.5)/8): the 1s span positions 6, 7, the 0s positions 0..5 (q(5/16) + q(11/16) = 0, ...)
    s = q(13 / 16) + q(15 / 16)  # 2.4213
    binary = adv("gaussianized", [1, 1, 0, 0, 0, 0, 0, 0], [0] * 8)
    close(binary, [s / 2] * 2 + [-s / 6] * 6)  # 1.2106, −0.4035 (mid-ranks gave q(7/8), q(3/8): mean +0.049)
    assert abs(binary.sum().item()) < 1e-12
    # standardized: mean 0, population std 1 -> √3 and −1/√3, GRPO's (r − p)/√(p(1 − p)) at p = 1/4
    standardized = adv("gaussianized", [1, 1, 0, 0, 0, 0, 0, 0], [0] * 8, standardize=True)
    close(standardized, [math.sqrt(3)] * 2 + [-1 / math.sqrt(3)] * 6)
    assert abs(standardized.sum().item()) < 1e-12
    # n = 5: 0 at position 0, the three 1s at 1..3 (mean of q(0.3), q(0.5), q(0.7) = 0), 3 at position 4
    close(adv("gaussianized", [3, 1, 1, 1, 0], [0] * 5), [q(0.9), 0, 0, 0, q(0.1)])
    # n = 5: the 0s span 0, 1 and the 1s 2..4 (mid-ranks gave q(0.7), q(0.2): mean −0.022)
    uneven = adv("gaussianized", [1, 1, 1, 0, 0], [0] * 5)
    close(uneven, [(q(0.7) + q(0.9)) / 3] * 3 + [(q(0.1) + q(0.3)) / 2] * 2)  # 0.6020, −0.9030
    # a missing reward is left out of the ranks (n = 5) and gets 0; two groups are ranked separately
    rewards = [1, math.nan, 1, 0, 0, 0, 5, 5, 5, 7]  # groups of 6 and 4
    mixed = adv("gaussianized", rewards, [0] * 6 + [1] * 4)
    ones, zeros = (q(0.7) + q(0.9)) / 2, (q(0.1) + q(0.3)) / 3  # 0.9030, −0.6020
    fives = (q(1 / 8) + q(3 / 8) + q(5 / 8)) / 3
    close(mixed, [ones, 0, ones, zeros, zeros, zeros] + [fives] * 3 + [q(7 / 8)])
    assert abs(mixed[:6].sum().item()) < 1e-12 and abs(mixed[6:].sum().item()) < 1e-12


def test_quantile_baseline_picks_a_side():
    # p = 0.25 <= 1 − K: baseline 0, only the success gets signal; p = 0.75 > 1 − K: baseline 1, only the failure
    close(adv("quantile", [0, 0, 0, 1, 1, 1, 1, 0], [0] * 4 + [1] * 4), [0, 0, 0, 1, 0, 0, 0, -1])
    close(adv("quantile", [0, 2, 4, 6, 8], [0] * 5, quantile_level=0.3), [-2, 0, 2, 4, 6])  # ⌈1.5⌉ = 2nd smallest
    close(adv("quantile", [0, 0, 0, 1], [0] * 4, scale_by_std=True, eps=0.0), [0, 0, 0, 2])  # unbiased std 0.5
    with pytest.raises(ValueError, match="quantile_level"):
        adv("quantile", [0, 1], [0, 0], quantile_level=1.0)


def test_noise_aware_weights_shrink_unbalanced_groups():
    rewards = [1, 0, 1, 0] + [1, 0, 0, 0, 0] + [1] + [0] * 9
    groups = [0] * 4 + [1] * 5 + [2] * 10
    # η(1−η) = 0.09; variances 0.25, 0.16, 0.09 -> weights 0.64, 0.4375, 0
    expected = [0.32, -0.32, 0.32, -0.32] + [0.4375 * 0.8] + [-0.4375 * 0.2] * 4 + [0.0] * 10
    close(adv("noise_aware", rewards, groups, noise_rate=0.1), expected)
    close(adv("noise_aware", [1, 0], [0, 0], noise_rate=0.0), [0.5, -0.5])  # no noise: Dr. GRPO


def test_difficulty_balanced_uses_the_mean_absolute_deviation():
    rewards, groups = [1, 0, 0, 0, 1, 1, 0, 0], [0] * 4 + [1] * 4
    close(
        adv("difficulty_balanced", rewards, groups, eps=0.0, temperature=None),
        [2, -2 / 3, -2 / 3, -2 / 3, 1, 1, -1, -1],
    )
    w_hard = 2 / (1 + math.exp(-0.25))  # softmax(−0.25, −0.5) · 2 groups
    w_easy = 2 - w_hard
    got = adv("difficulty_balanced", rewards, groups, eps=0.0, temperature=1.0)
    close(got, [2 * w_hard] + [-2 / 3 * w_hard] * 3 + [w_easy, w_easy, -w_easy, -w_easy])


def test_difficulty_balanced_default_is_the_whole_dgpo():
    # DGAE (MAD) × DQW with the reference's τ = 2 over the B_v = 2 non-constant groups; the all-correct and all-wrong
    # groups get 0 and stay out of the softmax
    rewards = [1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0]  # four groups of 4
    groups = [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4
    w_hard = 2 / (1 + math.exp(-0.125))  # 2·softmax(−0.25/2, −0.5/2)[0] = 1.0623
    w_easy = 2 - w_hard  # 0.9377
    got = adv("difficulty_balanced", rewards, groups, eps=0.0)
    close(got, [2 * w_hard] + [-2 / 3 * w_hard] * 3 + [w_easy, w_easy, -w_easy, -w_easy] + [0.0] * 8)
    # Σ|A| per question: 4·λ (MAD makes it 4 for each; the weights average 1 over the weighed questions)
    close(got.view(4, 4).abs().sum(1), [4 * w_hard, 4 * w_easy, 0.0, 0.0])


def test_zero_variance_groups_get_direct_rewards():
    s = 0.5 / math.sqrt(0.5)
    close(adv("zero_variance_direct", [1, 1, 0, 0, 1, 0], [0, 0, 1, 1, 2, 2], eps=0.0), [0.1, 0.1, -0.1, -0.1, s, -s])


def test_empirical_bayes_with_a_given_prior():
    rewards, groups = [0, 0, 0, 0, 1, 0, 1, 0], [0] * 4 + [1] * 4
    lam = 0.0625 / (0.0625 + 0.04)  # σ²/n = 0.25 / 4, τ² = 0.04
    b = lam * 0.5  # all-fail group: shrunk towards μ₀ = 0.5, a non-vanishing penalty
    got = adv("empirical_bayes", rewards, groups, prior_mean=0.5, prior_var=0.04, noise_var=0.25, normalize=False)
    close(got, [-b] * 4 + [0.5, -0.5, 0.5, -0.5])
    got = adv("empirical_bayes", rewards, groups, prior_mean=0.5, prior_var=0.04, noise_var=0.25, eps=0.0)
    close(got, [-2 * b] * 4 + [1, -1, 1, -1])  # / √σ²


def test_empirical_bayes_prior_from_the_batch():
    rewards, groups = [0, 0, 0, 0, 1, 0, 1, 0], [0] * 4 + [1] * 4
    # μ₀ = mean(0, 0.5) = 0.25, τ² = 0.0625, σ² = mean(0, 0.25) = 0.125 -> λ = 0.03125 / 0.09375 = 1/3
    b0, b1 = 0.25 / 3, 2 / 3 * 0.5 + 0.25 / 3
    got = adv("empirical_bayes", rewards, groups, normalize=False)
    close(got, [-b0] * 4 + [1 - b1, -b1, 1 - b1, -b1])


def test_smooth_standardized_mixes_in_history():
    got = adv("smooth_standardized", [1, 1, 1, 0], [0, 0, 1, 1], history_mean=0.5, history_std=0.5, eps=0.0)
    # group 0: μ̃ = 0.75, σ̃ = 0.25 -> 1; group 1: μ̃ = 0.5, σ̃ = 0.5·√0.5 + 0.25
    s = 0.5 / (0.5 * math.sqrt(0.5) + 0.25)
    close(got, [1, 1, s, -s])
    plain = adv("smooth_standardized", [1, 0, 1, 1], [0, 0, 1, 1], smoothing=0.0)
    torch.testing.assert_close(plain, adv("grpo", [1, 0, 1, 1], [0, 0, 1, 1]))


def test_momentum_augmented_adds_a_momentum_term():
    got = adv("momentum_augmented", [1, 0, 1, 1], [0, 0, 1, 1], momentum_mean=0.25, momentum_gain=0.5, eps=0.0)
    s = 0.5 / math.sqrt(0.5)
    close(got, [s + 0.375, -s - 0.125, 0.375, 0.375])


def test_catalogue_estimators_handle_missing_rewards_and_columns():
    rewards = t([1, NAN, 0, 1, 0.5, 0.2])
    groups = ids([0, 0, 0, 1, 1, 1])
    for name in ("std_dial", "gaussianized", "quantile", "noise_aware", "difficulty_balanced", "empirical_bayes"):
        out = compute_advantages(name, rewards, groups)
        assert torch.isfinite(out).all() and out[1] == 0, name
