"""Token-weight credit whose form genalign chose from the abstract (experimental tier)."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.credit.token_weights import entropy_inputs, normalised_share


@CREDIT_RULES.register(
    "entropy_weighted",
    needs=("entropy",),
    formula="A>0: w = 1−α + α·H_it / mean_{A>0}(H); A<0: w = 1−α + α·H_it⁻¹ / mean_{A<0}(H⁻¹); "
    "level=sequence uses each sequence's mean entropy (GRPO-S)",
    source="[232] GTPO / GRPO-S (form inferred from the abstract)",
    summary="Entropy-weighted advantages: more credit to uncertain actions of good samples, more blame to "
    "confident actions of bad ones.",
)
def entropy_weighted(
    advantages: Tensor,
    batch: StepBatch,
    *,
    alpha: float = 0.5,
    level: Literal["token", "sequence"] = "token",
    eps: float = 1e-6,
) -> Tensor:
    """Dynamic entropy weighting (GTPO, token level; GRPO-S, sequence level) [232].

    The abstract gives the idea, not the formula; genalign's form: within the positive-advantage actions the weight
    grows with entropy (high entropy = a pivotal decision that led to success), within the negative-advantage actions
    it grows with *inverse* entropy (a confident step of a failed answer is blamed most). Each subset's weights average
    exactly 1, so the total credit per subset is unchanged; ``alpha`` mixes with uniform weights.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``sample_advantages`` (only their sign), ``mask`` and ``entropy``.
        alpha: mixing weight in ``[0, 1]``; 0 gives all-ones weights.
        level: ``"token"`` (GTPO) or ``"sequence"`` (GRPO-S: every action gets its sequence's weight).
        eps: floor on the entropy before inverting.
    Returns:
        ``[N, T]`` ``advantages * w`` with non-negative weights ``w`` (1 where ``A = 0`` and on padding).
    """
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1] (weights stay non-negative), got {alpha!r}")
    if level not in ("token", "sequence"):
        raise ValueError(f"level must be 'token' or 'sequence', got {level!r}")
    sample, valid, entropy = entropy_inputs(batch, "entropy_weighted")
    if level == "sequence":
        per_sequence = torch.where(valid, entropy, 0.0).sum(1) / valid.sum(1).clamp_min(1)  # [N]
        entropy = per_sequence[:, None].expand_as(entropy)  # [N, T]
        valid = valid.any(1, keepdim=True).expand_as(valid)  # [N, T]; every row counts T times: a mean over sequences
    positive = valid & (sample > 0)[:, None]  # [N, T]
    negative = valid & (sample < 0)[:, None]  # [N, T]
    floored = entropy.clamp_min(eps)  # [N, T]
    share = torch.where(positive, normalised_share(floored, positive), normalised_share(1.0 / floored, negative))
    return advantages * torch.where(positive | negative, (1.0 - alpha) + alpha * share, 1.0)  # [N, T]


@CREDIT_RULES.register(
    "entropy_driven",
    needs=("entropy",),
    formula="w_i = clamp(mean_batch(H̄) / H̄_i, w_min, w_max), H̄_i = mean entropy of sequence i",
    source="[99] EDGE-GRPO (entropy-driven advantage)",
    summary="Scale each response's advantage by its inverse normalised entropy: confident responses move more.",
)
def entropy_driven(
    advantages: Tensor,
    batch: StepBatch,
    *,
    min_weight: float = 0.5,
    max_weight: float = 2.0,
    eps: float = 1e-6,
) -> Tensor:
    """Entropy-Driven Advantage of EDGE-GRPO [99]: ``A_i / P̂_i`` with ``P̂_i`` the response's mean entropy divided
    by the mean over responses, so a confident correct response is reinforced more and a confident wrong one is
    penalised more, which separates responses whose rewards (and so advantages) look alike.

    Reading chosen: the normalisation runs over the responses of the batch (credit weights do not see groups), and the
    weight is clamped to ``[w_min, w_max]``. EDGE-GRPO's second part, Guided Error Correction (injecting corrective
    guidance into wrong responses of collapsed groups), acts on the rollout and is not part of this option.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask`` and ``entropy``.
        min_weight, max_weight: clamp, ``0 <= min_weight <= 1 <= max_weight``.
        eps: floor on the mean entropy of a response.
    Returns:
        ``[N, T]`` ``advantages * w``, ``w`` constant along each sequence (1 for a sequence without valid actions).
    """
    if not 0 <= min_weight <= 1 <= max_weight:
        raise ValueError(f"need 0 <= min_weight <= 1 <= max_weight, got {min_weight!r}, {max_weight!r}")
    _, valid, entropy = entropy_inputs(batch, "entropy_driven")
    present = valid.any(1)  # [N]
    per_sequence = torch.where(valid, entropy, 0.0).sum(1) / valid.sum(1).clamp_min(1)  # [N]
    batch_mean = per_sequence[present].mean() if present.any() else entropy.new_ones(())
    weight = (batch_mean.clamp_min(eps) / per_sequence.clamp_min(eps)).clamp(min_weight, max_weight)  # [N]
    return advantages * torch.where(present, weight, 1.0)[:, None]  # [N, T]


@CREDIT_RULES.register(
    "polarity_token_weights",
    needs=("behaviour_logp",),
    formula="p_it = exp(logπ_behaviour); A>0: w = 1 + α₊·s·(1 − p_it); A<0: w = 1 + α₋·s·p_it; A=0: w = 1; "
    "s = 1 − progress if anneal else 1",
    source="[111] A3PO (token-level part)",
    summary="Asymmetric token shaping: more credit to uncertain tokens of good samples, more blame to confident "
    "tokens of bad ones.",
)
def polarity_token_weights(
    advantages: Tensor,
    batch: StepBatch,
    *,
    alpha_pos: float = 0.5,
    alpha_neg: float = 0.5,
    anneal: bool = False,
) -> Tensor:
    """Token-level half of A3PO [111]: the advantage of each token is reshaped according to the sample's polarity.

    Reading chosen: the abstract says "adaptive and asymmetric token-level advantage shaping ... key tokens across
    different polarities" without the criterion. genalign takes the behaviour probability ``p_t`` of the sampled
    token: in a positive sample the *low*-probability tokens are where the correct pattern was still uncertain, and
    sharpening them matters (``w = 1 + α₊(1 − p_t)``); in a negative sample the *high*-probability tokens are the
    confident errors (``w = 1 + α₋·p_t``). "Adaptive": with ``anneal`` both ``α`` decay linearly to 0 over training
    (``α·(1 − progress)``). Weights are ``>= 1`` and not renormalised. Pair it with ``advantage: asymmetric`` (the
    sample-level half) for A3PO.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``sample_advantages`` (only their sign), ``mask``, ``behaviour_logp`` (the sampled tokens'
            log-probs) and ``progress`` (with ``anneal``).
        alpha_pos, alpha_neg: ``α₊, α₋ >= 0``.
        anneal: decay both ``α`` linearly to 0 with ``progress``.
    Returns:
        ``[N, T]`` ``advantages * w`` with ``w`` in ``[1, 1 + α]`` (1 where ``A = 0`` and on padding).
    """
    if not (alpha_pos >= 0 and alpha_neg >= 0):
        raise ValueError(f"alpha_pos and alpha_neg must be >= 0, got {alpha_pos!r}, {alpha_neg!r}")
    logp = batch.require("behaviour_logp", "polarity_token_weights").detach()
    valid, sample = batch.mask > 0, batch["sample_advantages"].detach()
    scale = 1.0
    if anneal:
        progress = batch.get("progress")
        if progress is None or not 0 <= progress <= 1:
            raise ValueError(f"polarity_token_weights with anneal=True needs progress in [0, 1], got {progress!r}")
        scale = 1.0 - progress
    probs = torch.where(valid, logp, 0.0).to(advantages.dtype).exp().clamp_max(1.0)  # [N, T] p_t
    positive = valid & (sample > 0)[:, None]  # [N, T]
    negative = valid & (sample < 0)[:, None]  # [N, T]
    weights = torch.where(positive, 1.0 + scale * alpha_pos * (1.0 - probs), 1.0)  # [N, T]
    return advantages * torch.where(negative, 1.0 + scale * alpha_neg * probs, weights)  # [N, T]
