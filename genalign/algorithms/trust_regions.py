"""More clip forms (method catalogue): adaptive bounds, asymmetric and soft clipping, masking rules and corrections
for training/inference mismatch and stale rollouts. Each composes with every ratio level of :data:`RATIO_LEVELS`.

Same contract as the clip forms in :mod:`genalign.algorithms.objectives`: ``fn(log_ratio [N, T], advantages [N, T],
context, **hp) -> ClippedLogRatio`` with the surrogate ``A · exp(ℓ̃)``; a position whose ``ℓ̃`` is a constant
(detached) carries no gradient. "Masked" actions keep their value and lose their gradient (``ℓ̃ = sg(ℓ)``), except
IcePop's, which contribute nothing (``ℓ̃ = −inf``). Bounds named ``eps_*`` are ratio offsets, as in PPO.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from genalign.algorithms.context import ObjectiveContext, require
from genalign.algorithms.objectives import CLIP_FORMS, ClippedLogRatio, _log_bounds
from genalign.algorithms.regularizers import kl_k3


def _check_eps(eps_low: float, eps_high: float) -> None:
    _log_bounds(eps_low, eps_high)


def ppo_with_bounds(log_ratio: Tensor, advantages: Tensor, low: Tensor, high: Tensor) -> ClippedLogRatio:
    """PPO's sign-aware clip with per-action log-space bounds ``low`` / ``high`` ``[N, T]`` (constants).

    ``A > 0``: ``ℓ`` capped at ``high``; ``A < 0``: floored at ``low``; the clipped side carries no gradient.
    """
    clipped_high = (advantages > 0) & (log_ratio > high)  # [N, T]
    clipped_low = (advantages < 0) & (log_ratio < low)  # [N, T]
    log_weight = torch.where(clipped_high, high, torch.where(clipped_low, low, log_ratio))  # [N, T]
    return ClippedLogRatio(log_weight, clipped_low, clipped_high)


def _log_bounds_tensor(eps_low: Tensor, eps_high: Tensor) -> tuple[Tensor, Tensor]:
    """Per-action ratio offsets ``[N, T]`` -> log-space bounds ``(log(1 − ε_low), log(1 + ε_high))``."""
    return torch.log1p(-eps_low), torch.log1p(eps_high)


def _row_mean(values: Tensor, mask: Tensor) -> Tensor:
    return ((values * mask).sum(1) / mask.sum(1).clamp_min(1.0))[:, None]  # [N, 1]


def _mask_of(context: ObjectiveContext | None, like: Tensor) -> Tensor:
    return torch.ones_like(like) if context is None or context.mask is None else context.mask


# ------------------------------------------------------------------------------------------------- adaptive bounds
@CLIP_FORMS.register(
    "entropy_adaptive",
    formula="ε_t = ε · clamp((H_t / mean_i H)^γ, s_min, s_max); PPO clip with ε_t",
    source="[15] SSPO",
    summary="Clip bounds widen for high-entropy actions and narrow for low-entropy ones.",
)
def entropy_adaptive_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    context: ObjectiveContext | None = None,
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
        context: ``entropy`` ``[N, T]`` is required.
        eps_low, eps_high: base clip ranges.
        entropy_power: exponent ``γ >= 0`` (0 gives plain PPO).
        scale_min, scale_max: bounds on the scale ``s_t``, ``0 < s_min <= 1 <= s_max``.
    """
    _check_eps(eps_low, eps_high)
    if not 0 < scale_min <= 1 <= scale_max:
        raise ValueError(f"need 0 < scale_min <= 1 <= scale_max, got scale_min={scale_min!r}, scale_max={scale_max!r}")
    if not entropy_power >= 0:
        raise ValueError(f"entropy_power must be >= 0, got {entropy_power!r}")
    entropy = require(context, "entropy", "clip form 'entropy_adaptive'")
    mask = _mask_of(context, log_ratio)
    relative = entropy.clamp_min(1e-8) / _row_mean(entropy, mask).clamp_min(1e-8)  # [N, T]
    scale = relative.pow(entropy_power).clamp(scale_min, scale_max)  # [N, T]
    low, high = _log_bounds_tensor((eps_low * scale).clamp(max=0.99), eps_high * scale)
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
    context: ObjectiveContext | None = None,
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
        context: ``old_logp`` (filled by ``policy_loss``).
        eps_low, eps_high: clip ranges of an action with ``q = 1``.
        prob_power: exponent ``κ >= 0``.
        eps_low_max: cap on the lower range, in ``[eps_low, 1)``.
        eps_high_max: cap on the upper range, ``>= eps_high``.
    """
    _check_eps(eps_low, eps_high)
    if not (eps_low <= eps_low_max < 1 and eps_high_max >= eps_high and prob_power >= 0):
        raise ValueError(
            "need eps_low <= eps_low_max < 1, eps_high_max >= eps_high and prob_power >= 0, got "
            f"eps_low_max={eps_low_max!r}, eps_high_max={eps_high_max!r}, prob_power={prob_power!r}"
        )
    old_logp = require(context, "old_logp", "clip form 'prob_adaptive'")
    widen = (-prob_power * old_logp).exp()  # [N, T] = q^{-κ}
    low, high = _log_bounds_tensor((eps_low * widen).clamp(max=eps_low_max), (eps_high * widen).clamp(max=eps_high_max))
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
    context: ObjectiveContext | None = None,
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
    the macro level needs ``context.group_reward_std``, which the trainer does not pass yet.

    Args:
        log_ratio, advantages: ``[N, T]``.
        context: ``group_reward_std`` ``[N]`` is required when ``variance_gain > 0``.
        eps_low, eps_high: base clip ranges.
        advantage_gain: ``a >= 0``.
        variance_gain: ``v >= 0``.
        eps_low_max: cap on the lower range, in ``[eps_low, 1)``.
    """
    _check_eps(eps_low, eps_high)
    if not (advantage_gain >= 0 and variance_gain >= 0 and eps_low <= eps_low_max < 1):
        raise ValueError(
            "need advantage_gain >= 0, variance_gain >= 0 and eps_low <= eps_low_max < 1, got "
            f"advantage_gain={advantage_gain!r}, variance_gain={variance_gain!r}, eps_low_max={eps_low_max!r}"
        )
    scale = 1.0 + advantage_gain * advantages.abs()  # [N, T]
    if variance_gain > 0:
        std = require(context, "group_reward_std", "clip form 'elastic' with variance_gain > 0")
        scale = scale * (1.0 + variance_gain * 4.0 * std.square())[:, None]  # [N, T]
    low, high = _log_bounds_tensor((eps_low * scale).clamp(max=eps_low_max), eps_high * scale)
    return ppo_with_bounds(log_ratio, advantages, low, high)


