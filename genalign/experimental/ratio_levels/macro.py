"""Macro actions: runs of consecutive tokens as the unit of the importance ratio and of credit (ratio level of
:data:`~genalign.algorithms.ratio_levels.base.RATIO_LEVELS`; experimental tier)."""

from __future__ import annotations

import torch
from torch import Tensor

from genalign.algorithms.batch import StepBatch
from genalign.algorithms.ratio_levels.base import (
    RATIO_LEVELS,
    ClipFn,
    LevelOutput,
    action_positions,
    level_output,
    segment_mean,
)


def macro_action_ids(mask: Tensor, length: int) -> tuple[Tensor, Tensor]:
    """``(ids, sizes)``, both ``[N, T]`` long: the macro action of every action (consecutive windows of ``length``
    valid actions, counted from each row's first valid action) and the number of valid actions in it (the last
    window of a row may be shorter)."""
    position = action_positions(mask)  # [N, T] 1-based among the valid actions
    ids = ((position - 1.0) // length).long()  # [N, T]
    total = mask.sum(1, keepdim=True)  # [N, 1]
    sizes = (total - ids * length).clamp(1, length).long()  # [N, T]
    return ids, sizes


@RATIO_LEVELS.register(
    "macro_action",
    formula="macro action m = n consecutive tokens; ρ_im = Π_{t∈m} ρ_it = exp(Σ_{t∈m} ℓ_it), clipped per macro "
    "action; A_im = mean_{t∈m} A_it; every action of m carries A_im·clip(ρ_im)",
    source="[246] MA-RLHF (fixed n-gram macro actions)",
    summary="Macro actions of n tokens as the unit of the policy ratio and of credit: the ratio is the macro "
    "action's probability ratio, clipped once per macro action.",
)
def macro_action_level(
    log_ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_fn: ClipFn,
    batch: StepBatch,
    *,
    macro_length: int = 5,
) -> LevelOutput:
    """MA-RLHF [246]: the policy acts in macro actions (runs of tokens), which shortens the distance between actions
    and rewards. A macro action's probability is the product of its tokens' probabilities, so its importance ratio is
    ``ρ_m = exp(Σ_{t∈m} ℓ_t)`` (not a length-normalised mean as in ``sentence``), clipped once per macro action; its
    advantage is the mean of its actions' advantages (per-action credit from the rules before is pooled per macro
    action); every action of the macro action carries the macro action's surrogate, so the aggregation modes keep
    their meaning.

    Reading chosen: macro actions are fixed n-grams (MA-RLHF's n-gram termination; ``macro_length = 5`` is our
    default), counted over the valid actions of each sequence. The paper's parsing- and perplexity-based terminations
    and its macro-level critic are not built: group-relative advantages stand in for the critic.

    Args:
        log_ratio, advantages, mask: ``[N, T]``.
        clip_fn: the chosen clip form.
        batch: unused.
        macro_length: ``n >= 1`` tokens per macro action (1 gives the token level).
    """
    if not (isinstance(macro_length, int) and macro_length >= 1):
        raise ValueError(f"macro_length must be an integer >= 1 (tokens per macro action), got {macro_length!r}")
    ids, sizes = macro_action_ids(mask, macro_length)  # [N, T] each
    macro_log = segment_mean(log_ratio, mask, ids) * sizes.to(log_ratio.dtype)  # [N, T] Σ_{t∈m} ℓ_t
    pooled = torch.where(mask > 0, segment_mean(advantages, mask, ids), advantages)  # [N, T] A_m
    clipped = clip_fn(macro_log, pooled)
    return level_output(pooled, clipped.log_weight, macro_log, clipped)
