"""Credit by the probability of the sampled token: Advantage Reweighting of [219] damps the gradient of low-probability
tokens (a rule of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`).

The second method of [219], Lopti (a separate update of the low-probability tokens before the others), changes the
update schedule rather than the advantages: it is the objective ``lopti``
(:mod:`genalign.algorithms.objectives.phased`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES


@CREDIT_RULES.register(
    "probability_damping",
    needs=(),
    formula="w_it = α·π_old(o_it) + (1 − α), A_it = w_it·A_it (both signs)",
    source="[219] Advantage Reweighting (AR-Lopti code: both_linear_normal)",
    summary="Scale each token's advantage by a linear function of its sampling probability: low-probability tokens, "
    "whose large gradients crowd out the others, are damped.",
)
def probability_damping(advantages: Tensor, batch: StepBatch, *, alpha: float = 0.3) -> Tensor:
    """Advantage Reweighting of [219]: ``A_it ← (α·p_it + 1 − α)·A_it`` with ``p_it = exp(logπ_old(o_it))``.

    The gradient of ``log π(o_t)`` with respect to the logits has norm ``≈ 1 − p_t``, so low-probability tokens
    dominate an update whose advantages are uniform along the sequence; the weight rising linearly with ``p`` puts
    the weight back on high-probability tokens. The published code applies the weight to positive and negative
    advantages alike (``reweight_method=both_linear_normal``, ``neg_adv_weight=1``) with ``α = 0.3`` together with
    Lopti and ``α = 0.2`` alone; ``α = 0`` is GRPO.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask`` and ``behaviour_logp`` ``[N, T]`` (the sampler's log-probs of the sampled tokens;
            the code uses the old log-probs re-scored before the update, equal up to engine rounding).
        alpha: ``α`` in ``[0, 1]``.
    Returns:
        ``[N, T]`` ``advantages · w``, ``w ∈ [1 − α, 1]`` (1 on padding).
    """
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1] (weights α·p + 1 − α stay in [1 − α, 1]), got {alpha!r}")
    logp = batch.require("behaviour_logp", "probability_damping").detach()
    valid = batch.mask > 0  # [N, T]
    probs = torch.where(valid, logp, 0.0).to(advantages.dtype).exp().clamp_max(1.0)  # [N, T]; 1 on padding
    return advantages * (alpha * probs + (1.0 - alpha))  # [N, T]
