"""MV-GRPO [63] multi-view combination: the same samples scored under several captions of their prompt (one reward
column per view, e.g. the ``caption_view`` reward) and combined as the mean over views of group-normalised rewards.

Signature: :mod:`genalign.algorithms.reward_combiners`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from genalign.algorithms.advantages.group_baselines import grpo
from genalign.algorithms.reward_combiners import (
    REWARD_COMBINERS,
    check_combiner_inputs,
    reward_statistics,
    weighted_nansum,
)


@REWARD_COMBINERS.register(
    "multi_view",
    formula="z_iv = (r_iv − mean_G r_v)/(std_G r_v + eps) per view v; r_i = Σ_v w_v z_iv / Σ_v w_v",
    source="[63] MV-GRPO",
    summary="Mean over caption views of each view's group-normalised reward (pair with dr_grpo to keep its scale).",
)
def multi_view(
    rewards: Tensor,
    group_ids: Tensor,
    weights: Tensor | Sequence[float],
    *,
    eps: float = 1e-6,
    unbiased_std: bool = True,
    names: Sequence[str] | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """MV-GRPO [63] multi-view advantage re-estimation: every column is the reward of the same samples under one view
    (the original prompt or an adjacent caption); each view is normalised within the group on its own and the views
    are averaged, ``r_i = Σ_v w_v z_iv / Σ_v w_v``. A view under which the group does not differ contributes 0, one
    that separates the samples contributes its ranking; the result is already centred per group, so pair it with
    ``dr_grpo`` (keeps the averaged scale) or ``grpo`` (re-normalises it).

    Reading chosen: the paper's advantage is the mean over views of group-normalised rewards; the views come from a
    Condition Enhancer (an LLM) in the paper and from the dataset's ``views`` column or caption templates here (the
    ``caption_view`` reward). The policy's log-probs stay conditioned on the original prompt (the samples' behaviour
    condition): genalign re-weights the advantage, it does not re-condition the likelihood on the new captions.
    Weight-0 columns (logged-only rewards) are left out.

    Args:
        rewards: ``[N, V]``, one column per view; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        weights: ``[V]`` non-negative view weights (0 = logged only).
        eps: added to each group std.
        unbiased_std: ``n − 1`` (True) or ``n`` (False) in the group variance.
        names: view names for ``stats``.
    """
    rewards, weights = check_combiner_inputs(rewards, group_ids, weights)
    if (weights < 0).any() or not bool((weights > 0).any()):
        raise ValueError(f"multi_view: weights={weights.tolist()} must be >= 0 with at least one view > 0.")
    z = grpo(rewards, group_ids, eps=eps, unbiased_std=unbiased_std)  # [N, V]
    z = torch.where(torch.isnan(rewards), torch.nan, z)
    present = ~torch.isnan(z) & (weights > 0)  # [N, V]
    total = torch.where(present, weights, 0.0).sum(1)  # [N]
    combined = weighted_nansum(torch.where(weights > 0, z, torch.nan), weights) / total.clamp_min(1e-12)  # [N]
    return torch.where(total > 0, combined, torch.nan), reward_statistics(rewards, names)
