"""Discriminative token coefficients: DelTA [248] (a rule of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`).

The policy-gradient step of a batch is a linear discriminator over token-gradient vectors: it raises the tokens near
the advantage-weighted centroid of the positive side and lowers those near the negative one. Tokens both sides share
(formatting, restated text) dominate both centroids and dilute the direction that actually separates good responses
from bad ones; DelTA reweights tokens toward side-specific directions.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES


def side_centroid(directions: Tensor, weights: Tensor) -> Tensor:
    """``[H]``: the ``weights``-weighted mean of ``directions`` ``[N, T, H]`` (``weights`` ``[N, T]``, 0 off side)."""
    total = weights.sum()
    return (weights[..., None] * directions).sum((0, 1)) / total.clamp_min(torch.finfo(directions.dtype).tiny)


def discriminative_scores(hidden: Tensor, advantages: Tensor, valid: Tensor) -> Tensor:
    """``[N, T]`` ``s_it = sign(A_i)·cos(g_it, μ₊ − μ₋)``: how far each token's gradient direction (its unit hidden
    state ``g``) points toward its own side's centroid rather than the other's; 0 when a side is empty.

    Args:
        hidden: ``[N, T, H]`` hidden state predicting each action.
        advantages: ``[N]`` sample advantages (side and centroid weight ``|A_i|``).
        valid: ``[N, T]`` bool.
    """
    directions = torch.nn.functional.normalize(hidden.float(), dim=-1)  # [N, T, H]
    sign = advantages.sign()[:, None].float()  # [N, 1]
    magnitude = advantages.abs()[:, None].float() * valid.float()  # [N, T]
    positive, negative = magnitude * (sign > 0), magnitude * (sign < 0)  # [N, T]
    if positive.sum() == 0 or negative.sum() == 0:
        return torch.zeros(valid.shape, device=hidden.device)
    split = side_centroid(directions, positive) - side_centroid(directions, negative)  # [H]
    axis = torch.nn.functional.normalize(split, dim=0)  # [H]
    return sign * (directions @ axis)  # [N, T]


@CREDIT_RULES.register(
    "discriminative_tokens",
    needs=("hidden",),
    formula="g = h/‖h‖; μ± = Σ_{A≷0} |A_i|·g_it / Σ |A_i|; s_it = sign(A_i)·cos(g_it, μ₊ − μ₋); "
    "c_it = exp(s_it/τ) / mean_side(exp(s/τ)); w = 1 − α + α·c",
    source="[248] DelTA (hidden states as the token-gradient proxy; coefficient form inferred from the abstract)",
    summary="Amplify tokens whose gradient direction is specific to their side (correct vs incorrect responses) and "
    "damp the shared ones, within a self-normalised surrogate.",
)
def discriminative_tokens(
    advantages: Tensor,
    batch: StepBatch,
    *,
    alpha: float = 1.0,
    temperature: float = 0.5,
) -> Tensor:
    """DelTA [248]: discriminative token coefficients that make the side-wise centroids of the update contrastive.

    Reading chosen (the abstract gives the discriminator view, not the estimator): the gradient of ``log π(o_t)``
    with respect to the output head is ``(e_{o_t} − π)·h_tᵀ``, so the last hidden state ``h_t`` carries the token's
    gradient direction; genalign uses ``g = h/‖h‖`` as the token-gradient proxy. The discriminating axis is the
    difference of the advantage-weighted centroids of the positive- and negative-side tokens of the batch; a token's
    score is the cosine of its ``g`` with that axis, signed toward its own side, so shared patterns (close to both
    centroids) score near 0 and side-specific tokens score high. Coefficients ``exp(s/τ)`` are self-normalised to
    mean 1 over each side's tokens (the side's total weight is unchanged) and mixed with 1 by ``α``.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``sample_advantages`` (side and centroid weights), ``mask`` and ``hidden`` ``[N, T, H]`` (the
            scoring pass before the update).
        alpha: mixing weight in ``[0, 1]``; 0 gives GRPO.
        temperature: ``τ > 0``; smaller is sharper.
    Returns:
        ``[N, T]`` ``advantages · w``, ``w >= 0`` (1 on padding and where ``A_i = 0``).
    """
    if not 0 <= alpha <= 1 or not temperature > 0:
        raise ValueError(f"need alpha in [0, 1] and temperature > 0, got {alpha!r}, {temperature!r}")
    hidden = batch.require("hidden", "discriminative_tokens").detach()
    sample = batch["sample_advantages"].detach().to(hidden.device)
    valid = (batch.mask > 0).to(hidden.device)  # [N, T]
    scores = discriminative_scores(hidden, sample, valid)  # [N, T]
    coefficient = torch.ones_like(scores)
    for side in (valid & (sample > 0)[:, None], valid & (sample < 0)[:, None]):
        if side.any():
            raw = torch.exp((scores[side] - scores[side].max()) / temperature)  # stable; self-normalised below
            coefficient[side] = raw / raw.mean()
    weights = (1.0 - alpha) + alpha * coefficient  # [N, T]
    return advantages * weights.to(advantages.device, advantages.dtype)
