"""RiskPO [256]: advantages from the gradient of a Mixed Value-at-Risk objective instead of the mean reward, over
bundles of several questions (experimental tier).

Signature and shared rules: :mod:`genalign.algorithms.advantages.base`."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._groups import Groups, group_stats, padded_by_group
from genalign.algorithms.advantages.base import ADVANTAGE_ESTIMATORS, check_eps, finish, prepare


def empirical_quantile(values: Tensor, level: float) -> Tensor:
    """``[B, K]``: the smallest value ``v`` of each row of ``values`` ``[B, S, K]`` (NaN = absent) with
    ``F(v) >= level`` (the empirical inverse CDF); NaN for a row without a value."""
    count = (~torch.isnan(values)).sum(1)  # [B, K]
    ordered = torch.sort(torch.where(torch.isnan(values), torch.inf, values), dim=1).values  # [B, S, K]
    rank = (torch.ceil(level * count - 1e-9) - 1).clamp_min(0).long()  # [B, K]
    picked = ordered.gather(1, rank[:, None, :]).squeeze(1)  # [B, K]
    return torch.where(count > 0, picked, torch.nan)


def bundle_index(groups: Groups, slot: Tensor, bundle_size: int) -> tuple[Tensor, int]:
    """``(bundle sample of each sample [N], number of bundles)``: groups in id order form bundles of ``bundle_size``;
    bundle sample ``j`` is the ``j``-th sample of each of its groups. The groups of a bundle must have one size."""
    bundle = torch.arange(groups.num_groups) // bundle_size  # [G]
    num_bundles = int(bundle.max()) + 1
    smallest = torch.full((num_bundles,), torch.iinfo(torch.long).max).scatter_reduce(0, bundle, groups.sizes, "amin")
    largest = torch.zeros(num_bundles, dtype=torch.long).scatter_reduce(0, bundle, groups.sizes, "amax")
    if bool((smallest != largest).any()):
        raise ValueError(f"mixed_var: bundle_size={bundle_size} pairs the j-th samples of {bundle_size} groups, so the "
                         f"groups of a bundle need one size; got sizes {groups.sizes.tolist()}. Use bundle_size: 1 "
                         "or equal group sizes.")  # fmt: skip
    width = int(groups.sizes.max())
    return bundle[groups.index] * width + slot, num_bundles


def mixed_var_weights(values: Tensor, *, lower: float, upper: float, tail_weight: float) -> Tensor:
    """``[B, S, K]`` gradient weights of ``MVaR = RVaR_[α,β] + ω·CVaR_α`` for the outcomes ``values`` ``[B, S, K]``
    of each row (NaN = absent): ``(clamp(R, q_α, q_β) − q_β)/(β − α) + ω·(min(R, q_α) − q_α)/α``, centred over the
    row's outcomes (a per-row baseline)."""
    q_low = empirical_quantile(values, lower)[:, None, :]  # [B, 1, K]
    q_high = empirical_quantile(values, upper)[:, None, :]  # [B, 1, K]
    middle = (torch.minimum(torch.maximum(values, q_low), q_high) - q_high) / (upper - lower)  # [B, S, K] RVaR
    tail = (torch.minimum(values, q_low) - q_low) / lower  # [B, S, K] CVaR_α
    weights = middle + tail_weight * tail
    present = ~torch.isnan(values)
    mean = torch.where(present, weights, 0.0).sum(1, keepdim=True) / present.sum(1, keepdim=True).clamp_min(1)
    return torch.where(present, weights - mean, torch.nan)


