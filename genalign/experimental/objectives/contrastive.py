"""ConSPO [74], whose form genalign chose from the abstract (experimental tier)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from genalign.algorithms.batch import StepBatch, require
from genalign.algorithms.objectives.base import OBJECTIVES
from genalign.algorithms.objectives.group_terms import (
    batch_inputs,
    group_count,
    group_logsumexp,
    on_actions,
    sample_advantages,
    sequence_mean,
)
from genalign.algorithms.scores import ScoreOutput


@OBJECTIVES.register(
    "conspo",
    whole_groups=True,
    aggregation="seq_mean_token_mean",
    uses_old_logp=False,
    formula="s_i = mean_t logπθ(o_it); positive i: ℓ_i = −log(e^{(s_i−m)/τ} / (e^{(s_i−m)/τ} + Σ_{j∈N_q} e^{s_j/τ})); "
    "J_q = mean_{i∈P_q} ℓ_i; m = m₀ + (m₁ − m₀)·progress",
    source="[74] ConSPO",
    summary="Group InfoNCE: each positive is contrasted with the group's negatives on length-normalised sequence "
    "log-probs, with a margin that grows over training.",
)
def conspo(
    score: ScoreOutput,
    advantages: Tensor,
    batch: StepBatch,
    *,
    temperature: float = 1.0,
    margin_start: float = 0.0,
    margin_end: float = 0.1,
) -> tuple[Tensor, dict[str, Tensor]]:
    """ConSPO [74]: the score of a rollout is its length-normalised sequence log-probability under the current policy,
    ``s_i = mean_t logπθ(o_{i,t})`` (no importance ratio, no clip); every positive ``i`` of a group is contrasted with
    the group's negatives by an InfoNCE term whose softmax weights strengthen the update of poorly separated
    positives (``∂ℓ_i/∂s_i = −(1 − p_i)/τ``) and of high-scoring negatives (``∂ℓ_i/∂s_j = p_j/τ``); the positive's
    score must beat the negatives by a margin ``m`` that a curriculum raises during training.

    Reading chosen: the abstract gives neither the schedule nor the values. genalign takes
    ``ℓ_i = softplus(LSE_{j∈N}(s_j/τ) − (s_i − m)/τ)`` (the InfoNCE form with the positive's logit shifted by ``m``),
    ``J_q = mean_{i∈P_q} ℓ_i``, a margin linear in training progress from ``margin_start`` to ``margin_end``, and
    defaults ``τ = 1`` (gradient scale comparable to GRPO's) and ``m`` from 0 to 0.1 nat per token.

    Args:
        score: ``logp`` ``[n, T]`` (with grad).
        advantages: ``[n]`` or ``[n, T]`` (their sign marks positives and negatives).
        batch: ``mask``, ``group_ids``; ``progress`` when ``margin_start != margin_end``.
        temperature: ``τ > 0``.
        margin_start, margin_end: margin at the start and at the end of training (nats per token, >= 0).
    Returns:
        ``(loss [n, T], metrics)``: positive ``i`` of group ``q`` carries ``ℓ_i · G_q / |P_q|`` on each valid action,
        other samples 0; metrics ``conspo/margin``, ``conspo/positive_prob`` (mean ``p_i`` over positives),
        ``conspo/groups_contrasted``.
    """
    if not temperature > 0:
        raise ValueError(f"temperature={temperature!r} must be > 0 (the InfoNCE temperature τ, e.g. 1.0).")
    if not (margin_start >= 0 and margin_end >= 0):
        raise ValueError(f"margin_start={margin_start!r} and margin_end={margin_end!r} must be >= 0 (nats per token).")
    margin = margin_start
    if margin_end != margin_start:
        margin += (margin_end - margin_start) * float(require(batch, "progress", "objective 'conspo'"))
    logp, mask, groups = batch_inputs(score, batch, "conspo")
    adv = sample_advantages(advantages, mask)  # [n]
    positive, negative = adv > 0, adv < 0  # [n]
    scores = sequence_mean(logp, mask)  # [n] s_i
    negatives_lse = group_logsumexp(scores / temperature, negative, groups)[groups.index]  # [n]
    logit = (scores - margin) / temperature  # [n]
    nce = torch.where(positive, F.softplus(negatives_lse - logit), 0.0)  # [n]; 0 without negatives (LSE = −inf)
    positives = group_count(positive, groups)  # [G]
    weight = groups.sizes.to(logp.dtype) / positives.clamp_min(1.0)  # [G]
    loss = on_actions(nce * weight[groups.index], mask)  # [n, T]
    contrasted = (positives > 0) & (group_count(negative, groups) > 0)  # [G]
    with torch.no_grad():
        prob = torch.exp(-nce[positive]).mean() if positive.any() else torch.tensor(float("nan"))
        metrics = {
            "conspo/margin": torch.tensor(margin),
            "conspo/positive_prob": prob,
            "conspo/groups_contrasted": contrasted.float().mean(),
        }
    return loss, metrics
