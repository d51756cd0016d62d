"""Reward-reading credit whose form genalign chose from the abstract (experimental tier)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES
from genalign.algorithms.credit.shaping import success_mask


@CREDIT_RULES.register(
    "outcome_reshaped",
    needs=("rewards",),
    formula="w_i = c₊·N/N₊ for correct samples, c₋·N/N₋ otherwise (N, N₊, N₋ = valid actions of all / correct / "
    "other samples); with token_mean aggregation L = c₊·tokmean₊(L) + c₋·tokmean₋(L)",
    source="[147] OREAL (official recipe without the token-level reward model: rloo advantages, c₊ = 1, c₋ = 0.5)",
    summary="OREAL's reshaping: correct and incorrect samples each normalised by their own token count, the "
    "negative part down-weighted, for gradient consistency with best-of-N behaviour cloning.",
)
def outcome_reshaped(
    advantages: Tensor,
    batch: StepBatch,
    *,
    positive_factor: float = 1.0,
    negative_factor: float = 0.5,
    success_column: int = 0,
    success_threshold: float = 0.0,
) -> Tensor:
    """OREAL [147]: behaviour cloning on positive best-of-N samples learns the KL-regularised optimal policy for binary
    rewards; the negative samples' rewards are reshaped so that their gradient is consistent with it.

    OREAL's published recipe (``oreal_wo_tokenrm``) trains positives with ``−A·log π`` and negatives with the
    policy-gradient term ``−ρ·A`` (RLOO advantages), each summed over its tokens and divided by the token count of
    its own set, with factors ``c₊ = 1`` and ``c₋ = 0.5``. This rule multiplies each sample's advantages by
    ``c₊·N/N₊`` (correct samples) or ``c₋·N/N₋`` (the others), so that the ``token_mean`` aggregation (which divides
    by ``N``) yields exactly ``c₊·Σ₊/N₊ + c₋·Σ₋/N₋``; at ratio 1 the gradients equal OREAL's.

    Reading chosen: the counts are taken over the rollout batch of the process (exact with one process and one
    minibatch; OREAL counts over the global batch); pair with ``advantage: rloo`` and ``aggregation: token_mean``.
    OREAL's token-level reward model (importance weights from a token scorer trained on the outcomes) is the rule
    ``token_reward_head``, listed after this one.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``rewards`` ``[N, K]`` and ``mask``.
        positive_factor: ``c₊ >= 0``.
        negative_factor: ``c₋ >= 0``.
        success_column: reward column that says whether a response is correct.
        success_threshold: a response is correct when that reward exceeds it.
    Returns:
        ``[N, T]`` ``advantages * w_i``.
    """
    if not (positive_factor >= 0 and negative_factor >= 0):
        raise ValueError(f"the factors must be >= 0, got {positive_factor!r}, {negative_factor!r}")
    correct, _ = success_mask(batch, success_column, success_threshold, "outcome_reshaped")
    correct = correct.to(advantages.device)
    tokens = (batch.mask.to(advantages.device) > 0).sum(1).to(advantages.dtype)  # [N]
    total, positive = tokens.sum(), torch.where(correct, tokens, 0.0).sum()
    negative = total - positive
    weight = torch.where(
        correct,
        positive_factor * total / positive.clamp_min(1.0),
        negative_factor * total / negative.clamp_min(1.0),
    )  # [N]
    return advantages * weight[:, None]  # [N, T]
