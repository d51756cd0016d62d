"""Cross-level advantage fusion: AdaGRPO's blend of intra-group and batch-global advantages [62].

Signature and shared rules: :mod:`genalign.algorithms.advantages.base`."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._groups import batch_stats, group_stats
from genalign.algorithms.advantages.base import ADVANTAGE_ESTIMATORS, check_eps, finish, prepare


@ADVANTAGE_ESTIMATORS.register(
    "cross_level_fusion",
    formula="A_i = w·(r_i − mean_G)/(std_G + eps) + (1 − w)·(r_i − mean_B)/(std_B + eps), B = every valid reward of "
    "the batch",
    source="[62] AdaGRPO (cross-level advantage fusion)",
    summary="Blend the fine-grained intra-group advantage with a macro-level advantage against the whole batch, so "
    "a sample also counts as good or bad relative to everything the policy produced this step.",
)
def cross_level_fusion(
    rewards: Tensor, group_ids: Tensor, *, intra_weight: float = 0.5, eps: float = 1e-6, unbiased_std: bool = True
) -> Tensor:
    """AdaGRPO [62]: fuse intra-group (GRPO) advantages with global (batch-level) advantages.

    The intra-group advantage ``(r_i − mean_G)/(std_G + eps)`` only ranks a sample against its siblings, so a group
    whose samples are all poor still gets positive advantages; the global advantage ``(r_i − mean_B)/(std_B + eps)``
    standardises against every valid reward of the batch (the policy's current overall level). ``A = w·A_intra +
    (1 − w)·A_global``. A group whose rewards are all equal keeps a non-zero global part (its samples are still
    better or worse than the batch); a missing reward gets 0, and a group with fewer than 2 valid rewards gets 0
    (shared rules).

    Reading chosen: the abstract says the fusion "integrates fine-grained intra-group advantages with macro-level
    global advantages" without the global statistic or the weights; genalign takes the batch passed in (call it on
    the whole optimisation batch) and a convex blend with ``w = 0.5`` (genalign's choice).

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        intra_weight: ``w`` in ``[0, 1]``.
        eps: added to both stds.
        unbiased_std: ``n − 1`` (True) or ``n`` (False) in both variances.
    Returns:
        advantages, same shape as ``rewards``.
    """
    if not 0.0 <= intra_weight <= 1.0:
        raise ValueError(f"intra_weight = {intra_weight!r} must be in [0, 1] (the weight of the intra-group part)")
    check_eps(eps)
    columns, groups = prepare(rewards, group_ids)
    stats = group_stats(columns, groups, unbiased=unbiased_std)
    scale = stats.std[groups.index] + eps  # [N, K]
    intra = torch.where(scale > 0, (columns - stats.mean[groups.index]) / scale.clamp_min(1e-300), 0.0)  # [N, K]
    mean, std = batch_stats(columns, ~torch.isnan(columns), unbiased=unbiased_std)  # [K], [K]
    batch_scale = std + eps  # [K]
    global_ = torch.where(batch_scale > 0, (columns - mean) / batch_scale.clamp_min(1e-300), 0.0)  # [N, K]
    return finish(intra_weight * intra + (1.0 - intra_weight) * global_, columns, groups, stats, rewards)
