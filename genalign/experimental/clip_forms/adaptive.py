"""Adaptive clip forms whose form genalign chose from the abstract (experimental tier)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch, require
from genalign.algorithms.clip_forms.base import (
    CLIP_FORMS,
    ClippedLogRatio,
    check_eps,
    log_bounds,
    log_bounds_tensor,
    mask_of,
    ppo_with_bounds,
    row_mean,
)


@CLIP_FORMS.register(
    "entropy_adaptive",
    needs=("entropy",),
    formula="ε_t = ε · clamp((H_t / mean_i H)^γ, s_min, s_max); PPO clip with ε_t",
    source="[15] SSPO",
    summary="Clip bounds widen for high-entropy actions and narrow for low-entropy ones.",
)
def entropy_adaptive_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    batch: StepBatch | None = None,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    entropy_power: float = 1.0,
    scale_min: float = 0.5,
    scale_max: float = 2.0,
) -> ClippedLogRatio:
    """SSPO's entropy-adjusted PPO-CLIP [15]: high-entropy actions explore within wider bounds, low-entropy ones are
    held tighter.

    Reading chosen: the bounds scale with the action's entropy relative to its sequence's mean entropy,
    ``s_t = clamp((H_t / H̄_i)^γ, s_min, s_max)``, ``ε_t = ε · s_t`` (``ε_low·s_t`` capped at 0.99); normalising
    within the sequence keeps the result independent of micro-batching. With the ``sentence`` ratio level ``H_t`` is
    the sentence's mean entropy (SSPO); with other levels it is the action's.

    Args:
        log_ratio, advantages: ``[N, T]``.
        batch: ``entropy`` ``[N, T]`` is required.
        eps_low, eps_high: base clip ranges.
        entropy_power: exponent ``γ >= 0`` (0 gives plain PPO).
        scale_min, scale_max: bounds on the scale ``s_t``, ``0 < s_min <= 1 <= s_max``.
    """
    check_eps(eps_low, eps_high)
    if not 0 < scale_min <= 1 <= scale_max:
        raise ValueError(f"need 0 < scale_min <= 1 <= scale_max, got scale_min={scale_min!r}, scale_max={scale_max!r}")
    if not entropy_power >= 0:
        raise ValueError(f"entropy_power must be >= 0, got {entropy_power!r}")
    entropy = require(batch, "entropy", "clip form 'entropy_adaptive'")
    mask = mask_of(batch, log_ratio)
    relative = entropy.clamp_min(1e-8) / row_mean(entropy, mask).clamp_min(1e-8)  # [N, T]
    scale = relative.pow(entropy_power).clamp(scale_min, scale_max)  # [N, T]
    low, high = log_bounds_tensor((eps_low * scale).clamp(max=0.99), eps_high * scale)
    return ppo_with_bounds(log_ratio, advantages, low, high)


@CLIP_FORMS.register(
    "prob_adaptive",
    formula="q = πold(a_t); ε_t = min(ε / q^κ, ε_max) for each side; PPO clip with ε_t",
    source="[189] DCPO",
    summary="Per-action clip bounds that widen for actions the old policy found unlikely.",
)
def prob_adaptive_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    batch: StepBatch | None = None,
    *,
    eps_low: float = 0.16,
    eps_high: float = 0.2,
    prob_power: float = 0.5,
    eps_low_max: float = 0.5,
    eps_high_max: float = 10.0,
) -> ClippedLogRatio:
    """DCPO's dynamic clipping [189]: bounds adapt to each action's prior probability ``q = πold(a_t)``.

    Reading chosen: the abstract gives no formula; a move of ``ε`` in *ratio* is a move of ``ε·q`` in probability,
    so genalign widens the ratio range for unlikely actions as ``ε_t = min(ε / q^κ, ε_max)`` (``κ = 0.5`` by
    default; ``κ = 0`` is plain PPO). The caps keep ``1 − ε_low > 0`` and bound the upper ratio.

    Args:
        log_ratio, advantages: ``[N, T]``.
        batch: ``old_logp`` (filled by ``policy_loss``).
        eps_low, eps_high: clip ranges of an action with ``q = 1``.
        prob_power: exponent ``κ >= 0``.
        eps_low_max: cap on the lower range, in ``[eps_low, 1)``.
        eps_high_max: cap on the upper range, ``>= eps_high``.
    """
    check_eps(eps_low, eps_high)
    if not (eps_low <= eps_low_max < 1 and eps_high_max >= eps_high and prob_power >= 0):
        raise ValueError(
            "need eps_low <= eps_low_max < 1, eps_high_max >= eps_high and prob_power >= 0, got "
            f"eps_low_max={eps_low_max!r}, eps_high_max={eps_high_max!r}, prob_power={prob_power!r}"
        )
    old_logp = require(batch, "old_logp", "clip form 'prob_adaptive'")
    widen = (-prob_power * old_logp).exp()  # [N, T] = q^{-κ}
    low, high = log_bounds_tensor((eps_low * widen).clamp(max=eps_low_max), (eps_high * widen).clamp(max=eps_high_max))
    return ppo_with_bounds(log_ratio, advantages, low, high)


@CLIP_FORMS.register(
    "elastic",
    formula="ε_t = ε · (1 + a·|A_t|) · (1 + v·4σ_g²) (ε_low capped at eps_low_max); PPO clip with ε_t",
    source="[204] ETR",
    summary="Elastic trust region: bounds grow with the advantage magnitude and the group's reward variance.",
)
def elastic_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    batch: StepBatch | None = None,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    advantage_gain: float = 0.5,
    variance_gain: float = 0.0,
    eps_low_max: float = 0.9,
) -> ClippedLogRatio:
    """Elastic Trust Regions [204]. Micro level: bounds scale with ``|A|`` (confident paths move further). Macro
    level: bounds scale with the reward variance of the sample's group, largest in the "optimal learning zone".

    Reading chosen: linear elasticity ``ε_t = ε (1 + a|A_t|)(1 + v · 4σ_g²)``; for 0/1 rewards ``4σ² = 4p(1−p)``
    peaks at 1 for ``p = 1/2`` and vanishes for solved/unsolvable prompts. ``variance_gain`` defaults to 0 because
    the macro level needs the batch's ``group_reward_std``, which the trainer does not pass yet.

    Args:
        log_ratio, advantages: ``[N, T]``.
        batch: ``group_reward_std`` ``[N]`` is required when ``variance_gain > 0``.
        eps_low, eps_high: base clip ranges.
        advantage_gain: ``a >= 0``.
        variance_gain: ``v >= 0``.
        eps_low_max: cap on the lower range, in ``[eps_low, 1)``.
    """
    check_eps(eps_low, eps_high)
    if not (advantage_gain >= 0 and variance_gain >= 0 and eps_low <= eps_low_max < 1):
        raise ValueError(
            "need advantage_gain >= 0, variance_gain >= 0 and eps_low <= eps_low_max < 1, got "
            f"advantage_gain={advantage_gain!r}, variance_gain={variance_gain!r}, eps_low_max={eps_low_max!r}"
        )
    scale = 1.0 + advantage_gain * advantages.abs()  # [N, T]
    if variance_gain > 0:
        std = require(batch, "group_reward_std", "clip form 'elastic' with variance_gain > 0")
        scale = scale * (1.0 + variance_gain * 4.0 * std.square())[:, None]  # [N, T]
    low, high = log_bounds_tensor((eps_low * scale).clamp(max=eps_low_max), eps_high * scale)
    return ppo_with_bounds(log_ratio, advantages, low, high)


@CLIP_FORMS.register(
    "asymmetric_is",
    formula="A>0: ℓ̃ = (ℓ − sg ℓ) + sg(min(−ℓ, log c)) (weight 1/ρ), no gradient if ρ > 1+ε_high; "
    "A<0: PPO floor at 1−ε_low, else (ℓ − sg ℓ) + sg(min(ℓ, log c))",
    source="[149] ASPO",
    summary="Flips the importance ratio of positive-advantage actions (1/ρ) with soft dual clipping.",
)
def asymmetric_is_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    batch: StepBatch | None = None,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    dual_clip_c: float = 3.0,
) -> ClippedLogRatio:
    """ASPO's asymmetric importance sampling [149]: positive-advantage actions are weighted by the flipped ratio
    ``1/ρ = πold/πθ``, so actions that are still unlikely get larger updates and already-boosted ones smaller (the
    learning dynamics of negative actions); a soft dual clip caps every weight at ``c`` in *value* while keeping the
    gradient (``sg(min(w, c)) · ∇logπθ``).

    Reading chosen: "flip" = reciprocal ratio as the (detached) weight of ``∇logπθ``; PPO's hard bounds still remove
    the gradient of positive actions with ``ρ > 1+ε_high`` and negative ones with ``ρ < 1−ε_low``.

    Args:
        log_ratio, advantages: ``[N, T]``.
        batch: unused.
        eps_low, eps_high: PPO clip ranges.
        dual_clip_c: soft cap ``c > 1`` on every weight.
    """
    low, high = log_bounds(eps_low, eps_high)
    if not dual_clip_c > 1:
        raise ValueError(f"dual_clip_c must be > 1, got {dual_clip_c!r}")
    log_c = math.log(dual_clip_c)
    grad_only = log_ratio - log_ratio.detach()  # [N, T]: value 0, gradient ∇logπθ
    positive = advantages > 0
    clipped_high = positive & (log_ratio > high)  # [N, T]
    clipped_low = (advantages < 0) & (log_ratio < low)  # [N, T]
    flipped = grad_only + (-log_ratio.detach()).clamp(max=log_c)  # [N, T] weight min(1/ρ, c)
    soft = grad_only + log_ratio.detach().clamp(max=log_c)  # [N, T] weight min(ρ, c)
    log_weight = torch.where(positive, flipped, soft)
    log_weight = torch.where(clipped_high | clipped_low, log_weight.detach(), log_weight)
    capped = torch.where(positive, -log_ratio, log_ratio) > log_c  # [N, T] soft cap reached (value only)
    return ClippedLogRatio(log_weight, clipped_low, clipped_high | capped)


@CLIP_FORMS.register(
    "log_fidelity",
    formula="ℓ̃ = c₊·tanh(ℓ/c₊) for ℓ ≥ 0, c₋·tanh(ℓ/c₋) for ℓ < 0 (weight bounded in (e^{−c₋}, e^{c₊}))",
    source="[181] MHPO",
    summary="Bounded, differentiable log-fidelity modulation of the ratio instead of a hard clip.",
)
def log_fidelity_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    batch: StepBatch | None = None,
    *,
    scale_pos: float = 0.25,
    scale_neg: float = 0.25,
) -> ClippedLogRatio:
    """MHPO's Log-Fidelity Modulator [181]: the log-ratio is mapped through ``c·tanh(ℓ/c)``, so the weight stays in
    ``(e^{−c₋}, e^{c₊})``, is differentiable everywhere, has slope 1 at ``ρ = 1`` and a gradient that decays smoothly
    (never exactly zero) for outliers. Separate scales for ratio increases and decreases.

    Reading chosen: ``tanh`` in log space (bounded, odd, slope 1). The Decoupled Hazard Penalty of the same paper is
    the ``hazard_penalty`` regulariser (``genalign.algorithms.regularizer_catalogue``), so MHPO = ``clip:
    log_fidelity`` + ``regularizer: hazard_penalty``. No hard clip happens: the clip flags report ``|ℓ| > c`` (the
    saturated region).

    Args:
        log_ratio, advantages: ``[N, T]``.
        batch: unused.
        scale_pos: ``c₊ > 0`` (0.25 ≈ log 1.28, DAPO's upper bound).
        scale_neg: ``c₋ > 0``.
    """
    if not (scale_pos > 0 and scale_neg > 0):
        raise ValueError(f"scale_pos and scale_neg must be > 0, got {scale_pos!r}, {scale_neg!r}")
    scale = torch.where(log_ratio >= 0, scale_pos, scale_neg).to(log_ratio.dtype)  # [N, T]
    log_weight = scale * torch.tanh(log_ratio / scale)  # [N, T]
    return ClippedLogRatio(log_weight, log_ratio < -scale_neg, log_ratio > scale_pos)


@CLIP_FORMS.register(
    "unconditional",
    formula="ℓ̃ = clamp(ℓ, log(1−ε_low), log(1+ε_high)) whatever the sign of A; self_normalize: "
    "ℓ̃ −= log sg(mean_valid exp(ℓ̃))",
    source="[73] StableDRL",
    summary="Clip regardless of the advantage sign, optionally self-normalising the clipped weights.",
)
def unconditional_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    batch: StepBatch | None = None,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    self_normalize: bool = True,
) -> ClippedLogRatio:
    """StableDRL [73]: noisy (ELBO / mean-field) ratios are clipped unconditionally, i.e. on both sides whatever the
    sign of ``A`` (clipped positions lose their gradient), and the clipped weights are self-normalised so the update
    is a convex combination of per-sample gradients.

    Reading chosen: self-normalisation divides by the (detached) mean clipped weight over the valid actions of the
    batch passed to ``policy_loss``; it therefore depends on the micro-batch: use one micro-batch per optimisation
    batch (or groups kept whole) for the exact method.

    Args:
        log_ratio, advantages: ``[N, T]``.
        batch: ``mask`` (filled by ``policy_loss``).
        eps_low, eps_high: clip ranges.
        self_normalize: divide by ``sg(mean exp(ℓ̃))``.
    """
    low, high = log_bounds(eps_low, eps_high)
    clipped_low, clipped_high = log_ratio < low, log_ratio > high  # [N, T]
    log_weight = torch.where(clipped_high, high, torch.where(clipped_low, low, log_ratio))  # [N, T]
    if self_normalize:
        mask = mask_of(batch, log_ratio)
        mean_weight = (log_weight.detach().exp() * mask).sum() / mask.sum().clamp_min(1.0)
        log_weight = log_weight - mean_weight.clamp_min(1e-12).log()
    return ClippedLogRatio(log_weight, clipped_low, clipped_high)
