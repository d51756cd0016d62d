"""Credit from the entropy change a token's update causes: STEER [328] damps the tokens whose first-order entropy change
is largest (a rule of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`)."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES


def entropy_change_magnitude(advantages: Tensor, logp: Tensor, entropy: Tensor) -> Tensor:
    """``|Ω_it| = |A_it·(1 − p_it)·(log p_it + H_it)|`` ``[N, T]``: the size of the first-order change of the token's
    next-token entropy under a policy-gradient step on it (STEER [328]; the published code's ``A/p_old · p(1 − p) ·
    (log p + H)`` with ``p = p_old``, as at the first inner step).

    Args:
        advantages: ``[N, T]`` per-action advantages.
        logp: ``[N, T]`` log-probs of the sampled tokens.
        entropy: ``[N, T]`` entropy of their next-token distributions.
    """
    probs = logp.exp().clamp(1e-8, 1.0 - 1e-8)  # [N, T]
    omega = advantages * (1.0 - probs) * (probs.log() + entropy)  # [N, T]
    return torch.where(omega.isfinite(), omega, 0.0).abs()


@CREDIT_RULES.register(
    "entropy_change",
    needs=("entropy",),
    formula="Ω_it = |A_it·(1 − p_it)·(log p_it + H_it)|; exponential: w = clamp(exp(−k·Ω), w_min, 1), "
    "k = −log(w_min)/max(max Ω, 0.02); linear: w = w_max − (Ω − min Ω)·(w_max − w_min)/(max Ω − min Ω)",
    source="[328] STEER (published code: compute_token_weights); differs: weights from the behaviour log-probs over the "
    "whole batch (code: per micro-batch inside the loss, current log-probs)",
    summary="Damp the tokens whose update would change the entropy most (first-order entropy change), stabilising "
    "token-level entropy dynamics directly.",
)
def entropy_change(
    advantages: Tensor,
    batch: StepBatch,
    *,
    mode: Literal["exponential", "linear"] = "exponential",
    min_weight: float = 0.8,
    max_weight: float = 1.0,
) -> Tensor:
    """STEER [328]: reweight each token by the size of the entropy change its update causes.

    For a softmax policy, a gradient step on ``A·log π(o_t)`` changes the entropy of the next-token distribution at
    ``t`` by about ``−η·A·(1 − p)·(log p + H)`` (the covariance of the log-probs with the update direction, to first
    order); ``Ω`` is its magnitude. STEER maps ``Ω`` to a weight that is smallest where ``|Ω|`` is largest, so no
    token moves the entropy abruptly: ``exponential`` (the published main setting: ``w = exp(−kΩ)`` with
    ``k = −log(w_min)/max(Ω_max, 0.02)``, so the largest ``Ω`` gets ``w_min``, clamped to ``[w_min, 1]``) or
    ``linear`` (``Ω_min ↦ w_max``, ``Ω_max ↦ w_min``; all equal: the middle). Defaults are the published ones:
    exponential with ``w_min = 0.8`` (the linear runs use ``[0.8, 1.2]``).

    Where genalign differs from the published code: the weights are computed once over the whole optimisation batch
    from the behaviour log-probs (the code: per micro-batch inside the loss, with the current log-probs in ``p`` and
    the old ones in the ``1/p_old`` factor, which agree at the first inner step).

    Args:
        advantages: ``[N, T]`` incoming per-action advantages (the ``A`` of ``Ω``).
        batch: reads ``mask``, ``behaviour_logp`` and ``entropy``.
        mode: ``exponential`` or ``linear``.
        min_weight: ``w_min`` in ``(0, 1]``.
        max_weight: ``w_max >= w_min`` (``linear`` only; ``exponential`` caps at 1).
    Returns:
        ``[N, T]`` ``advantages · w`` (1 on padding).
    """
    if mode not in ("exponential", "linear"):
        raise ValueError(f"mode must be 'exponential' or 'linear', got {mode!r}")
    if not 0 < min_weight <= 1 or not max_weight >= min_weight:
        raise ValueError(f"need 0 < min_weight <= 1 and max_weight >= min_weight, got {min_weight!r}, {max_weight!r}")
    logp = batch.require("behaviour_logp", "entropy_change").detach().float()
    entropy = batch.require("entropy", "entropy_change").detach().float()
    valid = batch.mask > 0  # [N, T]
    omega = torch.where(valid, entropy_change_magnitude(advantages.detach().float(), logp, entropy), 0.0)
    if not valid.any():
        return advantages
    high, low = omega[valid].max(), omega[valid].min()
    if mode == "exponential":
        k = -math.log(min_weight) / high.clamp_min(0.02)
        weights = torch.exp(-k * omega).clamp(min_weight, 1.0)  # [N, T]
    elif high > low:
        weights = (max_weight - (omega - low) * (max_weight - min_weight) / (high - low)).clamp(min_weight, max_weight)
    else:
        weights = torch.full_like(omega, (min_weight + max_weight) / 2)
    return advantages * torch.where(valid, weights, 1.0).to(advantages.dtype)  # [N, T]
