"""Advantage estimators: hand-computed values, loop-vs-vectorised equivalence, identities, missing rewards, bad input."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from genalign.algorithms import ADVANTAGE_ESTIMATORS, HyperparameterError, compute_advantages
from genalign.registry import UnknownOptionError

NAN = float("nan")


def t(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def ids(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long)


# ------------------------------------------------------------------------------------------------ hand-computed values
def test_grpo_unbiased_and_population_std():
    rewards, groups = t([1, 0, 1, 0]), ids([7, 7, 7, 7])
    # mean 0.5; unbiased std sqrt(4 * 0.25 / 3) = sqrt(1/3); population std 0.5
    expected = 0.5 / math.sqrt(1 / 3)
    got = ADVANTAGE_ESTIMATORS.get("grpo")(rewards, groups, eps=0.0)
    torch.testing.assert_close(got, t([expected, -expected, expected, -expected]))
    got = ADVANTAGE_ESTIMATORS.get("grpo")(rewards, groups, eps=0.0, unbiased_std=False)
    torch.testing.assert_close(got, t([1, -1, 1, -1]))


def test_grpo_eps_in_denominator():
    got = ADVANTAGE_ESTIMATORS.get("grpo")(t([2, 0]), ids([0, 0]), eps=1.0, unbiased_std=False)
    torch.testing.assert_close(got, t([0.5, -0.5]))  # (2 - 1) / (1 + 1)


def test_dr_grpo_and_rloo():
    rewards, groups = t([1, 0, 1, 0]), ids([3, 3, 3, 3])
    torch.testing.assert_close(ADVANTAGE_ESTIMATORS.get("dr_grpo")(rewards, groups), t([0.5, -0.5, 0.5, -0.5]))
    # r_0 - mean(0, 1, 0) = 1 - 1/3
    torch.testing.assert_close(ADVANTAGE_ESTIMATORS.get("rloo")(rewards, groups), t([2 / 3, -2 / 3, 2 / 3, -2 / 3]))


def test_batch_std_uses_the_std_of_all_rewards():
    rewards, groups = t([1, 0, 1, 0, 2, 2]), ids([0, 0, 0, 0, 1, 1])
    # batch mean 1, unbiased variance (0 + 1 + 0 + 1 + 1 + 1) / 5 = 0.8
    scale = 0.5 / math.sqrt(0.8)
    got = ADVANTAGE_ESTIMATORS.get("batch_std")(rewards, groups, eps=0.0)
    torch.testing.assert_close(got, t([scale, -scale, scale, -scale, 0, 0]))


def test_reinforce_pp_baseline_whitens_over_the_batch():
    rewards, groups = t([1, 0, 3, 1]), ids([0, 0, 1, 1])
    # centred: [0.5, -0.5, 1, -1]; batch mean 0; unbiased variance 2.5 / 3
    std = math.sqrt(2.5 / 3)
    got = ADVANTAGE_ESTIMATORS.get("reinforce_pp_baseline")(rewards, groups, eps=0.0)
    torch.testing.assert_close(got, t([0.5 / std, -0.5 / std, 1 / std, -1 / std]))


def test_median_odd_and_even_groups():
    rewards, groups = t([1, 2, 4, 1, 2, 4, 10]), ids([0, 0, 0, 1, 1, 1, 1])
    # group 0: median 2 (the pivot gets 0); group 1: median (2 + 4) / 2 = 3
    torch.testing.assert_close(ADVANTAGE_ESTIMATORS.get("median")(rewards, groups), t([-1, 0, 2, -2, -1, 1, 7]))


def test_rank_uses_only_the_order_with_averaged_ties():
    rewards, groups = t([10, 30, 20, 20]), ids([0, 0, 0, 0])
    # ranks [0, 3, 1.5, 1.5]: mean 1.5, unbiased std sqrt(4.5 / 3)
    s = 1.5 / math.sqrt(1.5)
    got = ADVANTAGE_ESTIMATORS.get("rank")(rewards, groups, eps=0.0)
    torch.testing.assert_close(got, t([-s, s, 0, 0]))
    squashed = ADVANTAGE_ESTIMATORS.get("rank")(t([0.1, 1e6, 5, 5]), groups, eps=0.0)
    torch.testing.assert_close(squashed, got)


def test_missing_rewards_are_excluded_and_get_zero():
    rewards, groups = t([1, NAN, 0, 1]), ids([0, 0, 0, 0])
    # valid rewards [1, 0, 1], mean 2/3
    torch.testing.assert_close(ADVANTAGE_ESTIMATORS.get("dr_grpo")(rewards, groups), t([1 / 3, 0, -2 / 3, 1 / 3]))
    for name in ADVANTAGE_ESTIMATORS:
        out = ADVANTAGE_ESTIMATORS.get(name)(rewards, groups)
        assert torch.isfinite(out).all(), name
        assert out[1] == 0, name


#: estimators whose advantage is not "sign of r − group centre" for every sample, by design
ONE_SIDED = (
    "positive_only",
    "quantile",
    "reinforce",  # no baseline: the advantage is the reward (for shapers that subtract their own, e.g. [257])
)  # only positives [267]; a K-quantile baseline can equal the worst reward [216]


def test_group_with_fewer_than_two_valid_rewards_gets_zero():
    rewards, groups = t([1, NAN, 0, 2]), ids([0, 0, 1, 1])
    for name in ADVANTAGE_ESTIMATORS:
        out = ADVANTAGE_ESTIMATORS.get(name)(rewards, groups)
        assert out[0] == 0 and out[1] == 0, name
        if name in ONE_SIDED:
            assert out[2] <= 0 <= out[3] and out[3] > out[2], name
        else:
            assert out[2] < 0 < out[3], name


#: estimators that give a constant group a non-zero signal on purpose: whitening shifts by the batch mean; shrinkage
#: towards a prior [207], direct rewards [211], cross-step statistics [189] and momentum [228]
CONSTANT_GROUP_SIGNAL = (
    "reinforce_pp_baseline", "empirical_bayes", "zero_variance_direct", "smooth_standardized", "momentum_augmented",
    "value_anchored",  # absolute anchor [67]
    "cross_level_fusion",  # batch-level term [62]
    "reinforce",  # no group baseline at all
)  # fmt: skip


def test_constant_group_is_exactly_zero():
    rewards, groups = t([0.1, 0.1, 0.1, 0.7, 0.2]), ids([0, 0, 0, 1, 1])
    for name in ADVANTAGE_ESTIMATORS:
        out = ADVANTAGE_ESTIMATORS.get(name)(rewards, groups)
        if name not in CONSTANT_GROUP_SIGNAL:
            assert torch.equal(out[:3], torch.zeros(3, dtype=torch.float64)), name


def test_arbitrary_group_ids_and_unequal_sizes():
    rewards = t([1, 0, 5, 3, 4])
    a = ADVANTAGE_ESTIMATORS.get("dr_grpo")(rewards, ids([-9, -9, 10**12, 10**12, 10**12]))
    torch.testing.assert_close(a, t([0.5, -0.5, 1, -1, 0]))


def test_per_step_rewards_normalise_each_column():
    rewards = torch.stack([t([1, 0, 1, 0]), t([0, 2, 4, 6])], dim=1)  # [N=4, K=2]
    groups = ids([0, 0, 1, 1])
    got = ADVANTAGE_ESTIMATORS.get("dr_grpo")(rewards, groups)
    torch.testing.assert_close(got, torch.stack([t([0.5, -0.5, 0.5, -0.5]), t([-1, 1, -1, 1])], dim=1))
    for name in ADVANTAGE_ESTIMATORS:
        per_step = ADVANTAGE_ESTIMATORS.get(name)(rewards, groups)
        for k in range(2):
            torch.testing.assert_close(per_step[:, k], ADVANTAGE_ESTIMATORS.get(name)(rewards[:, k], groups))


def test_compute_advantages_clips():
    rewards, groups = t([0, 0, 0, 10]), ids([0, 0, 0, 0])
    out = compute_advantages("dr_grpo", rewards, groups, clip=5.0)
    torch.testing.assert_close(out, t([-2.5, -2.5, -2.5, 5.0]))
    with pytest.raises(ValueError, match="clip"):
        compute_advantages("dr_grpo", rewards, groups, clip=-1.0)


# -------------------------------------------------------------------------------------------- loop-vs-vectorised
def _loop_reference(name: str, rewards: list[float], groups: list[int]) -> list[float]:
    """Plain-Python per-group reference of every estimator (defaults: eps 1e-6, unbiased std)."""
    eps = 1e-6
    members: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    centred = [0.0] * len(rewards)
    scaled = [0.0] * len(rewards)
    usable = [False] * len(rewards)
    for idx in members.values():
        vals = [rewards[i] for i in idx if not math.isnan(rewards[i])]
        if len(vals) < 2:
            continue
        mean, std, med = statistics.fmean(vals), statistics.stdev(vals), statistics.median(vals)
        for i in idx:
            r = rewards[i]
            if math.isnan(r):
                continue
            usable[i] = True
            if name == "rloo":
                centred[i] = r - (sum(vals) - r) / (len(vals) - 1)
            elif name == "median":
                centred[i] = r - med
            elif name == "rank":
                below = sum(v < r for v in vals)
                ties = sum(v == r for v in vals) - 1
                ranks = [sum(w < v for w in vals) + 0.5 * (sum(w == v for w in vals) - 1) for v in vals]
                q = below + 0.5 * ties
                rank_std = statistics.stdev(ranks)
                centred[i] = 0.0 if rank_std == 0 else (q - statistics.fmean(ranks)) / (rank_std + eps)
            else:
                centred[i] = 0.0 if std == 0 else r - mean
            scaled[i] = 0.0 if std == 0 else (r - mean) / (std + eps)
    if name == "grpo":
        return scaled
    if name == "batch_std":
        valid = [r for r in rewards if not math.isnan(r)]
        s = statistics.stdev(valid)
        return [c / (s + eps) for c in centred]
    if name == "reinforce_pp_baseline":
        xs = [c for c, u in zip(centred, usable) if u]
        m, s = statistics.fmean(xs), statistics.stdev(xs)
        return [(c - m) / (s + eps) if u else 0.0 for c, u in zip(centred, usable)]
    return centred


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "batch_std", "rloo", "reinforce_pp_baseline", "median", "rank"])
def test_loop_matches_vectorised(name):
    gen = torch.Generator().manual_seed(0)
    sizes = [2, 3, 5, 4, 6, 2]
    groups = [g * 11 - 20 for g, n in enumerate(sizes) for _ in range(n)]
    rewards = torch.randint(0, 4, (len(groups),), generator=gen).to(torch.float64) / 2  # ties on purpose
    rewards[torch.rand(len(groups), generator=gen) < 0.15] = NAN
    got = ADVANTAGE_ESTIMATORS.get(name)(rewards, ids(groups))
    expected = _loop_reference(name, rewards.tolist(), groups)
    torch.testing.assert_close(got, t(expected), rtol=1e-9, atol=1e-9)


def test_the_core_estimators_have_a_loop_reference():
    # the method-catalogue estimators are checked by hand in test_advantage_catalogue.py
    assert {"grpo", "dr_grpo", "batch_std", "rloo", "reinforce_pp_baseline", "median", "rank"} <= set(
        ADVANTAGE_ESTIMATORS.names()
    )


# ------------------------------------------------------------------------------------------------ property tests
group_sizes = st.lists(st.integers(min_value=2, max_value=6), min_size=1, max_size=5)


@st.composite
def grouped_rewards(draw):
    sizes = draw(group_sizes)
    n = sum(sizes)
    values = draw(st.lists(st.floats(-10, 10, allow_nan=False), min_size=n, max_size=n))
    groups = [g for g, size in enumerate(sizes) for _ in range(size)]
    return t(values), ids(groups), sizes


@settings(max_examples=40, deadline=None)
@given(grouped_rewards())
def test_rloo_is_scaled_dr_grpo(data):
    rewards, groups, sizes = data
    n = t([size for size in sizes for _ in range(size)])
    expected = n / (n - 1) * ADVANTAGE_ESTIMATORS.get("dr_grpo")(rewards, groups)
    torch.testing.assert_close(ADVANTAGE_ESTIMATORS.get("rloo")(rewards, groups), expected, rtol=1e-9, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(grouped_rewards(), st.sampled_from(["grpo", "dr_grpo", "batch_std", "rloo"]))
def test_mean_baseline_advantages_sum_to_zero_per_group(data, name):
    rewards, groups, _ = data
    advantages = ADVANTAGE_ESTIMATORS.get(name)(rewards, groups)
    per_group = torch.zeros(int(groups.max()) + 1, dtype=torch.float64).index_add_(0, groups, advantages)
    torch.testing.assert_close(per_group, torch.zeros_like(per_group), rtol=0, atol=1e-7)


# ------------------------------------------------------------------------------------------------------- bad input
def test_group_with_one_member_raises_naming_group_ids():
    with pytest.raises(ValueError, match=r"group_ids: group 4 has 1 member"):
        ADVANTAGE_ESTIMATORS.get("grpo")(t([1, 0, 1]), ids([0, 0, 4]))


@pytest.mark.parametrize(
    ("rewards", "groups", "match"),
    [
        (torch.zeros(2, 2, 2, dtype=torch.float64), ids([0, 0]), r"rewards must have shape \[N\] or \[N, K\]"),
        (t([1, 0]), ids([0, 0, 1]), r"group_ids must have shape \[N\]=\[2\]"),
        (t([1, 0]), torch.tensor([0.0, 0.0]), "group_ids must be an integer tensor"),
        (torch.tensor([1, 0]), ids([0, 0]), "rewards must be a floating-point tensor"),
        (t([1, float("inf")]), ids([0, 0]), "rewards contains inf"),
    ],
)
def test_bad_shapes_and_dtypes_raise(rewards, groups, match):
    with pytest.raises(ValueError, match=match):
        compute_advantages("grpo", rewards, groups)


def test_unknown_estimator_lists_valid_names():
    with pytest.raises(UnknownOptionError, match=r"Did you mean 'grpo'.*Valid names: .*batch_std, .*dr_grpo"):
        compute_advantages("gpro", t([1, 0]), ids([0, 0]))


def test_unknown_hyperparameter_names_the_option_and_accepted_keywords():
    with pytest.raises(HyperparameterError, match=r"'grpo'.*'epsilon'.*Did you mean 'eps'.*eps, unbiased_std"):
        compute_advantages("grpo", t([1, 0]), ids([0, 0]), epsilon=1e-6)
    with pytest.raises(HyperparameterError, match="Accepted keywords: none"):
        compute_advantages("dr_grpo", t([1, 0]), ids([0, 0]), eps=1e-6)


def test_grpo_with_zero_eps_gives_a_constant_group_exactly_zero():
    got = ADVANTAGE_ESTIMATORS.get("grpo")(t([1, 1, 0, 1]), ids([0, 0, 1, 1]), eps=0.0)
    s = 0.5 / math.sqrt(0.5)
    torch.testing.assert_close(got, t([0, 0, -s, s]))
