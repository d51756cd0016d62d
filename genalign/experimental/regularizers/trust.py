"""Trust-region regularisers whose form genalign chose from the abstract (experimental tier)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms._validation import expand_advantages
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.regularizers.base import REGULARIZERS, valid_mask
from genalign.algorithms.scores import ScoreOutput


@REGULARIZERS.register(
    "likelihood_preserving",
    formula="L_it = max(0, logπold − logπθ)_it · 1[Σ_t m·(logπθ − logπold) < 0] · 1[A_i > 0]",
    source="[301] LLDS",
    summary="Penalise the actions whose likelihood fell, only in trajectories whose likelihood fell.",
)
def likelihood_preserving(
    score: ScoreOutput, advantages: Tensor, batch: StepBatch, *, only_positive: bool = True
) -> Tensor:
    """Likelihood-preserving regularisation against Lazy Likelihood Displacement [301]: active only for a trajectory
    whose log-likelihood decreased during the update (``Σ_t ℓ_t < 0``), and inside it only on the actions responsible
    (``ℓ_t < 0``), with penalty ``−ℓ_t``.

    Reading chosen: restricted to positive-advantage trajectories by default (the displacement harms responses the
    update means to reinforce); ``only_positive=False`` applies it to all.

    Args:
        score, advantages, batch: read ``logp``, ``mask``, ``old_logp`` and (``only_positive``) ``advantages``.
        only_positive: apply only where ``A_i > 0``.
    Returns:
        ``[N, T]`` non-negative penalty (grad through ``logp``).
    """
    mask = valid_mask(score, batch)
    log_ratio = torch.where(mask > 0, score.logp - batch.require("old_logp", "likelihood_preserving").detach(), 0.0)
    fell = ((log_ratio * mask).sum(1) < 0)[:, None]  # [N, 1]
    if only_positive:
        advantages = expand_advantages(advantages, tuple(mask.shape))
        fell = fell & (advantages.detach() > 0)
    return torch.where(fell & (mask > 0), (-log_ratio).clamp_min(0.0), 0.0)  # [N, T]


@REGULARIZERS.register(
    "hazard_penalty",
    formula="ℓ = logπθ − logπold; L_it = (max(ℓ,0)/λ₊)^k₊ + (max(−ℓ,0)/λ₋)^k₋ (Weibull cumulative hazards)",
    source="[181] MHPO (Decoupled Hazard Penalty)",
    summary="Smooth penalties on log-ratio expansion and contraction, each with its own cumulative hazard.",
)
def hazard_penalty(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    scale_pos: float = 0.2,
    scale_neg: float = 0.2,
    shape_pos: float = 2.0,
    shape_neg: float = 2.0,
) -> Tensor:
    """MHPO's Decoupled Hazard Penalty [181]: the cumulative hazard ``H(x)`` of a survival law is applied separately
    to the positive shift ``x = max(ℓ, 0)`` (over-expansion, which leads to mode collapse) and to the negative shift
    ``x = max(−ℓ, 0)`` (contraction, which erodes the policy) of the per-action log-ratio ``ℓ = logπθ − logπold``.

    Reading chosen: the abstract names cumulative hazard functions but not the law; genalign uses the Weibull hazard
    ``H(x) = (x/λ)^k``, so the penalty is 0 at ``ℓ = 0`` and grows smoothly (for ``k > 1``, with zero slope at the
    origin) and independently on each side. MHPO = ``clip: log_fidelity`` + ``regularizer: hazard_penalty``.

    Args:
        score, advantages, batch: read ``logp`` (grad), ``old_logp`` and ``mask``.
        scale_pos, scale_neg: Weibull scales ``λ₊, λ₋ > 0`` (the log-ratio shift at which the hazard reaches 1).
        shape_pos, shape_neg: Weibull shapes ``k₊, k₋ >= 1`` (1: linear, 2: quadratic growth).
    Returns:
        ``[N, T]`` non-negative penalty (0 on padding; grad through ``logp``).
    """
    if not (scale_pos > 0 and scale_neg > 0):
        raise ValueError(f"scale_pos and scale_neg must be > 0, got {scale_pos!r}, {scale_neg!r}")
    if not (shape_pos >= 1 and shape_neg >= 1):
        raise ValueError(f"shape_pos and shape_neg must be >= 1 (convex hazards), got {shape_pos!r}, {shape_neg!r}")
    mask = valid_mask(score, batch)
    old = batch.require("old_logp", "hazard_penalty").detach()
    log_ratio = torch.where(mask > 0, score.logp - old, 0.0)  # [N, T]
    expansion = (log_ratio.clamp_min(0.0) / scale_pos).pow(shape_pos)  # [N, T]
    contraction = ((-log_ratio).clamp_min(0.0) / scale_neg).pow(shape_neg)  # [N, T]
    return torch.where(mask > 0, expansion + contraction, 0.0)
