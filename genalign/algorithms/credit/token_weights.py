"""Token-level credit rules: multipliers on each action's advantage from its entropy or behaviour probability, and
the future-KL return-to-go (rules of :data:`~genalign.algorithms.credit.base.CREDIT_RULES`).

Each rule returns ``advantages * w`` with weights ``w`` ``[N, T]`` computed from the sign of the *sample* advantage
(``batch["sample_advantages"]``), the mask and a per-action feature. Weights that depend on batch statistics are computed
once on the whole optimisation batch, before it is split into micro-batches (the trainer's credit stage).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from genalign.algorithms._validation import check_float_tensor, check_mask, expand_advantages
from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES


def entropy_inputs(batch: StepBatch, rule: str) -> tuple[Tensor, Tensor, Tensor]:
    """``(sample advantages [N], valid [N, T] bool, entropy [N, T])``, detached, in the entropy's dtype."""
    entropy = batch.require("entropy", rule).detach()
    return batch["sample_advantages"].detach().to(entropy.dtype), batch.mask > 0, entropy


def normalised_share(score: Tensor, subset: Tensor) -> Tensor:
    """``score / mean_{subset}(score)`` ``[N, T]`` (1 outside ``subset`` or if the subset is empty)."""
    count = subset.sum()
    mean = torch.where(subset, score, 0.0).sum() / count.clamp_min(1)
    return torch.where(subset & (count > 0), score / mean.clamp_min(torch.finfo(score.dtype).tiny), 1.0)


@CREDIT_RULES.register(
    "high_entropy_tokens",
    needs=("entropy",),
    formula="w_it = 1 if H_it is among the top ⌈ρ·#valid⌉ entropies of the batch, else 0",
    source="[200] (forking tokens)",
    summary="Train only on the top-ρ fraction of highest-entropy actions of the batch (default 20 %).",
)
def high_entropy_tokens(advantages: Tensor, batch: StepBatch, *, rho: float = 0.2) -> Tensor:
    """Keep the gradient of "forking tokens" only: the top ``rho`` fraction of valid actions by entropy [200].

    The other actions get weight 0 (advantage 0) but stay in the aggregation denominators; ties at the threshold are
    all kept.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask`` and ``entropy``.
        rho: fraction of valid actions kept, in ``(0, 1]``.
    Returns:
        ``[N, T]`` ``advantages * w`` with ``w`` in {0, 1}.
    """
    if not 0 < rho <= 1:
        raise ValueError(f"rho must be in (0, 1], got {rho!r}")
    _, valid, entropy = entropy_inputs(batch, "high_entropy_tokens")
    scores = entropy[valid]  # [n_valid]
    if scores.numel() == 0:
        return advantages * 0.0
    k = math.ceil(rho * scores.numel())
    threshold = torch.topk(scores, k).values[-1]
    return advantages * (valid & (entropy >= threshold)).to(entropy.dtype)  # [N, T]


@CREDIT_RULES.register(
    "future_kl",
    needs=("kl",),
    formula="A_it = A_it − β·Σ_{j≥t} m_j·k1_j, added after the advantages are normalised",
    source="[75] FRPO",
    summary="Future-KL return-to-go: reverse cumulative KL to the reference subtracted from each action's advantage.",
)
def future_kl(advantages: Tensor, batch: StepBatch, *, coef: float = 0.01) -> Tensor:
    """Future-KL return-to-go of FRPO [75]: after the advantages are built (and normalised), each action's advantage
    gets ``−β · Σ_{j ≥ t} m_j·k1_j``, the reverse cumulative sum of per-action log-ratios to the reference (a
    reverse-KL return-to-go). Reward and KL are never fused before normalisation.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask`` and ``kl`` (``k1 = logπθ − logπ_ref`` of each action, from the scoring pass before the
            update).
        coef: ``β >= 0``.
    Returns:
        ``[N, T]`` shaped advantages (0 on padding).
    """
    if not coef >= 0:
        raise ValueError(f"coef must be >= 0, got {coef!r}")
    kl_per_action = check_float_tensor(batch.require("kl", "future_kl"), "kl", "[N, T]")
    shape = tuple(kl_per_action.shape)
    mask = check_mask(batch.mask, shape, kl_per_action.dtype)
    advantages = expand_advantages(advantages, shape).to(kl_per_action.dtype)  # [N, T]
    masked = torch.where(mask > 0, kl_per_action.detach(), 0.0)  # [N, T]
    to_go = masked.flip(1).cumsum(1).flip(1)  # [N, T] Σ_{j ≥ t}
    return torch.where(mask > 0, advantages - coef * to_go, 0.0)
