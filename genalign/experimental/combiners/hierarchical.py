"""A hierarchical reward over ordered failure levels (format → source → runtime → function), RCCA [92]: a reward
combiner of :data:`~genalign.algorithms.reward_combiners.REWARD_COMBINERS` (experimental tier)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from genalign.algorithms.reward_combiners import REWARD_COMBINERS, check_combiner_inputs, reward_statistics


def leading_passes(passed: Tensor) -> Tensor:
    """``[N]`` the number of consecutive passed levels from the first, of ``passed`` ``[N, L]`` bool."""
    return torch.cumprod(passed.long(), dim=1).sum(1)


@REWARD_COMBINERS.register(
    "hierarchical_levels",
    min_rewards=2,
    formula="levels k = 0..L−1 = the reward columns in order; pass_k = r_k ≥ τ (NaN fails); m_i = leading passed "
    "levels among the first L−1; r_i = (m_i + 1[m_i = L−1]·r_i,L−1) / L",
    source="[92] RCCA (hierarchical reward separating format, source-code, runtime and functional failures)",
    summary="Ordered failure levels: a sample earns one step per level it clears in order, and the graded last "
    "level (the functional score) only once every earlier level passes.",
)
def hierarchical_levels(
    rewards: Tensor,
    group_ids: Tensor,
    weights: Tensor | Sequence[float],
    *,
    threshold: float = 1.0,
    names: Sequence[str] | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """RCCA's hierarchical reward [92]: a generated application can fail at its format, its source code, its runtime
    or its functional requirements, and a single sequence reward blurs which one; the hierarchy separates them. The
    configured rewards are the levels, in order (e.g. ``format_regex``, a parse check, a run check, the rubric's
    functional score): a sample clears levels in order while each reward reaches ``τ``, earns ``1/L`` per level
    cleared before its first failure, and earns the graded last level (in ``[0, 1]``) only when every earlier level
    passes, so a runtime failure still ranks above a syntax error and any functional credit above both.

    Reading chosen: equal steps of ``1/L`` per level and a graded last level are ours; the reward weights are not
    used (the order carries the priority). Token-level credit from the rubric's attributions is the credit rule
    ``rubric_token_advantages`` (one relevance judge per rubric item).

    Args:
        rewards: ``[N, L]`` level rewards in order, ``L >= 2``; NaN = missing (fails the level).
        group_ids: ``[N]`` integer group of each sample (checked for shape).
        weights: ``[L]`` (unused).
        threshold: ``τ``, the reward that clears a level.
        names: reward names for ``stats`` (plus ``hierarchical_levels/frac_level_k``: the share clearing level k).
    Returns:
        ``(combined [N] in [0, 1], stats)``.
    """
    rewards, _ = check_combiner_inputs(rewards, group_ids, weights)
    levels = rewards.shape[1]
    if levels < 2:
        raise ValueError(f"hierarchical_levels needs at least 2 reward columns (ordered levels), got {levels}")
    passed = rewards >= threshold  # [N, L]; NaN never passes
    cleared = leading_passes(passed[:, :-1])  # [N] among the first L − 1
    last = torch.nan_to_num(rewards[:, -1], nan=0.0).clamp(0.0, 1.0)  # [N]
    combined = (cleared.to(rewards.dtype) + torch.where(cleared == levels - 1, last, 0.0)) / levels  # [N]
    stats = reward_statistics(rewards, names)
    reached = leading_passes(passed)  # [N] over every level
    for k in range(levels):
        stats[f"hierarchical_levels/frac_level_{k}"] = float((reached > k).float().mean())
    return combined, stats