# -------------------------------------------------------------------------------------------- asymmetric and soft
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
    context: ObjectiveContext | None = None,
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
        context: unused.
        eps_low, eps_high: PPO clip ranges.
        dual_clip_c: soft cap ``c > 1`` on every weight.
    """
    low, high = _log_bounds(eps_low, eps_high)
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
    "unbounded_positive",
    formula="A>0: ℓ̃ = ℓ − sg(ℓ) (ratio πθ/sg(πθ), unclipped); A≤0: PPO floor at 1−ε_low",
    source="[223] UP",
    summary="Unbounded positive updates anchored by stop-gradient; negative updates keep PPO clipping.",
)
def unbounded_positive_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    context: ObjectiveContext | None = None,
    *,
    eps_low: float = 0.2,
) -> ClippedLogRatio:
    """UP [223]: a positive-advantage action uses the ratio ``πθ / sg(πθ)`` (value 1, gradient ``∇logπθ``), anchored
    to the current policy and never clipped; negative-advantage actions keep PPO's floor at ``1 − ε_low``. Works at
    every ratio level (token, sequence, ...).

    Args:
        log_ratio, advantages: ``[N, T]``.
        context: unused.
        eps_low: PPO lower clip range for ``A < 0``.
    """
    low, _ = _log_bounds(eps_low, None)
    anchored = log_ratio - log_ratio.detach()  # [N, T]
    clipped_low = (advantages < 0) & (log_ratio < low)  # [N, T]
    log_weight = torch.where(advantages > 0, anchored, torch.where(clipped_low, low, log_ratio))
    return ClippedLogRatio(log_weight, clipped_low, torch.zeros_like(clipped_low))


@CLIP_FORMS.register(
    "log_fidelity",
    formula="ℓ̃ = c₊·tanh(ℓ/c₊) for ℓ ≥ 0, c₋·tanh(ℓ/c₋) for ℓ < 0 (weight bounded in (e^{−c₋}, e^{c₊}))",
    source="[181] MHPO",
    summary="Bounded, differentiable log-fidelity modulation of the ratio instead of a hard clip.",
)
def log_fidelity_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    context: ObjectiveContext | None = None,
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
        context: unused.
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
    context: ObjectiveContext | None = None,
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
        context: ``mask`` (filled by ``policy_loss``).
        eps_low, eps_high: clip ranges.
        self_normalize: divide by ``sg(mean exp(ℓ̃))``.
    """
    low, high = _log_bounds(eps_low, eps_high)
    clipped_low, clipped_high = log_ratio < low, log_ratio > high  # [N, T]
    log_weight = torch.where(clipped_high, high, torch.where(clipped_low, low, log_ratio))  # [N, T]
    if self_normalize:
        mask = _mask_of(context, log_ratio)
        mean_weight = (log_weight.detach().exp() * mask).sum() / mask.sum().clamp_min(1.0)
        log_weight = log_weight - mean_weight.clamp_min(1e-12).log()
    return ClippedLogRatio(log_weight, clipped_low, clipped_high)


