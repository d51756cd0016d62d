"""Credit rules that single out entropy-critical tokens and gate their reweighting: STARE's surprisal quantiles with a
closed-loop entropy gate [217] and ERPO's entropy-regulated pivots [251] (rules of
:data:`~genalign.algorithms.credit.base.CREDIT_RULES`).

Both compute their weights once on the whole optimisation batch, before it is split into micro-batches (the
trainer's credit stage), from the behaviour log-probs and the entropy of the scoring pass before the update.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES


def top_by_score(scores: Tensor, subset: Tensor, fraction: float) -> Tensor:
    """``[N, T]`` bool: the ``max(1, ⌈fraction·|subset|⌉)`` entries of ``subset`` with the largest ``scores`` (none
    when the subset is empty or ``fraction`` is 0); exactly that many, ties broken by ``torch.topk``."""
    chosen = torch.zeros_like(subset)
    count = int(subset.sum())
    if count == 0 or fraction <= 0:
        return chosen
    k = min(count, max(1, math.ceil(count * fraction)))
    picked = subset.flatten().nonzero().squeeze(1)[torch.topk(scores[subset], k).indices]  # flat indices
    chosen.view(-1)[picked] = True
    return chosen


@CREDIT_RULES.register(
    "entropy_critical_tokens",
    needs=("entropy",),
    formula="L± = top-P% surprisal (−logπ_old) tokens of the A>0 / A<0 tokens of the batch; gate = 1[mean_batch(H) "
    "< H_tgt]; w = W on L+ (O1), and M on L− (C2), 1 elsewhere or when the gate is off",
    source="[217] STARE (published code: compute_stare_token_weights, STAREController); differs: selects over the whole "
    "batch with the behaviour log-probs (code: per micro-batch, current log-probs), no adaptive W/M schedule",
    summary="Amplify the advantage of the most surprising tokens of positive samples (and damp those of negative "
    "ones) while the batch entropy is below a target: entropy-critical tokens under a closed-loop gate.",
)
def entropy_critical_tokens(
    advantages: Tensor,
    batch: StepBatch,
    *,
    top_fraction: float = 0.1,
    positive_weight: float = 1.1,
    negative_weight: float = 0.9,
    target_entropy: float = 0.3,
    variant: Literal["O1", "C2"] = "O1",
) -> Tensor:
    """STARE [217]: token-level advantage reweighting of entropy-critical tokens with a target-entropy gate.

    The first-order entropy change of a token is the trajectory advantage times an entropy-sensitivity function of
    the next-token distribution, largest at surprising tokens. STARE splits the batch's tokens by the sign of their
    sample's advantage, takes the top ``P`` fraction by surprisal ``−log π_old(o_t)`` in each side (``L+``, ``L−``)
    and multiplies their advantages by ``W > 1`` (``L+``; variant O1) and also ``M < 1`` (``L−``; variant C2). The
    closed-loop gate switches the reweighting on only while the batch's mean token entropy is below ``H_tgt``;
    otherwise every weight is 1 and the update is GRPO's.

    Defaults are the published ones (P = 10 %, W = 1.1, M = 0.9, H_tgt = 0.3, O1). Where genalign differs from the
    published code: the selection runs once over the whole optimisation batch with the behaviour log-probs (the code
    selects per micro-batch with the current log-probs, equal at the first inner step), the gate reads the entropy
    of the scoring pass before the update (the code: of the old-log-prob pass, the same quantity), and the optional
    adaptive schedule of W and M (the code's ``adaptive=False`` default) is not offered.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``sample_advantages`` (sign), ``mask``, ``behaviour_logp`` and ``entropy``.
        top_fraction: ``P`` in ``[0, 1]``.
        positive_weight: ``W >= 1`` on ``L+``.
        negative_weight: ``M`` in ``[0, 1]`` on ``L−`` (variant ``C2`` only).
        target_entropy: ``H_tgt``; the gate is on while the batch's mean entropy is below it.
        variant: ``O1`` (amplify ``L+`` only) or ``C2`` (also damp ``L−``).
    Returns:
        ``[N, T]`` ``advantages · w``.
    """
    if not 0 <= top_fraction <= 1:
        raise ValueError(f"top_fraction must be in [0, 1], got {top_fraction!r}")
    if not positive_weight >= 1 or not 0 <= negative_weight <= 1:
        raise ValueError(f"need positive_weight >= 1 and 0 <= negative_weight <= 1, got {positive_weight!r}, "
                         f"{negative_weight!r}")  # fmt: skip
    if variant not in ("O1", "C2"):
        raise ValueError(f"variant must be 'O1' or 'C2', got {variant!r}")
    entropy = batch.require("entropy", "entropy_critical_tokens").detach()
    surprisal = -batch.require("behaviour_logp", "entropy_critical_tokens").detach()  # [N, T]
    valid, sample = batch.mask > 0, batch["sample_advantages"].detach()
    batch_entropy = entropy[valid].float().mean() if valid.any() else entropy.new_zeros(())
    weights = torch.ones_like(advantages)  # [N, T]
    if not bool(batch_entropy < target_entropy):
        return advantages * weights  # gate off: GRPO
    weights[top_by_score(surprisal, valid & (sample > 0)[:, None], top_fraction)] = positive_weight
    if variant == "C2":
        weights[top_by_score(surprisal, valid & (sample < 0)[:, None], top_fraction)] = negative_weight
    return advantages * weights  # [N, T]


def progress_buckets(mask: Tensor, buckets: int) -> Tensor:
    """``[N, T]`` long: the bucket ``⌊B·(position − 1) / |o_i|⌋`` of each valid action (position counts the valid
    actions of its sequence from 1), so bucket ``b`` holds the ``b``-th ``1/B`` of every response."""
    valid = mask > 0
    position = torch.cumsum(valid.long(), 1)  # [N, T]
    length = valid.sum(1, keepdim=True).clamp_min(1)  # [N, 1]
    return ((position - 1).clamp_min(0) * buckets // length).clamp_max(buckets - 1)


def standardised_within(values: Tensor, valid: Tensor, key: Tensor, *, eps: float) -> Tensor:
    """``(v − mean_k) / (std_k + eps)`` with the mean and population std over the valid entries of each key ``k``
    (``[N, T]`` long); 0 where invalid or where a key has a single entry."""
    _, index = key[valid].unique(return_inverse=True)  # [n_valid]
    picked = values[valid].float()
    size = int(index.max()) + 1 if index.numel() else 0
    count = picked.new_zeros(size).index_add_(0, index, torch.ones_like(picked))
    mean = torch.zeros_like(count).index_add_(0, index, picked) / count.clamp_min(1)
    var = torch.zeros_like(count).index_add_(0, index, (picked - mean[index]) ** 2) / count.clamp_min(1)
    z = torch.where(count[index] > 1, (picked - mean[index]) / (var[index].sqrt() + eps), 0.0)
    out = picked.new_zeros(values.shape)
    out[valid] = z
    return out
