"""Criterion-distilled credit (CriPO [273], experimental tier): a self-teacher that sees the rubric criterion, a
localized forward-KL term that injects what the criterion asks for, and a counterfactual comparison that rescues the
criterion-relevant tokens of negative-advantage samples.

The teacher is the policy with the criterion in its context and, as its counterfactual, without it:
``algorithm.teacher: {source: self, weights: current, context: "\\nCriterion: {rubric}\\n", contrast_context: ""}``
(the contrast pass then scores the plain prompt). Per action ``t`` of sample ``i``:

* relevance ``r_it = log π(o_t | x, criterion) − log π(o_t | x)`` (``teacher_action_logp − teacher_contrast_logp``):
  how much the criterion explains the token;
* the forward-KL term ``F_it = clip(π_T/π_S(o_t) − 1, −1, r_max − 1)`` (the importance-weighted forward-KL gradient of
  :func:`~genalign.experimental.credit.distillation.opd`), *localized*: kept only on the ``⌈ρ·|o_i|⌉`` actions of
  the sample where the exact forward KL over the vocabulary ``KL_V(π_T ‖ π_S)`` (``teacher_vocab_forward_kl``) is
  largest, the positions where the criterion-injected teacher would change the distribution most.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.experimental.credit.distillation import _check_mixing, _with_check, teacher_gap


def top_fraction(values: Tensor, mask: Tensor, fraction: float) -> Tensor:
    """``[N, T]`` bool: per row, the ``⌈fraction·m_i⌉`` valid positions (``mask``, ``m_i`` of them) with the largest
    ``values`` (ties by position: the earlier first)."""
    valid = mask > 0
    counts = torch.ceil(valid.sum(1).float() * fraction).long()  # [N]
    ranked = torch.where(valid, values, float("-inf")).argsort(dim=1, descending=True, stable=True)  # [N, T]
    ranks = torch.empty_like(ranked)
    ranks.scatter_(1, ranked, torch.arange(values.shape[1], device=values.device).expand_as(ranked))  # [N, T]
    return valid & (ranks < counts[:, None])


def _check_criterion(
    *, coef: float = 1.0, reward_weight: float = 1.0, fraction: float = 0.2, relevance_threshold: float = 0.5,
    max_ratio: float = 5.0, **_,
) -> None:  # fmt: skip
    _check_mixing(coef=coef, reward_weight=reward_weight)
    if not (0 < fraction <= 1 and math.isfinite(relevance_threshold) and max_ratio > 1):
        raise ValueError(
            f"criterion_distillation: fraction must be in (0, 1], relevance_threshold finite and max_ratio > 1; got "
            f"fraction={fraction!r}, relevance_threshold={relevance_threshold!r}, max_ratio={max_ratio!r}"
        )


@CREDIT_RULES.register(
    "criterion_distillation",
    needs=("teacher_action_logp", "teacher_contrast_logp", "teacher_scored", "behaviour_logp",
           "teacher_vocab_forward_kl"),
    bind=_with_check(_check_criterion, "criterion_distillation"),
    formula="r_t = logπ(o_t|x,criterion) − logπ(o_t|x); flip_t = [A_it < 0 ∧ r_t > τ]; L_t = [KL_V(π_T‖π_S)_t in "
    "the top ⌈ρ·|o_i|⌉ of the sample]; F_t = clip(π_T/π_S(o_t) − 1, −1, r_max − 1); "
    "A'_it = w_r·(flip_t ? |A_it| : A_it) + c·L_t·F_t",
    source="[273] CriPO (criterion-injection self-teacher, localized forward KL, counterfactual advantage flip; "
    "localization by the vocabulary forward KL and the relevance threshold: genalign's reading)",
    summary="Rubric criteria through a self-teacher: a forward-KL term on the tokens the criterion would change most, "
    "and criterion-relevant tokens of negative-advantage samples flipped to a positive advantage.",
)  # fmt: skip
def criterion_distillation(
    advantages: Tensor,
    batch: StepBatch,
    *,
    coef: float = 1.0,
    reward_weight: float = 1.0,
    fraction: float = 0.2,
    relevance_threshold: float = 0.5,
    max_ratio: float = 5.0,
) -> Tensor:
    """Criterion-Distilled Policy Optimization (CriPO [273], module docstring).

    ``A'_it = w_r·(flip_it ? |A_it| : A_it) + coef·L_it·F_it``: for *suppressed criteria*, an action of a sample
    whose advantage is negative keeps the magnitude but turns positive when the criterion explains it
    (``r_it > τ``: the counterfactual self-teacher without the criterion finds it less likely); for *unexplored
    criteria*, the localized forward-KL term pulls the student towards the criterion-injected teacher where their
    distributions differ most. Samples the teacher did not score keep their advantage.

    Reading chosen: the abstract names a criterion-injection self-teacher, a localized forward-KL loss and a
    counterfactual self-teacher that flips token advantages, without their forms. genalign's teacher holds one
    criterion text per prompt (a row column in the context; several criteria are joined in it), the forward KL acts
    through the ratio (importance-weighted at the sampled token) on the ``fraction`` of each sample's tokens with the
    largest exact vocabulary forward KL, and a token counts as criterion-relevant when the criterion raises its
    log-prob by more than ``relevance_threshold``. Which criteria a sample satisfies (the paper's UC / SC split) is not
    read: the forward term applies to every scored sample, the flip to every negative-advantage one.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``teacher_action_logp``, ``teacher_contrast_logp``, ``teacher_scored``, ``behaviour_logp``,
            ``teacher_vocab_forward_kl``, ``mask``.
        coef: ``c >= 0``; reward_weight: ``w_r >= 0``; fraction: ``ρ`` in ``(0, 1]``; relevance_threshold: ``τ``;
        max_ratio: ``r_max > 1``.
    Returns:
        ``[N, T]`` advantages.
    """
    _check_criterion(coef=coef, reward_weight=reward_weight, fraction=fraction,
                     relevance_threshold=relevance_threshold, max_ratio=max_ratio)  # fmt: skip
    rule, device = "credit rule 'criterion_distillation'", advantages.device
    gap, scored = teacher_gap(batch, rule, device)  # [N, T]
    injected = batch.require("teacher_action_logp", rule).to(device).float()  # [N, T]
    plain = batch.require("teacher_contrast_logp", rule).to(device).float()  # [N, T]
    divergence = batch.require("teacher_vocab_forward_kl", rule).to(device).float()  # [N, T]
    relevant = scored & (injected - plain > relevance_threshold)  # [N, T]
    flipped = torch.where(relevant & (advantages < 0), advantages.abs(), advantages)  # [N, T]
    localized = top_fraction(divergence, scored.float(), fraction)  # [N, T]
    forward = gap.exp().sub(1.0).clamp(-1.0, max_ratio - 1.0)  # [N, T]
    return reward_weight * flipped + coef * torch.where(localized, forward, 0.0).to(advantages.dtype)