@ADVANTAGE_ESTIMATORS.register(
    "mixed_var",
    formula="bundles of B groups, R_bj = mean of the j-th samples' rewards; q_α, q_β = empirical quantiles of the "
    "bundle's R; g = (clamp(R, q_α, q_β) − q_β)/(β − α) + ω·(min(R, q_α) − q_α)/α (the gradient weights of "
    "MVaR = RVaR_[α,β] + ω·CVaR_α); A_i = g_bj − mean_b g (sample i is in bundle sample j)",
    source="[256] RiskPO",
    summary="Mixed Value-at-Risk instead of the mean: the middle band of the reward distribution and its lower tail "
    "drive the update (hard outcomes amplified, the already-best quantile left alone), over bundles of questions.",
)
def mixed_var(
    rewards: Tensor,
    group_ids: Tensor,
    *,
    lower: float = 0.2,
    upper: float = 0.8,
    tail_weight: float = 1.0,
    bundle_size: int = 1,
    scale_by_std: bool = False,
    eps: float = 1e-6,
) -> Tensor:
    """Risk-based Policy Optimization [256]: mean-based objectives (GRPO) favour high-probability outputs and collapse
    entropy; a risk measure puts weight on chosen regions of the reward distribution instead. The Mixed
    Value-at-Risk ``MVaR = RVaR_[α,β] + ω·CVaR_α`` attends to the band between the ``α`` and ``β`` quantiles and,
    with weight ``ω``, to the lower tail, so hard outcomes get amplified gradients and the top quantile (already
    good) none. Its likelihood-ratio gradient weights each outcome by
    ``g(R) = (clamp(R, q_α, q_β) − q_β)/(β − α) + ω·(min(R, q_α) − q_α)/α``; the advantage is ``g`` centred over the
    outcomes of its bundle.

    Bundling: ``B`` groups (in group-id order) form a bundle whose ``j``-th outcome is the mean reward of the ``j``-th
    samples of its groups, a finer-grained distribution than one question's 0/1 rewards; every sample gets the
    advantage of its bundle outcome. ``B = 1`` uses each group's own rewards.

    Reading chosen: the abstract names MVaR and bundling without their forms. The sum of a range VaR and a lower
    CVaR, the empirical quantiles of each bundle's outcomes (the smallest value with ``F ≥ level``), pairing
    the ``j``-th samples into a bundle outcome and the centring baseline are genalign's; ``α = 0.2``, ``β = 0.8``
    are the published levels. With 0/1 rewards and ``B = 1`` a group with a single success among many failures has
    ``q_α = q_β = 0`` and no advantage; bundling (the published ``B = 5``) gives such groups a signal. Call it on the
    whole optimisation batch (the trainer does): bundles are formed from the batch passed in.

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        lower: ``α`` in ``(0, β)``.
        upper: ``β`` in ``(α, 1]``.
        tail_weight: ``ω >= 0`` (0: the range VaR alone).
        bundle_size: ``B >= 1`` groups per bundle (the groups of a bundle must have one size).
        scale_by_std: divide by the std of the bundle's outcomes (+ ``eps``), as GRPO divides by the group's.
        eps: added to that std.
    Returns:
        advantages, same shape as ``rewards``.
    """
    if not 0 < lower < upper <= 1:
        raise ValueError(f"mixed_var: need 0 < lower < upper <= 1 (quantile levels α < β); got {lower!r}, {upper!r}.")
    if tail_weight < 0 or bundle_size < 1:
        raise ValueError(f"mixed_var: need tail_weight >= 0 and bundle_size >= 1; got {tail_weight!r}, "
                         f"{bundle_size!r}.")  # fmt: skip
    check_eps(eps)
    columns, groups = prepare(rewards, group_ids)
    stats = group_stats(columns, groups, unbiased=True)
    _, slot = padded_by_group(columns, groups)  # [N]
    key, num_bundles = bundle_index(groups, slot.cpu(), bundle_size)  # [N]
    key = key.to(columns.device)
    width = int(groups.sizes.max())
    valid = ~torch.isnan(columns)  # [N, K]
    sums = columns.new_zeros(num_bundles * width, columns.shape[1]).index_add_(0, key, torch.where(valid, columns, 0.0))
    counts = columns.new_zeros(num_bundles * width, columns.shape[1]).index_add_(0, key, valid.to(columns.dtype))
    outcomes = torch.where(counts > 0, sums / counts.clamp_min(1.0), torch.nan).view(num_bundles, width, -1)
    weights = mixed_var_weights(outcomes, lower=lower, upper=upper, tail_weight=tail_weight)  # [B, S, K]
    if scale_by_std:
        present = ~torch.isnan(outcomes)
        centred = torch.where(present, outcomes - outcomes.nan_to_num(0.0).sum(1, keepdim=True)
                              / present.sum(1, keepdim=True).clamp_min(1), 0.0)  # fmt: skip
        std = (centred.square().sum(1, keepdim=True) / (present.sum(1, keepdim=True) - 1).clamp_min(1)).sqrt()
        weights = weights / (std + eps)
    advantages = weights.view(num_bundles * width, -1)[key].nan_to_num(0.0)  # [N, K]
    return finish(advantages, columns, groups, stats, rewards)
