"""Entropy-band regulariser whose form genalign chose from the abstract (experimental tier)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.regularizers.base import REGULARIZERS, valid_mask
from genalign.algorithms.scores import ScoreOutput


@REGULARIZERS.register(
    "entropy_band",
    needs=("entropy",),
    formula="H̄_i = mean_t H_it; L_it = max(0, H_low − H̄_i) + max(0, H̄_i − H_high) on every valid action of o_i",
    source="[65] G²RPO (entropy shaping)",
    summary="Keep each response's mean entropy inside a band: push entropy up below H_low (collapse), down above "
    "H_high (explosion), no force inside.",
)
def entropy_band(
    score: ScoreOutput, advantages: Tensor, batch: StepBatch, *, entropy_low: float = 0.2, entropy_high: float = 1.5
) -> Tensor:
    """G²RPO's entropy shaping [65]: "tightly bounds the model's exploration zone, preventing both entropy collapse
    and entropy explosion".

    Reading chosen: the abstract gives no formula. genalign bounds the *response's* mean token entropy
    ``H̄_i = mean_t H_{i,t}`` (per token would push every confident token upwards) by a linear two-sided hinge,
    ``max(0, H_low − H̄_i) + max(0, H̄_i − H_high)``, written on every valid action of the response (so
    ``seq_mean_token_mean`` aggregates it to the mean hinge over responses); inside the band the term and its
    gradient are 0. Defaults ``[0.2, 1.5]`` nats are a generic choice: set them from the model's entropy curve.

    Args:
        score, advantages, batch: read ``entropy`` ``[N, T]`` with its gradient and ``mask``.
        entropy_low: ``H_low >= 0`` (nats).
        entropy_high: ``H_high >= H_low`` (nats).
    Returns:
        ``[N, T]`` non-negative penalty (0 on padding and inside the band).
    """
    if not 0 <= entropy_low <= entropy_high:
        raise ValueError(f"need 0 <= entropy_low <= entropy_high, got {entropy_low!r}, {entropy_high!r}")
    mask = valid_mask(score, batch)
    entropy = score.require("entropy", "entropy_band").to(mask.dtype)  # [N, T]
    valid = mask > 0
    mean = torch.where(valid, entropy, 0.0).sum(1) / mask.sum(1).clamp_min(1.0)  # [N] H̄_i
    hinge = (entropy_low - mean).clamp_min(0.0) + (mean - entropy_high).clamp_min(0.0)  # [N]
    return torch.where(valid, hinge[:, None].expand_as(mask), 0.0)  # [N, T]