# ------------------------------------------------------------------------------------------------------ masking rules
def _prefix_before(flags: Tensor) -> Tensor:
    """``[N, T]`` bool: some earlier action of the row is flagged (strictly before ``t``)."""
    counts = torch.cumsum(flags.to(torch.long), 1)  # [N, T]
    return (counts - flags.to(torch.long)) > 0


@CLIP_FORMS.register(
    "prefix_divergence",
    formula="δ_t = δ_early + (δ_late − δ_early)·((t−1)/(|o_i|−1))^κ; mask if A·ℓ > 0 and |ℓ| > log(1+δ_t), or if "
    "A·ℓ > 0 and Σ_{j<t} k3(ℓ_j) > budget",
    source="[263] CPPO",
    summary="Token masking with a position-weighted threshold and a cumulative prefix-divergence budget.",
)
def prefix_divergence_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    context: ObjectiveContext | None = None,
    *,
    eps_early: float = 0.1,
    eps_late: float = 0.3,
    position_power: float = 1.0,
    budget: float = 0.5,
) -> ClippedLogRatio:
    """CPPO [263]: a token-masking trust region aligned with autoregressive drift. (1) Position-weighted threshold:
    early actions, whose deviations persist longest, get the strict ``δ_early``, late ones the relaxed ``δ_late``.
    (2) Cumulative prefix budget: once the divergence of the prefix ``Σ_{j<t} k3(ℓ_j)`` exceeds ``budget``, no action
    of the row may move further in the advantage's direction.

    Reading chosen: masking is PPO-like (only moves in the direction the advantage pushes, ``A·ℓ > 0``, are masked;
    masked actions keep their value and lose their gradient); the threshold interpolates as a power of the relative
    position; the prefix divergence is the k3 estimate of KL(πold‖πθ) summed over earlier actions (detached).

    Args:
        log_ratio, advantages: ``[N, T]``.
        context: ``mask`` (filled by ``policy_loss``).
        eps_early, eps_late: ratio thresholds at the first and last action, ``>= 0``.
        position_power: ``κ > 0`` (1 = linear).
        budget: prefix divergence budget, ``>= 0`` (``inf`` disables the budget).
    """
    if not (eps_early >= 0 and eps_late >= 0 and position_power > 0 and budget >= 0):
        raise ValueError(
            "need eps_early >= 0, eps_late >= 0, position_power > 0 and budget >= 0, got "
            f"eps_early={eps_early!r}, eps_late={eps_late!r}, position_power={position_power!r}, budget={budget!r}"
        )
    mask = _mask_of(context, log_ratio)
    positions = torch.cumsum(mask, 1)  # [N, T] 1-based among valid actions
    lengths = mask.sum(1, keepdim=True)  # [N, 1]
    relative = ((positions - 1.0) / (lengths - 1.0).clamp_min(1.0)).clamp(0.0, 1.0)  # [N, T]
    threshold = math.log1p(eps_early) + (math.log1p(eps_late) - math.log1p(eps_early)) * relative.pow(position_power)
    toward = advantages * log_ratio > 0  # [N, T] moving in the advantage's direction
    divergence = kl_k3(torch.zeros_like(log_ratio), log_ratio.detach()) * mask  # [N, T]
    prefix = torch.cumsum(divergence, 1) - divergence  # [N, T] Σ_{j<t}
    over_threshold = toward & (log_ratio.abs() > threshold)
    over_budget = toward & (prefix > budget)
    masked = (over_threshold | over_budget) & (mask > 0)
    log_weight = torch.where(masked, log_ratio.detach(), log_ratio)
    return ClippedLogRatio(log_weight, masked & (log_ratio < 0), masked & (log_ratio > 0))


