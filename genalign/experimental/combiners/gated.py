"""A dense reward that counts only behind a relevance gate (GenRec's hybrid reward [52]): a reward combiner of
:data:`~genalign.algorithms.reward_combiners.REWARD_COMBINERS` (experimental tier)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from genalign.algorithms.reward_combiners import (
    REWARD_COMBINERS,
    check_combiner_inputs,
    reward_statistics,
    weighted_nansum,
)


@REWARD_COMBINERS.register(
    "relevance_gated",
    min_rewards=2,
    formula="g_i = r_i,gate ≥ τ; r_i = Σ_{k≠gate} w_k r_ik if g_i else gated_value (NaN where the gate is missing)",
    source="[52] GenRec GRPO-SR hybrid reward (dense reward model behind a relevance gate)",
    summary="The dense reward counts only for samples that pass a relevance check, so the policy cannot earn it with "
    "outputs that please the reward model but are irrelevant.",
)
def relevance_gated(
    rewards: Tensor,
    group_ids: Tensor,
    weights: Tensor | Sequence[float],
    *,
    gate_column: int = -1,
    threshold: float = 0.5,
    gated_value: float = 0.0,
    names: Sequence[str] | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """GenRec's hybrid reward [52]: a dense reward model gives fine-grained preference scores but can be hacked;
    a relevance gate decides whether the dense score counts at all. A sample whose relevance reward reaches ``τ``
    gets the weighted sum of the other (dense) rewards, one that fails it gets ``gated_value``.

    Reading chosen: the abstract names the two parts, not how they combine; genalign multiplies by a hard gate
    (``1[r_gate ≥ τ]``) with a fixed value for gated-out samples (0 by default: no dense reward, the group's
    estimator then ranks them below every relevant sample with a positive score). The gate column's own weight is not
    used. A sample whose gate reward is missing has no combined reward (NaN, advantage 0).

    Args:
        rewards: ``[N, K]``, ``K >= 2``; NaN = missing.
        group_ids: ``[N]`` integer group of each sample (checked for shape).
        weights: ``[K]`` reward weights (of the dense columns).
        gate_column: column of the relevance reward (default: the last).
        threshold: ``τ``, the relevance a sample needs.
        gated_value: the combined reward of a sample that fails the gate.
        names: reward names for ``stats`` (plus ``relevance_gated/frac_passed``).
    Returns:
        ``(combined [N], stats)``.
    """
    rewards, weights = check_combiner_inputs(rewards, group_ids, weights)
    k = rewards.shape[1]
    if k < 2 or not -k <= gate_column < k:
        raise ValueError(
            f"relevance_gated needs a dense and a relevance reward (K >= 2 columns) and gate_column in [-K, K), got "
            f"K={k}, gate_column={gate_column!r}"
        )
    gate = gate_column % k
    dense_columns = [j for j in range(k) if j != gate]
    dense = weighted_nansum(rewards[:, dense_columns], weights[dense_columns])  # [N]
    relevance = rewards[:, gate]  # [N]
    passed = relevance >= threshold  # [N]; NaN never passes
    combined = torch.where(passed, dense, torch.full_like(dense, gated_value))  # [N]
    combined = torch.where(torch.isnan(relevance), torch.nan, combined)  # [N]
    stats = reward_statistics(rewards, names)
    present = ~torch.isnan(relevance)
    stats["relevance_gated/frac_passed"] = float(passed[present].float().mean()) if present.any() else float("nan")
    return combined, stats
