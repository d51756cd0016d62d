"""Variance- and saturation-aware reward combiners whose form genalign chose from the abstract (experimental tier)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from genalign.algorithms._groups import batch_stats, group_stats, make_groups
from genalign.algorithms.advantages.group_baselines import grpo
from genalign.algorithms.reward_combiners import (
    REWARD_COMBINERS,
    check_combiner_inputs,
    reward_statistics,
    weighted_nansum,
)


@REWARD_COMBINERS.register(
    "variance_normalized",
    formula="r_i = Σ_k w_k · r_ik / (std_batch(r_k) + eps)",
    source="[61] MO-GRPO",
    summary="Reweight each reward by the inverse of its batch standard deviation so all contribute evenly.",
)
def variance_normalized(
    rewards: Tensor,
    group_ids: Tensor,
    weights: Tensor | Sequence[float],
    *,
    eps: float = 1e-6,
    names: Sequence[str] | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """MO-GRPO [61]: each reward function is rescaled by the spread of its values, ``r_i = Σ_k w_k r_ik / σ_k``, so a
    reward with a large scale cannot dominate (reward hacking of one objective) while each reward's preference order
    is kept; the estimator then normalises the sum within groups.

    Reading chosen: ``σ_k`` is the (unbiased) std of reward ``k`` over the valid values of the batch (per-group
    standardisation is ``normalize_then_sum``, GDPO [16]).

    Args:
        rewards: ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` (checked for shape).
        weights: ``[K]``.
        eps: added to each std.
        names: reward names for ``stats``.
    """
    rewards, weights = check_combiner_inputs(rewards, group_ids, weights)
    _, std = batch_stats(rewards, ~torch.isnan(rewards), unbiased=True)  # [K]
    combined = weighted_nansum(rewards / (std + eps), weights)  # [N]
    stats = reward_statistics(rewards, names)
    return combined, stats


@REWARD_COMBINERS.register(
    "variance_adaptive",
    formula="z_ik = group z-score of r_k; ω_Gk = w_k·σ²_Gk / Σ_j w_j·σ²_Gj (w_k/Σw if all σ² = 0); r_i = Σ_k ω_Gk·z_ik",
    source="[191] DVAO",
    summary="Per-group weights proportional to each reward's within-group variance: strong signals count more.",
)
def variance_adaptive(
    rewards: Tensor,
    group_ids: Tensor,
    weights: Tensor | Sequence[float],
    *,
    eps: float = 1e-6,
    names: Sequence[str] | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """DVAO [191]: combination weights set per group from each objective's within-group reward variance; an
    objective that separates the group's samples is up-weighted, one that barely varies (noise) is suppressed. The
    weights of a group sum to 1, so ``|r_i| <= max_k |z_ik|`` (bounded advantage).

    Reading chosen: weights ``∝ w_k σ²_Gk`` applied to per-group z-scores (population variance for the weights).

    Args:
        rewards: ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        weights: ``[K]`` non-negative base weights.
        eps: added to the group std of the z-scores.
        names: reward names for ``stats``.
    """
    rewards, weights = check_combiner_inputs(rewards, group_ids, weights)
    if (weights < 0).any():
        raise ValueError(f"weights must be >= 0 for variance_adaptive (they scale variances), got {weights.tolist()}")
    groups = make_groups(group_ids, rewards.shape[0])
    variance = group_stats(rewards, groups, unbiased=False).std.square()  # [G, K]
    scores = weights * variance  # [G, K]
    total = scores.sum(1, keepdim=True)  # [G, 1]
    fallback = (weights / weights.sum().clamp_min(1e-12)).expand_as(scores)  # [G, K]
    omega = torch.where(total > 0, scores / total.clamp_min(1e-12), fallback)  # [G, K]
    z = grpo(rewards, group_ids, eps=eps)  # [N, K], 0 where missing
    z = torch.where(torch.isnan(rewards), torch.nan, z)
    present = ~torch.isnan(z)  # [N, K]
    combined = torch.where(present, omega[groups.index] * z, 0.0).sum(1)  # [N]
    combined = torch.where(present.any(1), combined, torch.nan)
    return combined, reward_statistics(rewards, names)


@REWARD_COMBINERS.register(
    "saturation_aware",
    formula="z_ik = group z-score of r_k; s_k = batch mean of (r_k − lo)/(hi − lo) clamped to [0, 1]; "
    "r_i = Σ_k w_k·(1 − s_k)^γ·z_ik",
    source="[238] SA-MRPO",
    summary="Standardise each reward within its group, then discount it by its batch-level saturation.",
)
def saturation_aware(
    rewards: Tensor,
    group_ids: Tensor,
    weights: Tensor | Sequence[float],
    *,
    reward_low: float = 0.0,
    reward_high: float = 1.0,
    saturation_power: float = 1.0,
    eps: float = 1e-6,
    names: Sequence[str] | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """SA-MRPO [238]: each objective is standardised within the group and then discounted by how saturated it is
    across the batch, so an objective the policy already satisfies almost everywhere stops outvoting the others;
    because the discount differs per objective, the sign of the combined advantage can flip, not just shrink.

    Reading chosen: saturation ``s_k`` = batch mean of reward ``k`` rescaled from ``[reward_low, reward_high]`` to
    ``[0, 1]``; discount ``(1 − s_k)^γ``. Rewards of different ranges need their own rescaling before (one range for
    all here).

    Args:
        rewards: ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        weights: ``[K]``.
        reward_low, reward_high: the range in which ``reward_high`` means saturated (``reward_high > reward_low``).
        saturation_power: ``γ >= 0``.
        eps: added to the group std of the z-scores.
        names: reward names for ``stats`` (plus ``{name}/saturation``).
    """
    if not (reward_high > reward_low and saturation_power >= 0):
        raise ValueError(
            f"need reward_high > reward_low and saturation_power >= 0, got reward_low={reward_low!r}, "
            f"reward_high={reward_high!r}, saturation_power={saturation_power!r}"
        )
    rewards, weights = check_combiner_inputs(rewards, group_ids, weights)
    scaled = ((rewards - reward_low) / (reward_high - reward_low)).clamp(0.0, 1.0)  # [N, K], NaN kept
    saturation, _ = batch_stats(scaled, ~torch.isnan(scaled), unbiased=False)  # [K]
    discount = (1.0 - saturation).pow(saturation_power)  # [K]
    z = grpo(rewards, group_ids, eps=eps)  # [N, K]
    z = torch.where(torch.isnan(rewards), torch.nan, z)
    combined = weighted_nansum(z, weights * discount)  # [N]
    stats = reward_statistics(rewards, names)
    labels = [f"reward_{j}" for j in range(rewards.shape[1])] if names is None else list(names)
    stats |= {f"{label}/saturation": float(saturation[j]) for j, label in enumerate(labels)}
    return combined, stats
