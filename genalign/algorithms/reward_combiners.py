"""Combining several reward functions into one reward per sample.

Every combiner has the signature ``fn(rewards [N, K], group_ids [N], weights [K], **hp) -> (combined [N], stats)``.
The trainer always runs ``combined, stats = combiner(...)`` and then ``advantages = estimator(combined, group_ids)``:

* ``weighted_sum`` (sum-then-normalise): ``r_i = Σ_k w_k r_ik``; pair with any estimator (``grpo`` is plain GRPO).
* ``normalize_then_sum`` (GDPO [16]): ``r_i = Σ_k w_k z_ik`` with ``z_ik`` reward ``k`` z-scored within its group.
  GDPO then z-scores over the batch: pair it with the ``reinforce_pp_baseline`` estimator, whose group centring is a
  no-op on these already centred values (exactly so when no reward is missing) and whose batch whitening is GDPO's
  last step. Pairing it with ``grpo`` re-normalises the sum within each group instead of over the batch (a
  variant, not GDPO).

The method catalogue adds variance-based weights and saturation discounts (``variance_normalized``,
``variance_adaptive``, ``saturation_aware``); combiners that standardise within groups return values already centred
per group: pair them with ``dr_grpo`` (keeps their scale) or any estimator.

Missing rewards (NaN) are skipped in the weighted sum; a sample with every reward missing gets a NaN combined reward,
which estimators turn into advantage 0. ``stats`` holds per-reward batch statistics (NaN-aware) for logging.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from genalign.algorithms._groups import batch_stats, group_stats, make_groups
from genalign.algorithms._validation import check_float_tensor, check_group_ids, check_rewards
from genalign.algorithms.advantages.group_baselines import grpo
from genalign.registry import Registry

RewardCombiner = Callable[..., tuple[Tensor, dict[str, float]]]

#: name -> ``fn(rewards [N, K], group_ids [N], weights [K], **hp) -> (combined [N], stats)``
REWARD_COMBINERS: Registry[RewardCombiner] = Registry("reward combiner")


def _check_inputs(rewards: Tensor, group_ids: Tensor, weights: Tensor | Sequence[float]) -> tuple[Tensor, Tensor]:
    rewards = check_rewards(rewards)
    if rewards.ndim != 2:
        raise ValueError(f"rewards must have shape [N, K] (one column per reward function), got {list(rewards.shape)}")
    check_group_ids(group_ids, rewards.shape[0])
    if not isinstance(weights, Tensor):
        weights = torch.tensor(list(weights), dtype=rewards.dtype, device=rewards.device)
    weights = check_float_tensor(weights, "weights", "[K]")
    if tuple(weights.shape) != (rewards.shape[1],):
        raise ValueError(
            f"weights must have shape [K]=[{rewards.shape[1]}] (one per reward), got {list(weights.shape)}"
        )
    if not torch.isfinite(weights).all():
        raise ValueError(f"weights must be finite, got {weights.tolist()}")
    return rewards, weights.to(rewards.dtype)


def _weighted_nansum(values: Tensor, weights: Tensor) -> Tensor:
    """``Σ_k w_k v_k`` over the non-NaN entries of each row of ``values`` ``[N, K]``; NaN if a row is all NaN."""
    present = ~torch.isnan(values)  # [N, K]
    total = torch.where(present, values * weights, 0.0).sum(1)  # [N]
    return torch.where(present.any(1), total, torch.nan)


def reward_statistics(rewards: Tensor, names: Sequence[str] | None = None) -> dict[str, float]:
    """Per-reward ``{name}/mean``, ``{name}/std`` (over present values) and ``{name}/frac_missing`` of ``[N, K]``."""
    k = rewards.shape[1]
    names = [f"reward_{j}" for j in range(k)] if names is None else list(names)
    if len(names) != k:
        raise ValueError(f"names must hold one name per reward column (K={k}), got {len(names)}: {names}")
    stats: dict[str, float] = {}
    for j, name in enumerate(names):
        column = rewards[:, j]  # [N]
        present = column[~torch.isnan(column)]
        stats[f"{name}/mean"] = present.mean().item() if present.numel() else float("nan")
        stats[f"{name}/std"] = present.std(correction=0).item() if present.numel() else float("nan")
        stats[f"{name}/frac_missing"] = 1.0 - present.numel() / column.numel()
    return stats


@REWARD_COMBINERS.register(
    "weighted_sum",
    formula="r_i = Σ_k w_k r_ik (missing r_ik skipped), then any estimator",
    source="formulas.md §1 (multi-reward, sum-then-normalise)",
    summary="Weighted sum of the rewards; the estimator normalises the sum.",
)
def weighted_sum(
    rewards: Tensor, group_ids: Tensor, weights: Tensor | Sequence[float], *, names: Sequence[str] | None = None
) -> tuple[Tensor, dict[str, float]]:
    """Sum-then-normalise: ``r_i = Σ_k w_k r_ik`` (formulas.md §1).

    Args:
        rewards: ``[N, K]``, one column per reward function; NaN = missing (skipped in the sum).
        group_ids: ``[N]`` integer group of each sample (unused by the sum, checked for shape).
        weights: ``[K]`` weight of each reward.
        names: ``K`` reward names used as keys in ``stats`` (default ``reward_0`` ...).
    Returns:
        ``(combined [N], stats)``; ``combined`` is NaN where every reward is missing.
    """
    rewards, weights = _check_inputs(rewards, group_ids, weights)
    combined = _weighted_nansum(rewards, weights)  # [N]
    return combined, reward_statistics(rewards, names)


@REWARD_COMBINERS.register(
    "normalize_then_sum",
    formula="z_ik = (r_ik − mean_G r_k) / (std_G r_k + eps); r_i = Σ_k w_k z_ik; "
    "pair with reinforce_pp_baseline for GDPO's final batch z-score",
    source="[16] GDPO",
    summary="Normalise each reward within its group, then take the weighted sum (GDPO).",
)
def normalize_then_sum(
    rewards: Tensor,
    group_ids: Tensor,
    weights: Tensor | Sequence[float],
    *,
    eps: float = 1e-6,
    unbiased_std: bool = True,
    names: Sequence[str] | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """GDPO [16] decoupled normalisation: z-score each reward within its group, then the weighted sum.

    Summing first lets distinct reward combinations collapse to identical advantages; normalising each reward first
    keeps their relative differences. A missing reward contributes 0 (the group mean) to the sum. Pair with the
    ``reinforce_pp_baseline`` estimator for GDPO's final batch z-score (see the module docstring).

    Args:
        rewards: ``[N, K]``, one column per reward function; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        weights: ``[K]`` weight of each reward.
        eps: added to each group std.
        unbiased_std: ``n - 1`` (True) or ``n`` (False) in the group variance.
        names: ``K`` reward names used as keys in ``stats`` (default ``reward_0`` ...).
    Returns:
        ``(combined [N], stats)``; ``combined`` is NaN where every reward is missing.
    """
    rewards, weights = _check_inputs(rewards, group_ids, weights)
    normalised = grpo(rewards, group_ids, eps=eps, unbiased_std=unbiased_std)  # [N, K], 0 where missing
    normalised = torch.where(torch.isnan(rewards), torch.nan, normalised)  # keep "missing" visible to the sum
    combined = _weighted_nansum(normalised, weights)  # [N]
    return combined, reward_statistics(rewards, names)


@REWARD_COMBINERS.register(
    "variance_normalized",
    experimental=True,
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
    rewards, weights = _check_inputs(rewards, group_ids, weights)
    _, std = batch_stats(rewards, ~torch.isnan(rewards), unbiased=True)  # [K]
    combined = _weighted_nansum(rewards / (std + eps), weights)  # [N]
    stats = reward_statistics(rewards, names)
    return combined, stats


@REWARD_COMBINERS.register(
    "variance_adaptive",
    experimental=True,
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
    rewards, weights = _check_inputs(rewards, group_ids, weights)
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
    experimental=True,
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
    rewards, weights = _check_inputs(rewards, group_ids, weights)
    scaled = ((rewards - reward_low) / (reward_high - reward_low)).clamp(0.0, 1.0)  # [N, K], NaN kept
    saturation, _ = batch_stats(scaled, ~torch.isnan(scaled), unbiased=False)  # [K]
    discount = (1.0 - saturation).pow(saturation_power)  # [K]
    z = grpo(rewards, group_ids, eps=eps)  # [N, K]
    z = torch.where(torch.isnan(rewards), torch.nan, z)
    combined = _weighted_nansum(z, weights * discount)  # [N]
    stats = reward_statistics(rewards, names)
    labels = [f"reward_{j}" for j in range(rewards.shape[1])] if names is None else list(names)
    stats |= {f"{label}/saturation": float(saturation[j]) for j, label in enumerate(labels)}
    return combined, stats