@CLIP_FORMS.register(
    "stale_veto",
    formula="PPO with relaxed ε; A<0 rows: actions after the first ρ ∉ [1−v, 1+v] get no gradient",
    source="[60] Mu-GRPO",
    summary="Relaxed clipping for stale rollouts plus a negative-advantage veto on post-trigger suffixes.",
)
def stale_veto_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    context: ObjectiveContext | None = None,
    *,
    eps_low: float = 0.4,
    eps_high: float = 0.4,
    veto_threshold: float = 0.4,
) -> ClippedLogRatio:
    """Mu-GRPO [60]: stale rollouts (few large generation→optimisation stages) keep their gradients under relaxed
    PPO bounds, and in negative-advantage responses every action after a "trigger" is vetoed (no gradient).

    Reading chosen: the trigger is the first valid action whose ratio leaves ``[1 − v, 1 + v]`` (the response has
    drifted from the policy that generated it there); the suffix strictly after it is vetoed when the action's
    advantage is negative. The relaxed defaults (0.4) are a free choice.

    Args:
        log_ratio, advantages: ``[N, T]``.
        context: ``mask`` (filled by ``policy_loss``).
        eps_low, eps_high: relaxed PPO clip ranges.
        veto_threshold: ``v`` in ``(0, 1)``.
    """
    low, high = _log_bounds(eps_low, eps_high)
    if not 0 < veto_threshold < 1:
        raise ValueError(f"veto_threshold must be in (0, 1), got {veto_threshold!r}")
    mask = _mask_of(context, log_ratio)
    ppo = ppo_with_bounds(log_ratio, advantages, torch.full_like(log_ratio, low), torch.full_like(log_ratio, high))
    trigger = (mask > 0) & ((log_ratio > math.log1p(veto_threshold)) | (log_ratio < math.log1p(-veto_threshold)))
    vetoed = _prefix_before(trigger) & (advantages < 0) & (mask > 0)  # [N, T]
    log_weight = torch.where(vetoed, ppo.log_weight.detach(), ppo.log_weight)
    return ClippedLogRatio(log_weight, ppo.clipped_low | vetoed, ppo.clipped_high)


