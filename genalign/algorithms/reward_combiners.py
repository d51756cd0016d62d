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

from genalign.algorithms._validation import check_float_tensor, check_group_ids, check_rewards
from genalign.algorithms.advantages.group_baselines import grpo
from genalign.registry import Registry

RewardCombiner = Callable[..., tuple[Tensor, dict[str, float]]]

#: name -> ``fn(rewards [N, K], group_ids [N], weights [K], **hp) -> (combined [N], stats)``
REWARD_COMBINERS: Registry[RewardCombiner] = Registry("reward combiner", catalogue="genalign.experimental.combiners")


def check_combiner_inputs(
    rewards: Tensor, group_ids: Tensor, weights: Tensor | Sequence[float]
) -> tuple[Tensor, Tensor]:
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


def weighted_nansum(values: Tensor, weights: Tensor) -> Tensor:
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
    group_free=True,
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
    rewards, weights = check_combiner_inputs(rewards, group_ids, weights)
    combined = weighted_nansum(rewards, weights)  # [N]
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
    rewards, weights = check_combiner_inputs(rewards, group_ids, weights)
    normalised = grpo(rewards, group_ids, eps=eps, unbiased_std=unbiased_std)  # [N, K], 0 where missing
    normalised = torch.where(torch.isnan(rewards), torch.nan, normalised)  # keep "missing" visible to the sum
    combined = weighted_nansum(normalised, weights)  # [N]
    return combined, reward_statistics(rewards, names)
