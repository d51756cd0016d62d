"""Entropy-gated credit whose form genalign chose from the abstract (experimental tier)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.credit.entropy_gates import progress_buckets, standardised_within


@CREDIT_RULES.register(
    "entropy_pivots",
    needs=("entropy",),
    formula="z_it = (H_it − mean)/(std + ε) within (group, progress bucket ⌊B·(t−1)/|o_i|⌋); w_it = 1 + γ·1[z_it > z₀] "
    "(pivots); anchored: w_it ← w_it / mean_t(w_i·) so mean_t A_it = A_i",
    source="[251] ERPO (form inferred from the abstract)",
    summary="Amplify credit at critical decision pivots (tokens whose entropy stands out within their group and "
    "progress window), redistributed within each response so its outcome advantage is kept.",
)
def entropy_pivots(
    advantages: Tensor,
    batch: StepBatch,
    *,
    gain: float = 1.0,
    z_threshold: float = 1.0,
    buckets: int = 4,
    anchored: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """Entropy-Regulated Policy Optimization [251]: entropy-aware gating at Critical Decision Pivots, bucket-based
    implicit normalisation, result-anchored advantage synthesis.

    Reading chosen (the abstract names the three parts without formulas): (ii) *bucket-based implicit
    normalisation*: entropy is standardised within each group (one prompt, so difficulty is shared) and each
    progress window (``B`` equal fractions of a response), so that a pivot is a token whose entropy stands out against
    tokens at the same stage of answers to the same prompt, not merely an early token or a hard prompt; (i)
    *entropy-aware gating*: a pivot (``z > z₀``) gets weight ``1 + γ``, every other token 1; (iii) *result-anchored
    synthesis*: the weights of each response are divided by their mean over its valid tokens, so the response's mean
    token advantage stays its outcome advantage ``A_i`` and the gate only moves credit toward its pivots (``anchored
    = False`` keeps the raw weights).

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask``, ``group_ids`` and ``entropy``.
        gain: ``γ >= 0``, the extra weight of a pivot.
        z_threshold: ``z₀``, pivots have a standardised entropy above it.
        buckets: ``B >= 1`` progress windows per response.
        anchored: renormalise the weights to mean 1 per response.
        eps: added to the standard deviation.
    Returns:
        ``[N, T]`` ``advantages · w`` (1 on padding).
    """
    if not gain >= 0 or buckets < 1:
        raise ValueError(f"need gain >= 0 and buckets >= 1, got {gain!r}, {buckets!r}")
    entropy = batch.require("entropy", "entropy_pivots").detach()
    valid = batch.mask > 0  # [N, T]
    key = batch.group_ids.long()[:, None] * buckets + progress_buckets(batch.mask, buckets)  # [N, T]
    z = standardised_within(entropy, valid, key, eps=eps)  # [N, T]
    weights = torch.where(valid & (z > z_threshold), 1.0 + gain, 1.0).to(advantages.dtype)  # [N, T]
    if anchored:
        mean = torch.where(valid, weights, 0.0).sum(1, keepdim=True) / valid.sum(1, keepdim=True).clamp_min(1)
        weights = torch.where(valid, weights / mean, 1.0)  # [N, T]
    return advantages * weights  # [N, T]
