"""Entropy-guided softmax weights over the samples of a group: EGSW [314] (a rule of
:data:`~genalign.algorithms.credit.base.CREDIT_RULES`)."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES


def group_softmax_weights(scores: Tensor, valid: Tensor, group_ids: Tensor) -> Tensor:
    """``[N, T]``: at each column ``t``, the softmax of ``scores`` over the valid entries of each group, times their
    number (so equal scores give weight 1); 1 where invalid.

    Args:
        scores: ``[N, T]`` float.
        valid: ``[N, T]`` bool.
        group_ids: ``[N]`` integer.
    """
    weights = torch.ones_like(scores)
    for group in group_ids.unique():
        rows = (group_ids == group).nonzero().squeeze(1)  # [G]
        member = valid[rows]  # [G, T]
        logits = scores[rows].masked_fill(~member, -torch.inf)  # [G, T]
        soft = torch.softmax(logits, dim=0).nan_to_num(0.0)  # [G, T]; a column without valid entries gives NaN
        weights[rows] = torch.where(member, soft * member.sum(0, keepdim=True), 1.0)
    return weights


@CREDIT_RULES.register(
    "entropy_softmax_weights",
    needs=("entropy",),
    formula="token: w_it = n_gt·softmax_{j∈g, valid at t}((A_jt + α·H_jt)/P); sequence: w_i = G·softmax_{j∈g}((A_j + "
    "α·H̄_j)/P); A_it ← w·A_it",
    source="[314] EGSW (weights as in the paper; the n_gt scale is genalign's)",
    summary="Temperature-scaled softmax over the group's samples of advantage plus entropy: high-reward, "
    "high-uncertainty samples (or steps) weigh more.",
)
def entropy_softmax_weights(
    advantages: Tensor,
    batch: StepBatch,
    *,
    alpha: float = 0.5,
    temperature: float = 1.0,
    level: Literal["token", "sequence"] = "token",
) -> Tensor:
    """Entropy-Guided Sequence Weighting [314]: ``w_{i,t} ∝ exp((A_{i,t} + α·H_{i,t}) / P)``, normalised over the
    samples ``j`` of the group at step ``t`` (step-wise, ``level="token"``), or one weight per sample from its mean
    entropy ``H̄_i`` (trajectory-wise, ``level="sequence"``); the policy gradient of each action is multiplied by it.

    The paper normalises the weights to sum to 1 over the group; genalign multiplies them by the number of samples
    they are spread over (those valid at ``t``, or ``G``), so that equal scores give weight 1 and the gradient keeps
    GRPO's scale (``P → ∞`` is GRPO). Reading chosen: the abstract does not give ``α`` or ``P``; the defaults here
    (``α = 0.5``, ``P = 1``) are genalign's, and the advantage inside the softmax is the incoming per-action one
    (``token``) or the sample's (``sequence``).

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``sample_advantages`` (``sequence``), ``mask``, ``group_ids`` and ``entropy``.
        alpha: ``α >= 0``, the weight of entropy against advantage.
        temperature: ``P > 0``.
        level: ``token`` (step-wise) or ``sequence`` (trajectory-wise).
    Returns:
        ``[N, T]`` ``advantages · w`` (1 on padding).
    """
    if not alpha >= 0 or not temperature > 0:
        raise ValueError(f"need alpha >= 0 and temperature > 0, got {alpha!r}, {temperature!r}")
    if level not in ("token", "sequence"):
        raise ValueError(f"level must be 'token' or 'sequence', got {level!r}")
    entropy = batch.require("entropy", "entropy_softmax_weights").detach().float()
    valid = batch.mask > 0  # [N, T]
    if level == "token":
        scores = (advantages.detach().float() + alpha * entropy) / temperature  # [N, T]
        weights = group_softmax_weights(scores, valid, batch.group_ids)
    else:
        present = valid.any(1)  # [N]
        mean_entropy = torch.where(valid, entropy, 0.0).sum(1) / valid.sum(1).clamp_min(1)  # [N]
        scores = (batch["sample_advantages"].detach().float() + alpha * mean_entropy) / temperature  # [N]
        weights = group_softmax_weights(scores[:, None], present[:, None], batch.group_ids)  # [N, 1]
        weights = torch.where(valid, weights, 1.0)  # [N, T]
    return advantages * weights.to(advantages.dtype)  # [N, T]