# ------------------------------------------------------------------------------- behaviour (rollout engine) mismatch
def _mismatch(context: ObjectiveContext | None, option: str) -> Tensor:
    """``log k = logπold(train) − logπ(rollout engine)`` ``[N, T]``."""
    rollout_logp = require(context, "rollout_logp", option)
    old_logp = require(context, "old_logp", option)
    return old_logp - rollout_logp


@CLIP_FORMS.register(
    "icepop",
    formula="k = π_train/π_infer; PPO(ℓ) · k if k ∈ [α, β], else the action is dropped (weight 0)",
    source="[318] IcePop (Ring-1T)",
    summary="Masks actions whose training and inference probabilities disagree; reweights the rest by k.",
)
def icepop_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    context: ObjectiveContext | None = None,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    mismatch_low: float = 0.5,
    mismatch_high: float = 2.0,
) -> ClippedLogRatio:
    """IcePop [318]: token-level masking and clipping on the discrepancy ``k = π_train(a)/π_infer(a)`` between the
    trainer's recomputed probability (``old_logp``) and the rollout engine's (``context.rollout_logp``). Actions with
    ``k ∉ [α, β]`` are dropped (surrogate and gradient 0, ``ℓ̃ = −inf``); the others get the PPO surrogate times the
    constant ``k`` (importance correction for the engine).

    Reading chosen: the ``k`` factor on kept actions and the bounds ``[0.5, 2]`` (free choices; the abstract gives
    neither). At sequence-level ratio levels one dropped action drops its sequence.

    Args:
        log_ratio, advantages: ``[N, T]``.
        context: ``rollout_logp`` ``[N, T]`` is required.
        eps_low, eps_high: PPO clip ranges.
        mismatch_low, mismatch_high: ``0 < α <= 1 <= β``.
    """
    _check_eps(eps_low, eps_high)
    if not 0 < mismatch_low <= 1 <= mismatch_high:
        raise ValueError(
            f"need 0 < mismatch_low <= 1 <= mismatch_high, got mismatch_low={mismatch_low!r}, "
            f"mismatch_high={mismatch_high!r}"
        )
    log_k = _mismatch(context, "clip form 'icepop'")  # [N, T]
    low, high = _log_bounds(eps_low, eps_high)
    ppo = ppo_with_bounds(log_ratio, advantages, torch.full_like(log_ratio, low), torch.full_like(log_ratio, high))
    too_low, too_high = log_k < math.log(mismatch_low), log_k > math.log(mismatch_high)  # [N, T]
    log_weight = torch.where(too_low | too_high, -torch.inf, ppo.log_weight + log_k)
    return ClippedLogRatio(log_weight, ppo.clipped_low | too_low, ppo.clipped_high | too_high)


@CLIP_FORMS.register(
    "truncated_is",
    formula="PPO(ℓ) · min(π_train/π_infer, C) (constant weight)",
    source="[318] (training/inference mismatch); truncated importance sampling",
    summary="PPO surrogate times a truncated importance weight correcting for the rollout engine.",
)
def truncated_is_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    context: ObjectiveContext | None = None,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    truncation: float = 2.0,
) -> ClippedLogRatio:
    """Truncated importance sampling for rollouts produced by a different engine (the mismatch studied by [318]):
    the PPO surrogate of each action is multiplied by the constant ``min(k, C)``,
    ``k = π_train(a)/π_infer(a) = exp(old_logp − rollout_logp)``.

    Args:
        log_ratio, advantages: ``[N, T]``.
        context: ``rollout_logp`` ``[N, T]`` is required.
        eps_low, eps_high: PPO clip ranges.
        truncation: ``C >= 1``.
    """
    _check_eps(eps_low, eps_high)
    if not truncation >= 1:
        raise ValueError(f"truncation must be >= 1, got {truncation!r}")
    log_k = _mismatch(context, "clip form 'truncated_is'").clamp(max=math.log(truncation))  # [N, T]
    low, high = _log_bounds(eps_low, eps_high)
    ppo = ppo_with_bounds(log_ratio, advantages, torch.full_like(log_ratio, low), torch.full_like(log_ratio, high))
    return ClippedLogRatio(ppo.log_weight + log_k, ppo.clipped_low, ppo.clipped_high)


