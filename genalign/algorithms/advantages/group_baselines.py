"""Group baselines: GRPO, Dr. GRPO, batch-std, RLOO, REINFORCE++ baseline, median and rank estimators (formulas.md §1).

Signature and shared rules: :mod:`genalign.algorithms.advantages.base`."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._groups import (
    batch_stats,
    group_stats,
    like_input,
    padded_by_group,
)
from genalign.algorithms.advantages.base import ADVANTAGE_ESTIMATORS, finish, prepare


@ADVANTAGE_ESTIMATORS.register(
    "grpo",
    formula="A_i = (r_i − mean_G) / (std_G + eps); std unbiased (n−1) or population (n)",
    source="formulas.md §1 (GRPO); [297]",
    summary="Group mean baseline, divided by the group standard deviation.",
)
def grpo(rewards: Tensor, group_ids: Tensor, *, eps: float = 1e-6, unbiased_std: bool = True) -> Tensor:
    """GRPO advantage ``(r - mean_G) / (std_G + eps)`` (formulas.md §1; the std "dial" of [297]).

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        eps: added to the group std (1e-4 ... 1e-6 in public implementations).
        unbiased_std: ``True`` divides the variance by ``n - 1`` (most implementations), ``False`` by ``n``.
    Returns:
        advantages, same shape as ``rewards``.
    """
    columns, groups = prepare(rewards, group_ids)
    stats = group_stats(columns, groups, unbiased=unbiased_std)
    scale = stats.std[groups.index] + eps  # [N, K]; 0 only for a constant group with eps = 0
    advantages = torch.where(scale > 0, (columns - stats.mean[groups.index]) / scale.clamp_min(1e-300), 0.0)  # [N, K]
    return finish(advantages, columns, groups, stats, rewards)


@ADVANTAGE_ESTIMATORS.register(
    "dr_grpo",
    formula="A_i = r_i − mean_G",
    source="[31] Dr. GRPO",
    summary="Group mean baseline without the std division (removes the difficulty bias).",
)
def dr_grpo(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """Dr. GRPO advantage ``r - mean_G`` (no std division) [31].

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
    Returns:
        advantages, same shape as ``rewards``.
    """
    columns, groups = prepare(rewards, group_ids)
    stats = group_stats(columns, groups, unbiased=True)
    return finish(columns - stats.mean[groups.index], columns, groups, stats, rewards)


@ADVANTAGE_ESTIMATORS.register(
    "batch_std",
    formula="A_i = (r_i − mean_G) / (std_batch + eps)",
    source="formulas.md §1 (Lite PPO / Flow-GRPO global_std)",
    summary="Group mean baseline, divided by the std of all valid rewards of the batch.",
)
def batch_std(rewards: Tensor, group_ids: Tensor, *, eps: float = 1e-6, unbiased_std: bool = True) -> Tensor:
    """Group-mean baseline scaled by the batch std: ``(r - mean_G) / (std_batch + eps)`` (formulas.md §1).

    ``std_batch`` is taken over every valid reward of the batch passed in (per column for ``[N, K]``), so call it on
    the whole optimisation batch.

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        eps: added to the batch std.
        unbiased_std: ``n - 1`` (True) or ``n`` (False) in the batch variance.
    Returns:
        advantages, same shape as ``rewards``.
    """
    columns, groups = prepare(rewards, group_ids)
    stats = group_stats(columns, groups, unbiased=unbiased_std)
    _, std = batch_stats(columns, ~torch.isnan(columns), unbiased=unbiased_std)  # [K]
    advantages = (columns - stats.mean[groups.index]) / (std + eps)  # [N, K]
    return finish(advantages, columns, groups, stats, rewards)


@ADVANTAGE_ESTIMATORS.register(
    "rloo",
    formula="A_i = r_i − mean_{j≠i} r_j = n/(n−1) · (r_i − mean_G)",
    source="[3] (leave-one-out baseline, inferred); formulas.md §1",
    summary="Leave-one-out baseline: each sample is compared with the mean of the others in its group.",
)
def rloo(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """Leave-one-out (RLOO) advantage ``r_i - mean_{j != i} r_j = n/(n-1) (r_i - mean_G)`` ([3], formulas.md §1).

    ``n`` is the number of valid rewards in the group (missing rewards are not "others").

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
    Returns:
        advantages, same shape as ``rewards``.
    """
    columns, groups = prepare(rewards, group_ids)
    stats = group_stats(columns, groups, unbiased=True)
    n = stats.count[groups.index]  # [N, K]
    advantages = n / (n - 1.0).clamp_min(1.0) * (columns - stats.mean[groups.index])  # [N, K]
    return finish(advantages, columns, groups, stats, rewards)


@ADVANTAGE_ESTIMATORS.register(
    "reinforce_pp_baseline",
    formula="x_i = r_i − mean_G; A_i = (x_i − mean_batch(x)) / (std_batch(x) + eps), batch statistics over valid "
    "samples (each sample once)",
    source="formulas.md §1 (REINFORCE++ with baseline); differs from verl, which whitens over valid tokens",
    summary="Group mean baseline, then whitening over the whole batch; genalign weighs every sample once, verl "
    "weighs each by its token count (long sequences count more there).",
)
def reinforce_pp_baseline(
    rewards: Tensor, group_ids: Tensor, *, eps: float = 1e-6, unbiased_std: bool = True
) -> Tensor:
    """REINFORCE++-with-baseline advantage: subtract the group mean, then whiten over the batch (formulas.md §1).

    The whitening runs over valid *samples* (each sample counts once); implementations that whiten over valid
    *tokens* weight long sequences more. Call it on the whole optimisation batch. Paired with the
    ``normalize_then_sum`` reward combiner this is exactly GDPO [16].

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        eps: added to the batch std.
        unbiased_std: ``n - 1`` (True) or ``n`` (False) in the batch variance.
    Returns:
        advantages, same shape as ``rewards``.
    """
    columns, groups = prepare(rewards, group_ids)
    stats = group_stats(columns, groups, unbiased=unbiased_std)
    centred = columns - stats.mean[groups.index]  # [N, K]
    usable = ~torch.isnan(columns) & (stats.count[groups.index] >= 2)  # [N, K]
    mean, std = batch_stats(centred, usable, unbiased=unbiased_std)  # [K], [K]
    return finish((centred - mean) / (std + eps), columns, groups, stats, rewards)


@ADVANTAGE_ESTIMATORS.register(
    "median",
    formula="A_i = r_i − median_G (mean of the two middle values for an even count)",
    source="[82] MC-GRPO",
    summary="Median baseline, robust to outlier rewards at small group sizes (sample G+1 rollouts).",
)
def median(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """Median-centred advantage ``r - median_G`` (MC-GRPO [82]).

    MC-GRPO samples ``G + 1`` rollouts (an odd count), so exactly one "pivot" sample equals the median and gets
    advantage 0, which removes it from the policy gradient. It still counts in token-mean denominators: drop it from
    ``mask`` if it must not. For an even count the median is the mean of the two middle values.

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
    Returns:
        advantages, same shape as ``rewards``.
    """
    columns, groups = prepare(rewards, group_ids)
    stats = group_stats(columns, groups, unbiased=True)
    padded, _ = padded_by_group(columns, groups)  # [G, S, K]
    medians = torch.nanquantile(padded, 0.5, dim=1)  # [G, K]
    return finish(columns - medians[groups.index], columns, groups, stats, rewards)


@ADVANTAGE_ESTIMATORS.register(
    "rank",
    formula="q_i = rank of r_i in its group (ties averaged, 0-based); A_i = (q_i − mean_G q) / (std_G q + eps)",
    source="[279] GOPO",
    summary="Ordinal advantage: within-group ranks replace reward magnitudes, then GRPO normalisation.",
)
def rank(rewards: Tensor, group_ids: Tensor, *, eps: float = 1e-6, unbiased_std: bool = True) -> Tensor:
    """Rank-based (ordinal) advantage of GOPO [279]: GRPO normalisation applied to within-group ranks.

    ``q_i = #{j: r_j < r_i} + 0.5 #{j != i: r_j = r_i}`` over the valid rewards of the group, so ties share their
    average rank and only the ordering of rewards matters.

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        eps: added to the std of the ranks.
        unbiased_std: ``n - 1`` (True) or ``n`` (False) in the rank variance.
    Returns:
        advantages, same shape as ``rewards``.
    """
    columns, groups = prepare(rewards, group_ids)
    padded, _ = padded_by_group(columns, groups)  # [G, S, K]
    peers = padded[groups.index]  # [N, S, K]; NaN peers compare False
    below = (peers < columns[:, None, :]).sum(1)  # [N, K]
    ties = (peers == columns[:, None, :]).sum(1) - 1  # [N, K], minus the sample itself
    ranks = torch.where(torch.isnan(columns), torch.nan, below + 0.5 * ties.to(columns.dtype))  # [N, K]
    return like_input(grpo(ranks, group_ids, eps=eps, unbiased_std=unbiased_std), rewards)
