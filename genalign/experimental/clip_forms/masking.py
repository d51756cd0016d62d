"""Masking clip forms whose form genalign chose from the abstract (experimental tier)."""

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
)
from genalign.algorithms.clip_forms.masking import engine_mismatch, prefix_before
from genalign.algorithms.kl import kl_k3


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
    batch: StepBatch | None = None,
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
        batch: ``mask`` (filled by ``policy_loss``).
        eps_early, eps_late: ratio thresholds at the first and last action, ``>= 0``.
        position_power: ``κ > 0`` (1 = linear).
        budget: prefix divergence budget, ``>= 0`` (``inf`` disables the budget).
    """
    if not (eps_early >= 0 and eps_late >= 0 and position_power > 0 and budget >= 0):
        raise ValueError(
            "need eps_early >= 0, eps_late >= 0, position_power > 0 and budget >= 0, got "
            f"eps_early={eps_early!r}, eps_late={eps_late!r}, position_power={position_power!r}, budget={budget!r}"
        )
    mask = mask_of(batch, log_ratio)
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
    batch: StepBatch | None = None,
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
        batch: ``mask`` (filled by ``policy_loss``).
        eps_low, eps_high: relaxed PPO clip ranges.
        veto_threshold: ``v`` in ``(0, 1)``.
    """
    low, high = log_bounds(eps_low, eps_high)
    if not 0 < veto_threshold < 1:
        raise ValueError(f"veto_threshold must be in (0, 1), got {veto_threshold!r}")
    mask = mask_of(batch, log_ratio)
    ppo = ppo_with_bounds(log_ratio, advantages, torch.full_like(log_ratio, low), torch.full_like(log_ratio, high))
    trigger = (mask > 0) & ((log_ratio > math.log1p(veto_threshold)) | (log_ratio < math.log1p(-veto_threshold)))
    vetoed = prefix_before(trigger) & (advantages < 0) & (mask > 0)  # [N, T]
    log_weight = torch.where(vetoed, ppo.log_weight.detach(), ppo.log_weight)
    return ClippedLogRatio(log_weight, ppo.clipped_low | vetoed, ppo.clipped_high)


@CLIP_FORMS.register(
    "icepop",
    formula="k = π_train/π_infer; PPO(ℓ) · k if k ∈ [α, β], else the action is dropped (weight 0)",
    source="[318] IcePop (Ring-1T)",
    summary="Masks actions whose training and inference probabilities disagree; reweights the rest by k.",
)
def icepop_clip(
    log_ratio: Tensor,
    advantages: Tensor,
    batch: StepBatch | None = None,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    mismatch_low: float = 0.5,
    mismatch_high: float = 2.0,
) -> ClippedLogRatio:
    """IcePop [318]: token-level masking and clipping on the discrepancy ``k = π_train(a)/π_infer(a)`` between the
    trainer's recomputed probability (``old_logp``) and the rollout engine's (the batch's ``behaviour_logp``). Actions with
    ``k ∉ [α, β]`` are dropped (surrogate and gradient 0, ``ℓ̃ = −inf``); the others get the PPO surrogate times the
    constant ``k`` (importance correction for the engine).

    Reading chosen: the ``k`` factor on kept actions and the bounds ``[0.5, 2]`` (free choices; the abstract gives
    neither). At sequence-level ratio levels one dropped action drops its sequence.

    Args:
        log_ratio, advantages: ``[N, T]``.
        batch: ``behaviour_logp`` ``[N, T]`` is required.
        eps_low, eps_high: PPO clip ranges.
        mismatch_low, mismatch_high: ``0 < α <= 1 <= β``.
    """
    check_eps(eps_low, eps_high)
    if not 0 < mismatch_low <= 1 <= mismatch_high:
        raise ValueError(
            f"need 0 < mismatch_low <= 1 <= mismatch_high, got mismatch_low={mismatch_low!r}, "
            f"mismatch_high={mismatch_high!r}"
        )
    log_k = engine_mismatch(batch, "clip form 'icepop'")  # [N, T]
    low, high = log_bounds(eps_low, eps_high)
    ppo = ppo_with_bounds(log_ratio, advantages, torch.full_like(log_ratio, low), torch.full_like(log_ratio, high))
    too_low, too_high = log_k < math.log(mismatch_low), log_k > math.log(mismatch_high)  # [N, T]
    log_weight = torch.where(too_low | too_high, -torch.inf, ppo.log_weight + log_k)
    return ClippedLogRatio(log_weight, ppo.clipped_low | too_low, ppo.clipped_high | too_high)


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
    batch: StepBatch | None = None,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
) -> ClippedLogRatio:
    """Off-policy GRPO [323]: samples come from a behaviour policy ``π_β`` older than the iterate ``π_k`` (``old_logp``);
    the surrogate uses ``r = πθ/π_β`` and the trust region is centred on ``π_k``: ``r`` is clipped to
    ``[(1−ε_low)·π_k/π_β, (1+ε_high)·π_k/π_β]``, i.e. ``πθ/π_k`` stays within PPO's bounds.

    Reading chosen: the off-policy PPO surrogate the abstract builds on; ``π_β`` is the batch's ``behaviour_logp`` when
    given, else ``π_k`` itself, which makes this exactly ``ppo``.

    Args:
        log_ratio, advantages: ``[N, T]`` with ``ℓ = logπθ − logπ_k``.
        batch: optional ``behaviour_logp`` (the behaviour policy).
        eps_low, eps_high: PPO clip ranges.
    """
    low, high = log_bounds(eps_low, eps_high)
    shift = torch.zeros_like(log_ratio)  # [N, T] log π_k/π_β
    if batch is not None and batch.get("behaviour_logp") is not None and batch.get("old_logp") is not None:
        shift = batch["old_logp"] - batch["behaviour_logp"]
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
    batch: StepBatch | None = None,
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
        batch: ``entropy`` ``[N, T]`` is required.
        eps_low, eps_high: ranges of low-entropy actions.
        entropy_threshold: ``τ >= 0``.
        widen: factor ``>= 1`` for high-entropy actions (``ε_low·widen`` capped at 0.99).
    """
    check_eps(eps_low, eps_high)
    if not (entropy_threshold >= 0 and widen >= 1):
        raise ValueError(f"need entropy_threshold >= 0 and widen >= 1, got {entropy_threshold!r}, {widen!r}")
    entropy = require(batch, "entropy", "clip form 'entropy_split'")
    scale = torch.where(entropy >= entropy_threshold, widen, 1.0).to(log_ratio.dtype)  # [N, T]
    low, high = log_bounds_tensor((eps_low * scale).clamp(max=0.99), eps_high * scale)
    return ppo_with_bounds(log_ratio, advantages, low, high)