@CLIP_FORMS.register(
    "off_policy",
    formula="r = πθ/π_β, clipped to [(1−ε_low)·π_k/π_β, (1+ε_high)·π_k/π_β] (PPO's sign-aware min); "
    "π_β = rollout engine (old policy if absent)",
    source="[323] off-policy GRPO",
    summary="Off-policy clipped surrogate: ratio to the behaviour policy, trust region around the current iterate.",
)
def off_policy_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    context: ObjectiveContext | None = None,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
) -> ClippedLogRatio:
    """Off-policy GRPO [323]: samples come from a behaviour policy ``π_β`` older than the iterate ``π_k`` (``old_logp``);
    the surrogate uses ``r = πθ/π_β`` and the trust region is centred on ``π_k``: ``r`` is clipped to
    ``[(1−ε_low)·π_k/π_β, (1+ε_high)·π_k/π_β]``, i.e. ``πθ/π_k`` stays within PPO's bounds.

    Reading chosen: the off-policy PPO surrogate the abstract builds on; ``π_β`` is ``context.rollout_logp`` when
    given, else ``π_k`` itself, which makes this exactly ``ppo``.

    Args:
        log_ratio, advantages: ``[N, T]`` with ``ℓ = logπθ − logπ_k``.
        context: optional ``rollout_logp`` (the behaviour policy).
        eps_low, eps_high: PPO clip ranges.
    """
    low, high = _log_bounds(eps_low, eps_high)
    shift = torch.zeros_like(log_ratio)  # [N, T] log π_k/π_β
    if context is not None and context.rollout_logp is not None and context.old_logp is not None:
        shift = context.old_logp - context.rollout_logp
    ppo = ppo_with_bounds(log_ratio + shift, advantages, low + shift, high + shift)
    return ClippedLogRatio(ppo.log_weight, ppo.clipped_low, ppo.clipped_high)


@CLIP_FORMS.register(
    "entropy_split",
    formula="high-entropy actions (H_t ≥ τ): PPO with ε·widen; others: PPO with ε",
    source="[197] Archer",
    summary="Wider clip range for high-entropy (reasoning) actions than for low-entropy (knowledge) actions.",
)
def entropy_split_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    context: ObjectiveContext | None = None,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    entropy_threshold: float = 0.5,
    widen: float = 1.5,
) -> ClippedLogRatio:
    """Archer's dual-token constraint [197], clipping half: actions are split by entropy; high-entropy "reasoning"
    actions get the wider range ``ε·widen``, low-entropy "knowledge" actions keep ``ε``; all update together (no
    masking). The KL half (weaker KL on high-entropy actions) is :func:`genalign.algorithms.entropy_split_kl`.

    Reading chosen: an absolute entropy threshold ``τ`` (nats) splits the actions, which keeps the split independent
    of micro-batching (the paper's quantile split needs batch statistics).

    Args:
        log_ratio, advantages: ``[N, T]``.
        context: ``entropy`` ``[N, T]`` is required.
        eps_low, eps_high: ranges of low-entropy actions.
        entropy_threshold: ``τ >= 0``.
        widen: factor ``>= 1`` for high-entropy actions (``ε_low·widen`` capped at 0.99).
    """
    _check_eps(eps_low, eps_high)
    if not (entropy_threshold >= 0 and widen >= 1):
        raise ValueError(f"need entropy_threshold >= 0 and widen >= 1, got {entropy_threshold!r}, {widen!r}")
    entropy = require(context, "entropy", "clip form 'entropy_split'")
    scale = torch.where(entropy >= entropy_threshold, widen, 1.0).to(log_ratio.dtype)  # [N, T]
    low, high = _log_bounds_tensor((eps_low * scale).clamp(max=0.99), eps_high * scale)
    return ppo_with_bounds(log_ratio, advantages, low, high)
