"""Credit on a growing prefix of each response: Progressive Prefix Retention of PPPO [215] (a rule of
:data:`~genalign.algorithms.credit.base.CREDIT_RULES`)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.credit.base import CREDIT_RULES


def valid_positions(mask: Tensor) -> tuple[Tensor, Tensor]:
    """``(position [N, T], length [N, 1])``: the 1-based index of each action among the valid actions of its row and
    the row's number of valid actions (left padding or holes do not shift the positions)."""
    valid = (mask > 0).long()
    return torch.cumsum(valid, 1), valid.sum(1, keepdim=True)


def retained_fraction(progress: float, start: float, end: float) -> float:
    """The fraction of each response kept at ``progress`` in ``[0, 1]``: linear from ``start`` to ``end``."""
    return start + (end - start) * progress


@CREDIT_RULES.register(
    "progressive_prefix",
    needs=(),
    formula="r = r₀ + (r₁ − r₀)·progress; A_it ← A_it·1[pos_it ≤ max(m, ⌈r·|o_i|⌉)] (loss on the prefix only)",
    source="[215] PPPO (Progressive Prefix Retention; schedule inferred from the abstract)",
    summary="Train only the first tokens of each response, a fraction that grows over training (beginning "
    "lock-in: how a response starts constrains where it ends).",
)
def progressive_prefix(
    advantages: Tensor,
    batch: StepBatch,
    *,
    start_fraction: float = 0.1,
    end_fraction: float = 0.5,
    min_tokens: int = 1,
) -> Tensor:
    """Progressive Prefix Retention of PPPO [215]: the loss covers the first ``⌈r·|o_i|⌉`` tokens of each response,
    with ``r`` growing over training, so the policy first learns how to *start* reasoning well (the Beginning Lock-in
    Effect) and the trained prefix lengthens as it improves.

    Reading chosen: the abstract gives "increasing the proportion of retained prefix tokens during training" and a
    headline of 26 % of the training tokens; genalign grows ``r`` linearly with ``progress`` from ``r₀ = 0.1`` to
    ``r₁ = 0.5`` (about 30 % of the tokens over a run). The dropped tokens get advantage 0 but stay in the
    aggregation's denominators. PPPO's second part, Continuation Accumulated Reward (several continuations sampled
    from one prefix, their scores accumulated as the prefix's reward), is the tree rollout of the causal LM with
    ``grpo_ma`` before this rule: ``policy.tree: {split_positions: [p], branching: [M]}`` and ``algorithm.credit:
    [grpo_ma, progressive_prefix]`` credit each ``p``-token prefix with the mean outcome of its ``M`` continuations
    (normalised over the group's prefixes); alone, this rule uses the sample's own reward.

    Args:
        advantages: ``[N, T]`` incoming per-action advantages.
        batch: reads ``mask`` and ``progress``.
        start_fraction: ``r₀`` in ``(0, 1]``, the fraction kept at the start of training.
        end_fraction: ``r₁`` in ``[r₀, 1]``, the fraction kept at the end.
        min_tokens: at least this many leading tokens are kept (``>= 1``).
    Returns:
        ``[N, T]`` ``advantages`` on the retained prefix, 0 after it.
    """
    if not 0 < start_fraction <= end_fraction <= 1:
        raise ValueError(f"need 0 < start_fraction <= end_fraction <= 1, got {start_fraction!r}, {end_fraction!r}")
    if min_tokens < 1:
        raise ValueError(f"min_tokens must be >= 1, got {min_tokens!r}")
    progress = batch.require("progress", "progressive_prefix")
    if not 0 <= progress <= 1:
        raise ValueError(f"progressive_prefix needs progress in [0, 1], got {progress!r}")
    position, length = valid_positions(batch.mask)  # [N, T], [N, 1]
    fraction = retained_fraction(progress, start_fraction, end_fraction)
    keep_length = torch.ceil(fraction * length.double() - 1e-9).clamp_min(min_tokens)  # [N, 1]; 0.1·10 is 1, not 2
    kept = (batch.mask > 0) & (position <= keep_length)  # [N, T]
    return advantages * kept.to(advantages.dtype)  # [N, T]
