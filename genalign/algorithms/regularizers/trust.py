"""Trust-region regularisers (method catalogue): likelihood preservation, entropy-split and mastery-hinge KL, and MHPO's
hazard penalty [181]."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.kl import kl_k3
from genalign.algorithms.regularizers.base import REGULARIZERS, valid_mask
from genalign.algorithms.scores import ScoreOutput


@REGULARIZERS.register(
    "entropy_split_kl",
    needs=("kl", "entropy"),
    formula="L_it = s_t · KL_it, s_t = high_entropy_scale if H_t ≥ τ else low_entropy_scale",
    source="[197] Archer",
    summary="Weaker KL on high-entropy (reasoning) actions, stronger on low-entropy (knowledge) actions.",
)
def entropy_split_kl(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    entropy_threshold: float = 0.5,
    high_entropy_scale: float = 0.5,
    low_entropy_scale: float = 1.5,
) -> Tensor:
    """Archer's dual-token constraint [197], KL half: the per-action KL to the reference is scaled down on
    high-entropy actions and up on low-entropy ones (pair with ``clip: entropy_split`` for the clip half); use it in
    place of the plain KL term (``kl_coef`` multiplies it).

    Args:
        score, advantages, batch: read ``kl`` (grad), ``entropy`` and ``mask``.
        entropy_threshold: ``τ >= 0`` (nats), as in the ``entropy_split`` clip form.
        high_entropy_scale, low_entropy_scale: ``>= 0``.
    """
    if not (entropy_threshold >= 0 and high_entropy_scale >= 0 and low_entropy_scale >= 0):
        raise ValueError("entropy_threshold, high_entropy_scale and low_entropy_scale must be >= 0")
    mask = valid_mask(score, batch)
    kl = score.require("kl", "entropy_split_kl")
    entropy = score.require("entropy", "entropy_split_kl").detach()
    scale = torch.where(entropy >= entropy_threshold, high_entropy_scale, low_entropy_scale).to(kl.dtype)  # [N, T]
    return torch.where(mask > 0, scale * kl, 0.0)


@REGULARIZERS.register(
    "mastery_hinge_kl",
    needs=("group_mean_reward",),
    formula="L_it = max(0, k3(logπold − logπθ)_it − δ) on samples of mastered groups (p ≥ p_mastered), else 0",
    source="[201] MCPO",
    summary="Hinge KL to the previous policy, only on prompts the policy has mastered.",
)
def mastery_hinge_kl(
    score: ScoreOutput, advantages: Tensor, batch: StepBatch, *, margin: float = 0.01, mastered_at: float = 1.0
) -> Tensor:
    """MCPO's mastery consolidation [201]: a mastered prompt (every response correct, advantage 0) gives GRPO no
    gradient, so nothing stops the policy from drifting away from it; a hinge on the per-action KL between the
    previous (``old_logp``) and the current policy bounds that drift beyond ``margin``.

    Args:
        score, advantages, batch: read ``logp``, ``old_logp``, ``group_mean_reward`` ``[N]`` and ``mask``.
        margin: ``δ >= 0``, KL allowed for free.
        mastered_at: a group counts as mastered when its success rate is ``>= mastered_at``.
    """
    if not margin >= 0:
        raise ValueError(f"margin must be >= 0, got {margin!r}")
    mask = valid_mask(score, batch)
    old = batch.require("old_logp", "mastery_hinge_kl").detach()
    success = batch.require("group_mean_reward", "mastery_hinge_kl")
    kl = kl_k3(torch.where(mask > 0, score.logp, 0.0), torch.where(mask > 0, old, 0.0))  # [N, T] KL(πθ‖πold) k3
    mastered = (success >= mastered_at)[:, None] & (mask > 0)  # [N, T]
    return torch.where(mastered, (kl - margin).clamp_min(0.0), 0.0)
