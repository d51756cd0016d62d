"""Reshaped advantage distributions whose form genalign chose from the abstract (experimental tier)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._groups import (
    group_stats,
    group_sum,
    padded_by_group,
)
from genalign.algorithms.advantages.base import ADVANTAGE_ESTIMATORS, finish, prepare, valid_mask
from genalign.algorithms.advantages.group_baselines import grpo


@ADVANTAGE_ESTIMATORS.register(
    "asymmetric",
    formula="A_i = c₊·Â_i if Â_i > 0 else c₋·Â_i, Â = (r − mean_G)/(std_G + eps)",
    source="[111] A3PO (sample-level part)",
    summary="Rescale positive and negative advantages differently (positives sharpen, negatives explore).",
)
def asymmetric(
    rewards: Tensor,
    group_ids: Tensor,
    *,
    positive_scale: float = 1.0,
    negative_scale: float = 1.2,
    eps: float = 1e-6,
    unbiased_std: bool = True,
) -> Tensor:
    """Asymmetric advantage shaping [111]: GRPO advantages scaled by ``c₊`` when positive and ``c₋`` when negative.

    Reading chosen: the sample-level half of A3PO; its token-level half ("key tokens per polarity", criterion not
    given) is the credit weight ``polarity_token_weights`` (``genalign.algorithms.credit``), so A3PO = ``advantage:
    asymmetric`` + ``credit: polarity_token_weights``. The defaults (``c₋ = 1.2``, favouring the exploration that
    negative samples drive) are a free choice.

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        positive_scale: ``c₊ >= 0``.
        negative_scale: ``c₋ >= 0``.
        eps: added to the group std.
        unbiased_std: ``n − 1`` (True) or ``n`` (False).
    """
    if not (positive_scale >= 0 and negative_scale >= 0):
        raise ValueError(f"positive_scale and negative_scale must be >= 0, got {positive_scale!r}, {negative_scale!r}")
    base = grpo(rewards, group_ids, eps=eps, unbiased_std=unbiased_std)
    return torch.where(base > 0, positive_scale * base, negative_scale * base)


@ADVANTAGE_ESTIMATORS.register(
    "gaussianized",
    formula="z_k = Φ⁻¹((k + 0.5)/n), k = 0..n−1 (normal scores of the sorted group); A_i = mean of z_k over the "
    "positions k that r_i's tie block spans (untied: A_i = z_{rank i}); Σ_G A = 0 under any ties; optional unit-std "
    "rescale",
    source="[65] G²RPO",
    summary="Non-linear normalisation: within-group ranks mapped to standard-normal quantiles (tied rewards share "
    "the mean of the quantiles they span, so every group's advantages sum to 0).",
)
def gaussianized(rewards: Tensor, group_ids: Tensor, *, standardize: bool = False) -> Tensor:
    """Gaussianised advantages [65]: each group's advantages are forced onto the quantiles of ``N(0, 1)``, so every
    task contributes the same advantage distribution whatever its reward scale or tails.

    Reading chosen (the index marks it inferred): sort the group's ``n`` valid rewards and give position ``k`` the
    normal score ``z_k = Φ⁻¹((k + 0.5)/n)``; a reward without ties gets the score of its rank. Tied rewards (binary
    rewards are all ties) share the *mean of the scores of the positions they span* ("average scores"): a block
    occupying positions ``b .. b+m−1`` gets ``(1/m) Σ_{k=b}^{b+m−1} z_k``. Why: the scores are symmetric
    (``z_{n−1−k} = −z_k``), so they sum to 0 and averaging within blocks keeps the sum, so every group's
    advantages have mean exactly 0 under any ties, as the abstract's target ``N(0, 1)`` and its "symmetric update for
    positive and negative rewards" require. The mid-rank alternative ``Φ⁻¹`` of the averaged quantile is not
    zero-mean under uneven ties (rewards ``[1, 1, 0, 0, 0, 0, 0, 0]`` gave a group mean of +0.049) because ``Φ⁻¹`` is
    not linear. It is also the 1-D optimal-transport reading of the method restricted to the n-point grid of normal
    scores: an atom of mass ``m/n`` goes to the mean of the grid points it covers. A constant group gets 0.
    ``standardize`` rescales each group to unit std (its scores have std < 1 for small ``n``); with two distinct
    rewards it then equals GRPO's ``(r − mean)/std`` with the population std.

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing (left out of the ranks; its advantage is 0).
        group_ids: ``[N]`` integer group of each sample.
        standardize: rescale to unit (population) std per group.
    """
    columns, groups = prepare(rewards, group_ids)
    stats = group_stats(columns, groups, unbiased=False)
    padded, _ = padded_by_group(columns, groups)  # [G, S, K]
    peers = padded[groups.index]  # [N, S, K]
    below = (peers < columns[:, None, :]).sum(1).to(columns.dtype)  # [N, K] first position of the tie block
    ties = (peers == columns[:, None, :]).sum(1).to(columns.dtype)  # [N, K] block size m (0 for a missing reward)
    n = stats.count[groups.index].clamp_min(1.0)[:, None, :]  # [N, 1, K]
    position = torch.arange(padded.shape[1], dtype=columns.dtype, device=columns.device)[None, :, None]  # [1, S, 1]
    # z_k = Φ⁻¹((k + 0.5)/n) = √2·erfinv((2k + 1 − n)/n): odd in (2k + 1 − n), so z_{n−1−k} = −z_k exactly
    centred = torch.where(position < n, (2.0 * position + 1.0 - n) / n, 0.0)  # [N, S, K] in (−1, 1)
    scores = (2.0**0.5) * torch.special.erfinv(centred)  # [N, S, K]
    spanned = (position >= below[:, None, :]) & (position < (below + ties)[:, None, :])  # [N, S, K]
    advantages = torch.where(spanned, scores, 0.0).sum(1) / ties.clamp_min(1.0)  # [N, K] mean score of the block
    advantages = torch.where(valid_mask(columns, groups, stats), advantages, 0.0)
    if standardize:
        square_sum = group_sum(advantages.square(), groups)  # [G, K]
        std = (square_sum / stats.count.clamp_min(1.0)).sqrt()  # [G, K]
        advantages = torch.where(std[groups.index] > 0, advantages / std[groups.index].clamp_min(1e-12), 0.0)
    return finish(advantages, columns, groups, stats, rewards)


@ADVANTAGE_ESTIMATORS.register(
    "majority_boosted",
    formula="A_i = (1 + γ·1[½ < p_G < 1])·(r_i − mean_G)/(std_G + eps), p_G = share of r ≥ threshold",
    source="[201] MCPO (query weighting part)",
    summary="Up-weight majority-correct prompts, whose implicit GRPO weight shrinks as p → 1.",
)
def majority_boosted(
    rewards: Tensor,
    group_ids: Tensor,
    *,
    boost: float = 0.5,
    success_threshold: float = 0.5,
    eps: float = 1e-6,
    unbiased_std: bool = True,
) -> Tensor:
    """MCPO's prompt weighting [201]: for 0/1 rewards GRPO's total update on a prompt scales like ``√(p(1−p))``, so
    majority-correct prompts (``½ < p < 1``) get less and less weight as they approach mastery; they are up-weighted
    by ``1 + γ``. (The mastery half of MCPO, a hinge KL on ``p = 1`` prompts, is the ``mastery_hinge_kl``
    regulariser.)

    Reading chosen: a constant factor on the majority-correct band (the abstract gives no weight formula).

    Args:
        rewards: ``[N]`` or ``[N, K]``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample.
        boost: ``γ >= 0``.
        success_threshold: rewards at or above count as correct.
        eps: added to the group std.
        unbiased_std: ``n − 1`` (True) or ``n`` (False).
    """
    if not boost >= 0:
        raise ValueError(f"boost must be >= 0, got {boost!r}")
    columns, groups = prepare(rewards, group_ids)
    stats = group_stats(columns, groups, unbiased=unbiased_std)
    correct = torch.where(torch.isnan(columns), 0.0, (columns >= success_threshold).to(columns.dtype))  # [N, K]
    share = group_sum(correct, groups) / stats.count.clamp_min(1.0)  # [G, K]
    weight = 1.0 + boost * ((share > 0.5) & (share < 1.0)).to(columns.dtype)  # [G, K]
    base = grpo(columns, group_ids, eps=eps, unbiased_std=unbiased_std)  # [N, K]
    return finish(weight[groups.index] * base, columns, groups, stats, rewards)
