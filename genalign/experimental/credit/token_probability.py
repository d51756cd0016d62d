"""Token weights from the sampled token's probability, or from how far training has moved it away from the reference
model (rules of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`; experimental tier).

* ``probability_shaping`` (GRPO-SG / TR-GRPO [261]): a bounded, monotone sigmoid of the token probability, so that
  low-probability tokens, whose logit gradients are the largest, move the parameters less.
* ``delta_logp_weights`` ([266]): weights that grow with the signed change ``Δlog p = log π_θ − log π_ref`` of each
  sampled token since the start of training, so learning concentrates where training has already been moving mass.
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES


@CREDIT_RULES.register(
    "probability_shaping",
    needs=("behaviour_logp",),
    formula="p_it = exp(logπ_behaviour(o_it)); w_it = clip(α·(σ(p_it/τ) − μ), L, U); A_it = w_it·A_it (both signs)",
    source="[261] GRPO-SG / TR-GRPO (sharpness-guided probability shaping)",
    summary="Down-weight tokens likely to cause large gradients: a bounded sigmoid of the sampled token's "
    "probability multiplies its advantage.",
)
def probability_shaping(
    advantages: Tensor,
    batch: StepBatch,
    *,
    alpha: float = 4.0,
    tau: float = 1.0,
    mu: float = 0.5,
    low: float = 0.1,
    high: float = 1.0,
) -> Tensor:
    """Sharpness-Guided GRPO [261]: the generalisation bound of the paper adds a sharpness surrogate (the gradient
    norm) to the empirical loss; the logit gradient of ``log π(o_t)`` is ``e_{o_t} − π``, whose norm grows as the
    sampled token's probability ``p_t`` falls, so tokens of low probability cause the sharp updates. Each token's
    advantage is multiplied by the monotone probability shaping ``w = clip(α·(σ(p/τ) − μ), L, U)``.

    Reading chosen: the abstract only says "down-weights tokens likely to cause overly large gradients"; the paper's
    later version names a monotone probability-shaping function, which we read as this clipped sigmoid. The defaults
    are ours: ``w`` rises from ``L = 0.1`` (``p`` near 0) through 0.49 (``p = 0.5``) to 0.92 (``p = 1``); the weight
    is applied to positive and negative advantages alike. The published linear form of [219] is
    ``probability_damping``.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask`` and ``behaviour_logp`` ``[N, T]`` (the sampler's log-probs of the sampled tokens).
        alpha: ``α > 0``, the slope.
        tau: ``τ > 0``, the sigmoid's temperature.
        mu: ``μ``, the offset subtracted from the sigmoid.
        low, high: ``0 <= L <= U``, the bounds of the weight.
    Returns:
        ``[N, T]`` ``advantages · w`` (unchanged on padding).
    """
    if not (alpha > 0 and tau > 0 and 0 <= low <= high):
        raise ValueError(
            f"probability_shaping needs alpha > 0, tau > 0 and 0 <= low <= high, got alpha={alpha!r}, tau={tau!r}, "
            f"low={low!r}, high={high!r}"
        )
    logp = batch.require("behaviour_logp", "probability_shaping").detach().to(advantages.device)
    valid = batch.mask.to(advantages.device) > 0  # [N, T]
    probs = torch.where(valid, logp, 0.0).double().exp().clamp_max(1.0)  # [N, T]
    weights = (alpha * (torch.sigmoid(probs / tau) - mu)).clamp(low, high)  # [N, T]
    return advantages * torch.where(valid, weights, 1.0).to(advantages.dtype)  # [N, T]


@CREDIT_RULES.register(
    "delta_logp_weights",
    needs=("kl",),
    formula="Δ_it = logπθ(o_it) − logπ_ref(o_it) (k1, before the update); u_it = exp(β·clip(Δ_it, −c, c)); "
    "w_it = u_it / mean_{valid}(u); A_it = w_it·A_it",
    source="[266] Δlog p update direction (training-time reweighting)",
    summary="Weight each token by the signed log-probability change since the reference model: tokens training "
    "has been raising (low-probability ones) get more of the update.",
)
def delta_logp_weights(
    advantages: Tensor,
    batch: StepBatch,
    *,
    beta: float = 1.0,
    max_delta: float = 2.0,
) -> Tensor:
    """Training-time reweighting of [266] by the update direction ``Δlog p``.

    ``Δlog p = log π_θ − log π_base`` of each sampled token (the ``k1`` per-action KL to the reference, from the
    scoring pass before the update; the trainer requests ``k1`` for a credit rule reading ``kl``) is the direction
    RLVR moves the policy: the paper finds that the reasoning-critical updates are sparse, signed and concentrated on
    low-probability tokens, whose ``Δlog p`` is largest. Each token gets ``u = exp(β·clip(Δ, −c, c))``, normalised to
    mean 1 over the valid actions of the batch, so the total credit is unchanged and the update moves towards tokens
    that training has already been raising (and away from those it has been lowering).

    Reading chosen: the abstract names the target ("low-probability, higher-Δlog p tokens") but no weight; we weight
    by ``Δlog p`` itself, which needs the reference model (``policy.reference``), so the weights are all 1 at the
    first step and sharpen as the policy leaves the reference. The test-time extrapolation of the paper is
    inference-only and not part of this option.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask`` and ``kl`` ``[N, T]`` (``k1``).
        beta: ``β >= 0`` (0 gives all-ones weights).
        max_delta: ``c > 0``, the clip of ``Δ`` (bounds the weights to ``[e^{−βc}, e^{βc}]`` before normalising).
    Returns:
        ``[N, T]`` ``advantages · w`` (unchanged on padding).
    """
    if not (beta >= 0 and max_delta > 0):
        raise ValueError(f"delta_logp_weights needs beta >= 0 and max_delta > 0, got {beta!r}, {max_delta!r}")
    device = advantages.device
    delta = batch.require("kl", "delta_logp_weights").detach().double().to(device)  # [N, T] k1 = Δlog p
    valid = batch.mask.to(device) > 0  # [N, T]
    raw = torch.exp(beta * delta.clamp(-max_delta, max_delta))  # [N, T]
    count = valid.sum()
    mean = torch.where(valid, raw, 0.0).sum() / count.clamp_min(1)
    weights = torch.where(valid & (count > 0), raw / mean, 1.0)  # [N, T] mean 1 over the valid actions
    return advantages * weights.to(advantages.dtype)  # [N, T]
