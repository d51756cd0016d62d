"""The standard clip forms: PPO (separate ``eps_low`` / ``eps_high``, clip-higher), dual-clip, CISPO, SAPO's soft gate
and no clipping (plain importance-weighted REINFORCE)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.clip_forms.base import (
    CLIP_FORMS,
    ClippedLogRatio,
    log_bounds,
)


@CLIP_FORMS.register(
    "ppo",
    formula="L = −min(ρA, clip(ρ, 1−ε_low, 1+ε_high)·A); clip-higher when ε_high > ε_low",
    source="formulas.md §2 (PPO/GRPO; DAPO clip-higher)",
    summary="PPO clipped surrogate with separate lower and upper clip ranges.",
)
def ppo_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    batch: StepBatch | None = None,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
) -> ClippedLogRatio:
    """PPO clip in log space: for ``A > 0`` the ratio is capped at ``1 + eps_high``, for ``A < 0`` floored at
    ``1 - eps_low``; the clipped side carries no gradient (formulas.md §2; DAPO clip-higher uses 0.2 / 0.28).

    Args:
        log_ratio: ``[N, T]`` ``ℓ = logπθ − logπold`` at the chosen level.
        advantages: ``[N, T]``.
        eps_low: lower clip range, in ``[0, 1)``.
        eps_high: upper clip range, ``>= 0``.
    """
    low, high = log_bounds(eps_low, eps_high)
    clipped_high = (advantages > 0) & (log_ratio > high)  # [N, T]
    clipped_low = (advantages < 0) & (log_ratio < low)  # [N, T]
    log_weight = torch.where(clipped_high, high, torch.where(clipped_low, low, log_ratio))  # [N, T]
    return ClippedLogRatio(log_weight, clipped_low, clipped_high)


@CLIP_FORMS.register(
    "dual_clip",
    formula="A ≥ 0: PPO; A < 0: L = min(max(−ρA, −clip(ρ)A), −c·A)",
    source="formulas.md §2 (dual-clip PPO)",
    summary="PPO plus a cap c on the ratio of negative-advantage actions.",
)
def dual_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    batch: StepBatch | None = None,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip_c: float = 3.0,
) -> ClippedLogRatio:
    """Dual-clip PPO: as ``ppo``, and for ``A < 0`` the ratio is also capped at ``c`` so that one very unlikely
    negative action cannot dominate (formulas.md §2, ``c ≈ 3``).

    Args:
        log_ratio: ``[N, T]``.
        advantages: ``[N, T]``.
        eps_low: lower clip range, in ``[0, 1)``.
        eps_high: upper clip range, ``>= 0``.
        dual_clip_c: cap ``c > 1`` on the ratio of negative-advantage actions (typically 3).
    """
    if not dual_clip_c > 1:
        raise ValueError(f"dual_clip_c must be > 1 (it caps ratios above 1 for A < 0), got {dual_clip_c!r}")
    ppo = ppo_clip(log_ratio, advantages, eps_low=eps_low, eps_high=eps_high)
    capped = (advantages < 0) & (log_ratio > math.log(dual_clip_c))  # [N, T]
    log_weight = torch.where(capped, math.log(dual_clip_c), ppo.log_weight)  # [N, T]
    return ClippedLogRatio(log_weight, ppo.clipped_low, ppo.clipped_high | capped)


@CLIP_FORMS.register(
    "cispo",
    formula="L = −sg(clip(ρ, 1−ε_low, 1+ε_high)) · A · logπθ (gradient never zeroed)",
    source="formulas.md §2 (CISPO)",
    summary="Clipped, stop-gradient importance weight on a REINFORCE term; every action keeps its gradient.",
)
def cispo(
    log_ratio: Tensor,
    advantages: Tensor,
    batch: StepBatch | None = None,
    *,
    eps_low: float | None = None,
    eps_high: float = 0.28,
) -> ClippedLogRatio:
    """CISPO: the importance weight is clipped and detached, the gradient flows through ``logπθ`` for every action.

    Implemented as ``ℓ̃ = ℓ + sg(clip(ℓ) − ℓ)``: value ``clip(ρ)``, gradient ``clip(ρ)·∇logπθ``, which is the gradient
    of ``sg(clip(ρ)) · A · logπθ`` (formulas.md §2). Clipping applies whatever the sign of ``A``.

    Args:
        log_ratio: ``[N, T]``.
        advantages: ``[N, T]`` (only used for the shape check).
        eps_low: lower clip range in ``[0, 1)``, or ``None`` for no lower bound (the usual choice).
        eps_high: upper clip range, ``>= 0`` (genalign default 0.28; tune per recipe).
    """
    low, high = log_bounds(eps_low, eps_high)
    clamped = log_ratio.clamp(min=low, max=high)  # [N, T]
    log_weight = log_ratio + (clamped - log_ratio).detach()  # [N, T]
    clipped_low = log_ratio < low if low is not None else torch.zeros_like(log_ratio, dtype=torch.bool)
    return ClippedLogRatio(log_weight, clipped_low, log_ratio > high)


@CLIP_FORMS.register(
    "sapo",
    formula="L = −A · f(ρ), f(ρ) = σ(τ(ρ−1))·4/τ, τ = τ_pos if A > 0 else τ_neg",
    source="[235] SAPO",
    summary="Smooth temperature-controlled gate instead of a hard clip; slope 1 at ρ = 1.",
)
def sapo(
    log_ratio: Tensor,
    advantages: Tensor,
    batch: StepBatch | None = None,
    *,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
) -> ClippedLogRatio:
    """SAPO soft gate [235]: ``f(ρ) = σ(τ(ρ − 1)) · 4/τ`` replaces the clipped ratio; its slope ``4σ(1−σ)`` is 1 at
    ``ρ = 1`` and decays smoothly off-policy, so only the offending actions are down-weighted.

    The log-ratio is clamped to ``[−20, 20]`` before ``exp`` (the gate is flat there, so the gradient is ~0 anyway).
    No hard clip happens: ``clipped_low`` / ``clipped_high`` are all False.

    Args:
        log_ratio: ``[N, T]``.
        advantages: ``[N, T]``; their sign picks the temperature.
        tau_pos: temperature for ``A > 0`` (> 0).
        tau_neg: temperature for ``A <= 0`` (> 0).
    """
    if not (tau_pos > 0 and tau_neg > 0):
        raise ValueError(f"tau_pos and tau_neg must be > 0, got tau_pos={tau_pos!r}, tau_neg={tau_neg!r}")
    tau = torch.where(advantages > 0, tau_pos, tau_neg).to(log_ratio.dtype)  # [N, T]
    ratio = log_ratio.clamp(-20.0, 20.0).exp()  # [N, T]
    log_weight = F.logsigmoid(tau * (ratio - 1.0)) + torch.log(4.0 / tau)  # [N, T] = log f(ρ)
    never = torch.zeros_like(log_ratio, dtype=torch.bool)
    return ClippedLogRatio(log_weight, never, never)


@CLIP_FORMS.register(
    "none",
    formula="L = −ρ·A (no clipping; plain REINFORCE on-policy)",
    source="formulas.md §2; [3]",
    summary="Unclipped importance-weighted policy gradient (REINFORCE when on-policy).",
)
def no_clip(log_ratio: Tensor, advantages: Tensor, batch: StepBatch | None = None) -> ClippedLogRatio:
    """No clipping: ``ℓ̃ = ℓ``; on-policy this is plain REINFORCE ``−A·∇logπθ`` ([3], formulas.md §2)."""
    never = torch.zeros_like(log_ratio, dtype=torch.bool)
    return ClippedLogRatio(log_ratio, never, never)
